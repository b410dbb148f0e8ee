"""Discovery benchmarks. Figures are ratios against a peer run in the same script, alternated
round by round, because these machines are noisy (STYLE: speed is measured here, not in tests).

1. Whole process: `mcpnode topo --format json --root X` vs hwloc's
   `lstopo-no-graphics --whole-io --of xml` on the same unpacked dump (../shared/hosts), target
   <= 2.5x on every dump, with the floors of a Python command in the same rounds:
   `python -c pass`, `python -c "import json"` and the interpreter importing the modules `topo`
   imports (PY_FLOORS) against the same lstopo, and the interpreter replaying the reads `topo`
   makes on that dump and nothing else (READS_FLOOR).
   Then the floor every Python CLI pays here: `python -c pass` and `python -c "import click"`.
2. In process: `discover(Host(X))` per dump.
3. Scale: a synthetic 2-socket host (8 GPUs, 8 NICs) with 0..8,192 SR-IOV VFs from the
   fixture generator, against lstopo on the same roots: marginal cost per PCI function, 4,096
   VFs in process, peak RSS at 8,192 (bench/bench_scale.py).
4. `mcpnode --help` start-up.
5. NVML replay cost: `discover(Host(root), RecordedNvml(calls))` vs `discover(Host(root))` on
   the fixture hosts that carry recorded NVML answers (`mcpnode-snapshot.json`).
6. Tuning: plan + verify of a 60-key profile in process against a temporary root, and of the
   largest shipped profile (inference-throughput) on the HGX fixture with its CPU power, idle
   state, huge page and disk files (bench/bench_tuning.py; target < 10 ms each).
7. Audit: whole-process `mcpnode audit` on this machine (live, `--root /`), text and JSON,
   against the `mcpnode --help` start-up it includes (target < 0.5 s), plus the same over the
   HGX H100 fixture (8 GPUs with recorded NVML) for a GPU host's cost.
8. Manifest: build + publish on the HGX fixture in process (target < 20 ms), and 1,000
   read-while-republish rounds with a reader process (partial reads must be 0)
   (bench/bench_manifest.py).
9. Agent: idle CPU and RSS of a running `mcpnode agent`, drift written -> restored at the
   default interval, injected udev event -> manifest republished, and one reconcile cycle of
   a 60-key profile (bench/bench_agent.py).
10. Hostile input: TOML bombs refused, a 40x6 include fan-out resolved by `config check`, and
   the peak RSS of `topo` on a 2 GiB sparse attribute, each against a benign peer
   (bench/bench_bounds.py).
11. Launch: whole-process `mcpnode exec --gpu 0 -- true` from a published manifest against
   `python -c pass` and `numactl --cpunodebind=0 --membind=0 true`, on a 1-GPU and an 8-GPU
   root, with `--fresh` (discovery) beside it (bench/bench_exec.py).
12. Tarball roots: `topo --root X.tar.bz2` and `.tar.gz` against decompression (`bzip2 -dc`,
   `gzip -dc`) plus `topo` on the unpacked directory (bench/bench_tarball.py; target <= 1.25x).
13. Kernel log: records per second the agent's watcher reads and parses from a 100,000-record
   `dev/kmsg`, batch by batch, against `wc -l` over the same file (bench/bench_kmsg.py).

Last, one table of every ratio per dump and every target with met/MISSED (bench/bench_summary.py).

Run with `make bench`; writes bench/out/results.json too. Exits non-zero only on breakage,
never on a missed target (targets are printed next to the figures).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_agent import bench_agent  # noqa: E402
from bench_bounds import bench_bounds  # noqa: E402
from bench_exec import bench_exec  # noqa: E402
from bench_kmsg import bench_kmsg  # noqa: E402
from bench_manifest import bench_manifest  # noqa: E402
from bench_scale import bench_scale  # noqa: E402
from bench_summary import print_summary  # noqa: E402
from bench_tarball import bench_tarball  # noqa: E402
from bench_tuning import bench_shipped, bench_tuning  # noqa: E402  (bench/ is sys.path[0] when run as a script)

from mcpnode.host import Host  # noqa: E402
from mcpnode.topology.discover import discover  # noqa: E402
from mcpnode.topology.nvml import RecordedNvml  # noqa: E402

SHARED_HOSTS = Path(os.environ.get("MCPNODE_SHARED_HOSTS", ROOT.parent / "shared" / "hosts"))
OUT = ROOT / "bench" / "out"
FIXTURE_HOSTS = ROOT / "tests" / "fixtures" / "hosts"
ROUNDS = int(os.environ.get("MCPNODE_BENCH_ROUNDS", "15"))
MCPNODE = [sys.executable, "-m", "mcpnode"]
if (Path(sys.executable).parent / "mcpnode").exists():
    MCPNODE = [str(Path(sys.executable).parent / "mcpnode")]  # the console script, as installed
LSTOPO = shutil.which("lstopo-no-graphics")


def timed_run(argv: list[str], env: dict[str, str] | None = None) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t0


def alternate(cases: dict[str, Callable[[], float]], rounds: int = ROUNDS) -> dict[str, float]:
    """Median seconds per case, the cases interleaved each round so drift hits all alike."""
    for fn in cases.values():
        fn()  # warm the page cache and the interpreter's .pyc files
    samples: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(rounds):
        for name, fn in cases.items():
            samples[name].append(fn())
    return {k: statistics.median(v) for k, v in samples.items()}


def ms(seconds: float) -> str:
    return f"{seconds * 1000:8.1f} ms"


def unpack_dumps(dest: Path) -> dict[str, Path]:
    roots: dict[str, Path] = {}
    if not SHARED_HOSTS.is_dir():
        return roots
    for tarball in sorted(SHARED_HOSTS.glob("*.tar.bz2")):
        name = tarball.name.removesuffix(".tar.bz2")
        target = dest / name
        target.mkdir(parents=True)
        subprocess.run(["tar", "-xjf", str(tarball), "-C", str(target)], check=True)
        (top,) = [p for p in target.iterdir() if p.is_dir()]
        roots[name] = top
    return roots


# What a `topo --format json` in Python cannot go below, timed beside lstopo on each dump: the
# interpreter's start (the console script's `site` included); that start plus json, what a
# Python tool writing its JSON through json pays (topo writes through codec/jsonout and imports
# neither json nor re); and the start plus the modules `topo` imports, with no discovery and no
# output: what this code costs before its first read, unless it imports less.
PY_FLOORS = {
    "python -c pass": "pass",
    "python -c 'import json'": "import json",
    "python + topo's imports": "import mcpnode.cli.fast, mcpnode.cli.commands, mcpnode.host, "
    "mcpnode.topology.discover, mcpnode.cli.render_topo",
}
WHOLE_PROCESS_RATIO = 2.5

# A third floor: the interpreter and the reads `topo` makes on that dump, and nothing else (no
# mcpnode module, no parsing, no checks): the files discovery read, the directories it listed
# and the symlinks it crossed, as a Host records them for a snapshot, replayed by the bare
# loop below with one system call per step and every file's bytes written out. What mcpnode
# costs above it is its own code: imports, parsing, the model and the JSON.
READS_FLOOR = "python + the same reads"
_REPLAY_READS = """
import os, sys
out = sys.stdout.buffer
flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
with open(sys.argv[1], encoding="utf-8", errors="surrogateescape") as f:
    steps = f.read().split("\\0")
for step in steps[:-1]:
    kind, path = step[0], step[1:]
    if kind == "F":
        fd = os.open(path, flags)
        out.write(os.read(fd, 1 << 16))
        os.close(fd)
    elif kind == "D":
        with os.scandir(path) as it:
            for entry in it:
                entry.is_dir(follow_symlinks=False)
    else:
        os.readlink(path)
"""


def recorded_reads(root: Path, dest: Path) -> list[str]:
    """The replay of the reads `topo` makes on `root` (READS_FLOOR), written to `dest`; its
    command line."""
    with Host(root) as host, host.recording() as rec:
        discover(host)
    top = str(root)
    steps = [f"D{top}{d}" for d in sorted(rec.dirs)]
    steps += [f"F{top}{f}" for f in sorted(rec.files)]
    steps += [f"L{top}{link}" for link in sorted(rec.links)]
    dest.write_text("".join(s + "\0" for s in steps), encoding="utf-8", errors="surrogateescape")
    return [sys.executable, "-c", _REPLAY_READS, str(dest)]


def bench_whole_process(roots: dict[str, Path]) -> list[dict[str, object]]:
    print(
        "\n== Whole process: mcpnode topo --format json vs lstopo-no-graphics --whole-io --of xml"
    )
    if LSTOPO is None:
        print("   lstopo-no-graphics not found (Debian package `hwloc`): skipped")
        return []
    rows = []
    for name, root in roots.items():
        env = dict(
            os.environ,
            HWLOC_COMPONENTS="linux,stop",
            HWLOC_FSROOT=str(root),
            HWLOC_DUMPED_HWDATA_DIR="/var/run/hwloc",
        )
        lstopo_argv = [LSTOPO, "--whole-io", "--of", "xml", "-"]
        mcp_argv = [*MCPNODE, "topo", "--format", "json", "--root", str(root)]
        cases: dict[str, Callable[[], float]] = {
            "lstopo": lambda a=lstopo_argv, e=env: timed_run(a, e),  # type: ignore[misc]
            "mcpnode": lambda a=mcp_argv: timed_run(a),  # type: ignore[misc]
        }
        for label, code in PY_FLOORS.items():
            cases[label] = lambda c=code: timed_run([sys.executable, "-c", c])  # type: ignore[misc]
        with tempfile.TemporaryDirectory() as tmp:
            replay = recorded_reads(root, Path(tmp) / "reads")
            cases[READS_FLOOR] = lambda a=replay: timed_run(a)  # type: ignore[misc]
            t = alternate(cases)
        ratio = t["mcpnode"] / t["lstopo"]
        floors = {label: t[label] / t["lstopo"] for label in [*PY_FLOORS, READS_FLOOR]}
        verdict = "met" if ratio <= WHOLE_PROCESS_RATIO else "MISSED"
        print(
            f"   {name:42s} lstopo {ms(t['lstopo'])}  mcpnode {ms(t['mcpnode'])}  "
            f"ratio {ratio:5.2f}x (target <= {WHOLE_PROCESS_RATIO}x: {verdict}); floors: "
            + ", ".join(f"{label} {v:4.2f}x" for label, v in floors.items())
        )
        rows.append(
            {
                "dump": name,
                "lstopo_s": t["lstopo"],
                "mcpnode_s": t["mcpnode"],
                "ratio": ratio,
                "floor_s": {label: t[label] for label in [*PY_FLOORS, READS_FLOOR]},
                "floor_ratio": floors,
            }
        )
    return rows


def bench_floor() -> dict[str, float]:
    print("\n== Start-up floor (what any Python CLI built on click pays before doing work)")
    py = sys.executable
    cases: dict[str, Callable[[], float]] = {
        "python -c pass": lambda: timed_run([py, "-c", "pass"]),
        "python -c 'import click'": lambda: timed_run([py, "-c", "import click"]),
        "mcpnode --help": lambda: timed_run([*MCPNODE, "--help"]),
    }
    t = alternate(cases)
    for k, v in t.items():
        print(f"   {k:28s} {ms(v)}")
    ratio = t["mcpnode --help"] / t["python -c pass"]
    t["help_vs_python_ratio"] = ratio
    print(
        f"   mcpnode --help / python -c pass: {ratio:4.2f}x "
        f"(target <= 3x: {'met' if ratio <= 3 else 'MISSED'})"
    )
    return t


def time_discover(root: Path, rounds: int = ROUNDS) -> float:
    host = Host(root)
    discover(host)
    samples = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        discover(host)
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def bench_in_process(roots: dict[str, Path]) -> list[dict[str, object]]:
    print("\n== In process: discover(Host(root)), median")
    rows = []
    for name, root in roots.items():
        t = time_discover(root)
        with Host(root) as host:
            n = len(discover(host).pci_devices)
        print(
            f"   {name:42s} {ms(t)}  {n:4d} PCI functions  {t / max(n, 1) * 1e6:7.1f} us/function"
        )
        rows.append({"dump": name, "seconds": t, "pci_functions": n})
    return rows


def recorded_nvml_calls(root: Path) -> list[dict[str, object]] | None:
    """The NVML answers a fixture host carries, or None when it has none (yet)."""
    meta = root / "mcpnode-snapshot.json"
    if not meta.is_file():
        return None
    nvml = json.loads(meta.read_text()).get("nvml")
    calls = nvml.get("calls") if isinstance(nvml, dict) else None
    return list(calls) if calls else None


def bench_nvml_replay() -> list[dict[str, object]]:
    print("\n== NVML replay cost: discover(host, RecordedNvml(calls)) - discover(host), median")
    rows: list[dict[str, object]] = []
    hosts = (
        sorted(p for p in FIXTURE_HOSTS.iterdir() if p.is_dir()) if FIXTURE_HOSTS.is_dir() else []
    )
    for root in hosts:
        calls = recorded_nvml_calls(root)
        if calls is None:
            continue
        with Host(root) as host:
            row = time_nvml_replay(root.name, host, calls)
        if row is not None:
            rows.append(row)
    if not rows:
        print(f"   no fixture under {FIXTURE_HOSTS} carries NVML answers yet: skipped")
    return rows


def time_nvml_replay(
    name: str, host: Host, calls: list[dict[str, object]]
) -> dict[str, object] | None:
    topo = discover(host, RecordedNvml(calls))
    if topo.nvml is None or not topo.nvml.available:
        print(f"   {name:42s} recorded NVML is unavailable: nothing to time")
        return None
    n_gpus = len(topo.nvml.gpus) or len(topo.gpus)

    def replayed() -> float:
        t0 = time.perf_counter()
        discover(host, RecordedNvml(calls))
        return time.perf_counter() - t0

    def sysfs_only() -> float:
        t0 = time.perf_counter()
        discover(host)
        return time.perf_counter() - t0

    t = alternate({"nvml": replayed, "sysfs": sysfs_only})
    per_gpu = (t["nvml"] - t["sysfs"]) / max(n_gpus, 1)
    verdict = "met" if per_gpu < 0.005 else "MISSED"
    print(
        f"   {name:42s} sysfs {ms(t['sysfs'])}  +NVML {ms(t['nvml'])}  "
        f"{len(calls):5d} calls  {n_gpus} GPUs  +{per_gpu * 1000:6.2f} ms/GPU "
        f"(target < 5 ms/GPU: {verdict})"
    )
    return {
        "host": name,
        "gpus": n_gpus,
        "calls": len(calls),
        "sysfs_s": t["sysfs"],
        "nvml_s": t["nvml"],
        "added_ms_per_gpu": per_gpu * 1000,
    }


def bench_audit() -> dict[str, object]:
    print("\n== Audit: whole process, `mcpnode audit` (exit 0 or 1 both count as a run)")

    def run(argv: list[str]) -> Callable[[], float]:
        def timed() -> float:
            t0 = time.perf_counter()
            proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            elapsed = time.perf_counter() - t0
            if proc.returncode not in (0, 1):
                raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode}")
            return elapsed

        return timed

    cases: dict[str, Callable[[], float]] = {
        "mcpnode --help": run([*MCPNODE, "--help"]),
        "mcpnode audit (this host)": run([*MCPNODE, "audit"]),
        "mcpnode audit --format json (this host)": run([*MCPNODE, "audit", "--format", "json"]),
    }
    hgx = FIXTURE_HOSTS / "hgx-h100-8gpu-8nic"
    if hgx.is_dir():
        cases["mcpnode audit --root hgx-h100 (8 GPUs)"] = run(
            [*MCPNODE, "audit", "--root", str(hgx)]
        )
    t = alternate(cases)
    for k, v in t.items():
        print(f"   {k:42s} {ms(v)}")
    live = t["mcpnode audit (this host)"]
    print(f"   mcpnode audit on this host target < 500 ms: {'met' if live < 0.5 else 'MISSED'}")
    return {k: v for k, v in t.items()}


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="mcpnode-bench-") as tmp_name:
        tmp = Path(tmp_name)
        roots = unpack_dumps(tmp / "dumps")
        if not roots:
            print(f"note: {SHARED_HOSTS} not found: the hwloc comparisons are skipped")
        results = {
            "rounds": ROUNDS,
            "python": sys.version.split()[0],
            "whole_process": bench_whole_process(roots),
            "floor": bench_floor(),
            "in_process": bench_in_process(roots),
            "scale": bench_scale(),
            "tarball": bench_tarball(),
            "nvml_replay": bench_nvml_replay(),
            "tuning": bench_tuning(),
            "tuning_shipped": bench_shipped(),
            "audit": bench_audit(),
            "manifest": bench_manifest(),
            "agent": bench_agent(),
            "bounds": bench_bounds(),
            "exec": bench_exec(MCPNODE, alternate, timed_run),
            "kmsg": bench_kmsg(),
        }
    results["summary"] = print_summary(results)
    (OUT / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    print(f"\nresults: {OUT / 'results.json'}")


if __name__ == "__main__":
    main()
