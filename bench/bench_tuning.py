"""Tuning benchmark: plan + verify of a 60-key profile, in process, against a temporary root
whose proc/sys is a plain directory tree (target < 10 ms together).

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


if __name__ == "__main__":
    bench_tuning()
