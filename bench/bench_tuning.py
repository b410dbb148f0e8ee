"""Tuning benchmark: plan + verify of a 60-key profile, in process, against a temporary root
whose proc/sys is a plain directory tree (target < 10 ms together); then plan + verify of the
largest shipped profile (inference-throughput with base) on a copy of the 8-GPU HGX fixture
(192 CPUs, 2 nodes) laid out with interrupts, intel_pstate cpufreq, four idle states per CPU,
huge page counters and a root disk, against the host's CPU partition (same target).

What is timed is what `mcpnode verify` and `apply --dry-run` do after the profile is loaded:
read every key through Host (`read_state`), decide (`plan`), and for verify classify the drift.
Profile loading (TOML parse + includes) is timed apart. Run alone with
`python bench/bench_tuning.py`, or as the last section of `make bench` (bench/run.py).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from mcpnode.host import Host  # noqa: E402
from mcpnode.tuning.apply import apply_profile  # noqa: E402
from mcpnode.tuning.journal import JournalStore  # noqa: E402
from mcpnode.tuning.plan import plan  # noqa: E402
from mcpnode.tuning.profile import load_profile  # noqa: E402
from mcpnode.tuning.state import read_state  # noqa: E402
from mcpnode.tuning.verify import verify  # noqa: E402

KEYS = 60
TARGET_S = 0.010


def build(tmp: Path) -> tuple[Path, Path]:
    """A root with KEYS sysctls (a quarter of them multi-field) and a profile naming them all:
    exact integers, exact triples, at-least minimums and one preference list."""
    root = tmp / "root"
    lines = ["[profile]", 'summary = "bench"', "", "[sysctl]"]
    for i in range(KEYS - 1):
        key = f"bench.group{i % 6}.key_{i:02d}"
        path = root / "proc/sys" / key.replace(".", "/")
        path.parent.mkdir(parents=True, exist_ok=True)
        if i % 4 == 0:
            path.write_text("4096\t131072\t6291456\n")
            lines.append(f'"{key}" = "4096 131072 16777216"')
        elif i % 4 == 1:
            path.write_text("65530\n")
            lines.append(f'"{key}" = {{ min = 1048576 }}')
        else:
            path.write_text(f"{i}\n")
            lines.append(f'"{key}" = {i * 10}')
    cc = root / "proc/sys/net/ipv4"
    cc.mkdir(parents=True)
    (cc / "tcp_congestion_control").write_text("cubic\n")
    (cc / "tcp_available_congestion_control").write_text("reno cubic bbr\n")
    lines.append('"net.ipv4.tcp_congestion_control" = { prefer = ["bbr"], fallback = "cubic" }')
    (root / "proc/self").mkdir(parents=True)
    (root / "proc/self/status").write_text("Uid:\t0\t0\t0\t0\nCapEff:\t000001ffffffffff\n")
    (root / "proc/modules").write_text("")
    profiles = tmp / "profiles"
    profiles.mkdir()
    (profiles / "bench.toml").write_text("\n".join(lines) + "\n")
    return root, profiles


def median_s(fn: Callable[[], object], rounds: int) -> float:
    fn()
    samples = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def bench_tuning(rounds: int = 200) -> dict[str, float | int | bool]:
    print(f"\n== Tuning: plan + verify of a {KEYS}-key profile, in process, median")
    with tempfile.TemporaryDirectory(prefix="mcpnode-bench-tuning-") as tmp_name:
        root, profiles = build(Path(tmp_name))
        host = Host(root)
        profile = load_profile("bench", host, profiles)
        assert len(profile.settings) == KEYS
        t_load = median_s(lambda: load_profile("bench", host, profiles), rounds)
        t_plan = median_s(lambda: plan(profile, read_state(host, profile)), rounds)
        t_verify_drift = median_s(lambda: verify(host, profile), rounds)
        apply_profile(host, profile, JournalStore(host), log=_Quiet())
        assert verify(host, profile).ok
        t_verify_clean = median_s(lambda: verify(host, profile), rounds)
    total = t_plan + t_verify_clean
    verdict = "met" if total < TARGET_S else "MISSED"
    print(f"   load_profile (TOML, validation)     {t_load * 1000:7.2f} ms")
    print(f"   plan (read {KEYS} keys + decide)       {t_plan * 1000:7.2f} ms")
    print(f"   verify, before apply ({KEYS} drifted)  {t_verify_drift * 1000:7.2f} ms")
    print(f"   verify, after apply (no drift)      {t_verify_clean * 1000:7.2f} ms")
    print(f"   plan + verify target < 10 ms: {verdict} ({total * 1000:.2f} ms)")
    return {
        "keys": KEYS,
        "load_s": t_load,
        "plan_s": t_plan,
        "verify_drift_s": t_verify_drift,
        "verify_clean_s": t_verify_clean,
        "plan_plus_verify_s": total,
        "target_met": total < TARGET_S,
    }


class _Quiet:
    """A logger that drops the apply's per-write events (the bench prints its own lines)."""

    def info(self, *_args: object, **_kw: object) -> None:
        pass

    warning = error = info


def shipped_root(tmp: Path) -> Path:
    """The HGX fixture with interrupts (tests/support/irqroot.py) and the files
    inference-throughput's CPU power, C-state, huge page, THP and readahead keys read, as a 6.x
    kernel lays them out; every sysctl it names is given a kernel-like value."""
    from tests.support import irqroot

    root = irqroot.build(tmp / "hgx").root

    def put(rel: str, text: str) -> None:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    cpu = "sys/devices/system/cpu"
    online = (root / cpu / "online").read_text().strip()
    last = int(online.split("-")[-1])
    for n in range(last + 1):
        policy = f"{cpu}/cpufreq/policy{n}"
        put(f"{policy}/related_cpus", f"{n}\n")
        put(f"{policy}/scaling_driver", "intel_pstate\n")
        put(f"{policy}/scaling_governor", "powersave\n")
        put(f"{policy}/scaling_available_governors", "performance powersave\n")
        put(f"{policy}/energy_performance_preference", "balance_performance\n")
        put(
            f"{policy}/energy_performance_available_preferences",
            "default performance balance_performance balance_power power\n",
        )
        put(f"{cpu}/cpu{n}/power/energy_perf_bias", "6\n")
        for state, latency in enumerate((0, 2, 10, 170)):
            put(f"{cpu}/cpu{n}/cpuidle/state{state}/latency", f"{latency}\n")
            put(f"{cpu}/cpu{n}/cpuidle/state{state}/disable", "0\n")
    put(f"{cpu}/intel_pstate/min_perf_pct", "8\n")
    put(f"{cpu}/cpuidle/current_driver", "intel_idle\n")
    for node in (0, 1):
        put(f"sys/devices/system/node/node{node}/hugepages/hugepages-2048kB/nr_hugepages", "0\n")
    thp = "sys/kernel/mm/transparent_hugepage"
    put(f"{thp}/enabled", "[always] madvise never\n")
    put(f"{thp}/defrag", "always defer defer+madvise [madvise] never\n")
    put("proc/self/mountinfo", "22 1 259:1 / / rw - ext4 /dev/nvme0n1p1 rw\n")
    disk = "sys/devices/virtual/block/nvme0n1"
    put(f"{disk}/queue/read_ahead_kb", "128\n")
    put(f"{disk}/nvme0n1p1/partition", "1\n")
    (root / "sys/dev/block").mkdir(parents=True, exist_ok=True)
    link = root / "sys/dev/block/259:1"
    if not link.is_symlink():
        link.symlink_to("../../devices/virtual/block/nvme0n1/nvme0n1p1")
    put("proc/self/status", "Uid:\t0\t0\t0\t0\nCapEff:\t000001ffffffffff\n")
    put("proc/modules", "tcp_bbr 20480 0 - Live 0x0\n")
    put("proc/cmdline", "BOOT_IMAGE=/vmlinuz root=/dev/nvme0n1p1\n")
    host = Host(root)
    profile = load_profile("inference-throughput", host)
    for setting in profile.settings:
        if ":" in setting.key:
            continue
        path = root / "proc/sys" / setting.key.replace(".", "/")
        if not path.exists():
            triple = setting.key.endswith(("_rmem", "_wmem"))
            value = "4096 131072 6291456" if triple else "1"
            if setting.key.endswith("port_range"):
                value = "32768 60999"
            put(str(path.relative_to(root)), value + "\n")
    put("proc/sys/net/ipv4/tcp_available_congestion_control", "reno cubic bbr\n")
    put("proc/sys/net/ipv4/tcp_congestion_control", "cubic\n")
    put("proc/sys/net/core/default_qdisc", "fq_codel\n")
    return root


def read_floor(root: Path, files: list[str], checked: bool) -> Callable[[], object]:
    """One pass over the files a read pass reads, with nothing but the system calls: open, read
    and close (`checked`: also the lstat() before and the fstat() after the open that a recorded
    root's reads need, host/read.py). No Python layer, no decision: the floor of a pass."""
    import os

    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOFOLLOW
    paths = [str(root) + f for f in files]
    open_, read, close, lstat, fstat = os.open, os.read, os.close, os.lstat, os.fstat

    def bare() -> None:
        for p in paths:
            fd = open_(p, flags)
            read(fd, 4097)
            close(fd)

    def with_checks() -> None:
        for p in paths:
            lstat(p)
            fd = open_(p, flags)
            fstat(fd)
            read(fd, 4097)
            close(fd)

    return with_checks if checked else bare


def bench_shipped(rounds: int = 50) -> dict[str, float | int | bool]:
    """Alternates, round by round: plan, verify, and the floor of one pass (bare and with the
    checks), so that the machine's load falls on all of them alike."""
    from mcpnode.placement.source import partition_of, resolve

    print("\n== Tuning: plan + verify of inference-throughput (with base) on an HGX root, median")
    with tempfile.TemporaryDirectory(prefix="mcpnode-bench-shipped-") as tmp_name:
        root = shipped_root(Path(tmp_name))
        host = Host(root)
        profile = load_profile("inference-throughput", host)
        part = partition_of(resolve(host))
        state = read_state(host, profile, partition=part)
        items = len(plan(profile, state).items)
        apply_profile(host, profile, JournalStore(host), log=_Quiet(), partition=part)
        report = verify(host, profile, part)
        assert report.ok, report.drift[:3]
        with host.recording() as rec:
            read_state(host, profile, partition=part)
        files = sorted(rec.files)
        cases: dict[str, Callable[[], object]] = {
            "plan": lambda: plan(profile, read_state(host, profile, partition=part)),
            "verify": lambda: verify(host, profile, part),
            "bare": read_floor(root, files, checked=False),
            "checked": read_floor(root, files, checked=True),
        }
        samples: dict[str, list[float]] = {name: [] for name in cases}
        for fn in cases.values():
            fn()
        for _ in range(rounds):
            for name, fn in cases.items():
                t0 = time.perf_counter()
                fn()
                samples[name].append(time.perf_counter() - t0)
    t = {name: statistics.median(v) for name, v in samples.items()}
    total = t["plan"] + t["verify"]
    floor = 2 * t["bare"]
    verdict = "met" if total < TARGET_S else "MISSED"
    print(f"   {len(profile.settings)} settings -> {items} plan items ({part.describe()[:60]}…)")
    print(f"   plan (read + decide)                {t['plan'] * 1000:7.2f} ms")
    print(f"   verify, after apply (no drift)      {t['verify'] * 1000:7.2f} ms")
    print(f"   floor of one pass over its {len(files)} files:")
    print(f"     open + read + close               {t['bare'] * 1000:7.2f} ms")
    print(f"     + lstat + fstat (recorded root)   {t['checked'] * 1000:7.2f} ms")
    print(f"   plan + verify target < 10 ms: {verdict} ({total * 1000:.2f} ms)", end="")
    print(
        f"; two bare passes alone {floor * 1000:.2f} ms"
        + (", over the target" if floor >= TARGET_S else "")
    )
    return {
        "settings": len(profile.settings),
        "items": items,
        "files": len(files),
        "plan_s": t["plan"],
        "verify_clean_s": t["verify"],
        "plan_plus_verify_s": total,
        "floor_bare_pass_s": t["bare"],
        "floor_checked_pass_s": t["checked"],
        "target_met": total < TARGET_S,
    }


if __name__ == "__main__":
    bench_tuning()
    bench_shipped()
