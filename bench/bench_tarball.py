"""Tarball roots, measured: whole-process `mcpnode topo --format json --root X.tar.*` against the
same command on the unpacked directory, alternated round by round, on hwloc's sysfs dumps
(../shared/hosts): `32em64t-2n8c+dax+nvme+mic+dimms` and the largest other dump (most members).
Each dump is timed as shipped (`.tar.bz2`) and repacked as `.tar.gz`, what `mcpnode snapshot`
writes by default. The floor is decompression itself, so the peer is `bzip2 -dc X` (or
`gzip -dc X`) and `topo` on the unpacked directory, run apart in the same rounds; target: the
tarball within 1.25x their sum (and, as before, its ratio to the directory alone). Peak RSS of
each run is reported beside the times (a tarball root holds its contents in memory). Beside
each, the index of the members measured in process (load less decompression) and the tarball
run less it: what the run would cost were the index free, the floor for work on the index.

`MCPNODE_BENCH_TARBALL_BASELINE=DIR` (a checkout of an older mcpnode, e.g. made with
`git archive REV mcpnode | tar -x -C DIR`) adds that checkout's `topo` on the same tarball as a
third peer in the same rounds: the before figure, measured on the same machine by the same
script. It also times the two checkouts against each other on the unpacked directory and on the
live root (`python -m mcpnode topo --format json`, each with its own PYTHONPATH), where the
tarball work must cost nothing: the ratio should be 1.00 within noise.
"""

from __future__ import annotations

import bz2
import gc
import gzip
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.childrss import peak_rss_mib  # noqa: E402

SHARED_HOSTS = Path(os.environ.get("MCPNODE_SHARED_HOSTS", ROOT.parent / "shared" / "hosts"))
ROUNDS = int(os.environ.get("MCPNODE_BENCH_ROUNDS", "15"))
MAIN_DUMP = "32em64t-2n8c+dax+nvme+mic+dimms"
TARGET_RATIO = 1.25  # of decompression + topo on the unpacked directory
DECOMPRESS = {"tar.bz2": "bzip2", "tar.gz": "gzip"}
MCPNODE = [sys.executable, "-m", "mcpnode"]
if (Path(sys.executable).parent / "mcpnode").exists():
    MCPNODE = [str(Path(sys.executable).parent / "mcpnode")]  # the console script, as installed


def _run(
    argv: list[str], env: dict[str, str] | None = None, cwd: Path | None = None
) -> tuple[float, float]:
    """(seconds, peak RSS MiB) of one child; raises when it fails. The time is the command's
    alone; the peak RSS is taken from a second run through the tests' small launcher, because a
    child's ru_maxrss starts at the size of the process it was forked from
    (tests/support/childrss.py)."""
    t0 = time.perf_counter()
    proc = subprocess.run(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        err = proc.stderr.decode(errors="replace")[-500:]
        raise RuntimeError(f"{' '.join(argv)} failed: {err}")
    rss = _RSS.get((tuple(argv), str(cwd)))
    if rss is None:
        rss = _RSS[(tuple(argv), str(cwd))] = peak_rss_mib(argv, env, cwd)[1]
    return elapsed, rss


# Peak RSS per command line, measured once: it does not vary from round to round as time does.
_RSS: dict[tuple[tuple[str, ...], str], float] = {}


def _alternate(
    cases: dict[str, Callable[[], tuple[float, float]]], rounds: int
) -> dict[str, tuple[float, float]]:
    """Median (seconds, peak RSS MiB) per case, the cases interleaved each round."""
    for fn in cases.values():
        fn()  # warm the page cache and the interpreter's .pyc files
    samples: dict[str, list[tuple[float, float]]] = {k: [] for k in cases}
    for _ in range(rounds):
        for name, fn in cases.items():
            samples[name].append(fn())
    return {
        k: (statistics.median(s for s, _ in v), statistics.median(r for _, r in v))
        for k, v in samples.items()
    }


def _members(tarball: Path) -> int:
    with tarfile.open(tarball) as tf:
        return sum(1 for _ in tf)


def _index_seconds(archive: Path) -> float:
    """What indexing the members costs a tarball root, in this process: the median of
    host/tarball.py's load() (decompression and index) less the median of the decompression
    alone (host/decompress.py's chunks, drained), the two alternated round by round. The
    tarball run less this is what the run would cost were the index free: a floor for what
    work on the index can win."""
    from mcpnode.host import decompress, tarball

    def load() -> float:
        t0 = time.perf_counter()
        tarball.load(str(archive))
        return time.perf_counter() - t0

    def drain() -> float:
        t0 = time.perf_counter()
        with open(archive, "rb") as raw:
            for _ in decompress.open_source(raw).chunks:
                pass
        return time.perf_counter() - t0

    samples: dict[str, list[float]] = {"load": [], "drain": []}
    load(), drain()  # warm the page cache and the imports
    # The collector as the command runs it (cli/fast.py raises its gen-0 threshold): at the
    # default, this process's larger heap made each load pay collections the command never does.
    before = gc.get_threshold()
    gc.set_threshold(200_000, 30, 30)
    try:
        for _ in range(ROUNDS):
            gc.collect()
            samples["load"].append(load())
            samples["drain"].append(drain())
    finally:
        gc.set_threshold(*before)
    return statistics.median(samples["load"]) - statistics.median(samples["drain"])


def pick_dumps() -> list[Path]:
    """The 32em64t dump and the largest other one (most members), those present."""
    tarballs = sorted(SHARED_HOSTS.glob("*.tar.bz2")) if SHARED_HOSTS.is_dir() else []
    main = [t for t in tarballs if t.name.startswith(MAIN_DUMP)]
    others = [t for t in tarballs if not t.name.startswith(MAIN_DUMP)]
    largest = max(others, key=_members, default=None)
    return main + ([largest] if largest is not None else [])


def _unpack(tarball: Path, dest: Path) -> Path:
    """Unpack with tar(1), as bench/run.py does; the dump's top folder."""
    dest.mkdir(parents=True)
    subprocess.run(["tar", "-xf", str(tarball), "-C", str(dest)], check=True)
    (top,) = [p for p in dest.iterdir() if p.is_dir()]
    return top


def _regzip(tarball: Path, out: Path) -> Path:
    """The same tar stream, byte for byte, as .tar.gz (level 6, gzip's default)."""
    with bz2.open(tarball, "rb") as src, gzip.open(out, "wb", compresslevel=6) as dst:
        shutil.copyfileobj(src, dst)
    return out


def bench_tarball() -> dict[str, object]:
    print("\n== Tarball roots: mcpnode topo --format json, X.tar.* vs the unpacked directory")
    dumps = pick_dumps()
    if not dumps:
        print(f"   {SHARED_HOSTS} not found: skipped")
        return {"dumps": []}
    baseline = os.environ.get("MCPNODE_BENCH_TARBALL_BASELINE")
    base_env = None
    base_dir = Path(baseline).resolve() if baseline else ROOT
    if baseline:
        # `python -m` puts the working directory first on sys.path: each checkout runs from
        # its own, so the editable install of this one cannot shadow the baseline.
        base_env = dict(os.environ, PYTHONPATH=str(base_dir))
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(base_dir)], check=True)
    rows: list[dict[str, object]] = []
    same: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="mcpnode-bench-tarball-") as tmp_name:
        tmp = Path(tmp_name)
        for tarball in dumps:
            name = tarball.name.removesuffix(".tar.bz2")
            directory = _unpack(tarball, tmp / name)
            archives = {"tar.bz2": tarball, "tar.gz": _regzip(tarball, tmp / f"{name}.tar.gz")}
            for kind, archive in archives.items():
                argv = ["topo", "--format", "json", "--root"]
                tool = shutil.which(DECOMPRESS[kind]) or DECOMPRESS[kind]
                cases: dict[str, Callable[[], tuple[float, float]]] = {
                    "directory": lambda a=[*MCPNODE, *argv, str(directory)]: _run(a),  # type: ignore[misc]
                    "tarball": lambda a=[*MCPNODE, *argv, str(archive)]: _run(a),  # type: ignore[misc]
                    "decompress": lambda a=[tool, "-dc", str(archive)]: _run(a),  # type: ignore[misc]
                }
                if base_env is not None:
                    base_argv = [sys.executable, "-m", "mcpnode", *argv, str(archive)]
                    cases["baseline"] = lambda a=base_argv, e=base_env: _run(a, e, base_dir)  # type: ignore[misc]
                t = _alternate(cases, ROUNDS)
                ratio = t["tarball"][0] / t["directory"][0]
                floor = t["decompress"][0] + t["directory"][0]
                floor_ratio = t["tarball"][0] / floor
                verdict = "met" if floor_ratio <= TARGET_RATIO else "MISSED"
                index_s = _index_seconds(archive)
                unindexed_ratio = (t["tarball"][0] - index_s) / floor
                print(
                    f"   {name:34s} {kind:8s} directory {t['directory'][0] * 1000:7.1f} ms "
                    f"({t['directory'][1]:5.1f} MiB)  tarball {t['tarball'][0] * 1000:7.1f} ms "
                    f"({t['tarball'][1]:5.1f} MiB)  {ratio:5.2f}x the directory; "
                    f"{DECOMPRESS[kind]} -dc {t['decompress'][0] * 1000:6.1f} ms: "
                    f"{floor_ratio:5.2f}x decompression + directory "
                    f"(target <= {TARGET_RATIO}x: {verdict})"
                )
                print(
                    f"   {'':34s} {'':8s} the index of its members (in process, load less "
                    f"decompression): {index_s * 1000:6.1f} ms; the tarball run less it "
                    f"{unindexed_ratio:5.2f}x decompression + directory"
                )
                row: dict[str, object] = {
                    "dump": name,
                    "archive": kind,
                    "archive_bytes": archive.stat().st_size,
                    "directory_s": t["directory"][0],
                    "tarball_s": t["tarball"][0],
                    "ratio": ratio,
                    "decompress_s": t["decompress"][0],
                    "floor_ratio": floor_ratio,
                    "target_ratio": TARGET_RATIO,
                    "index_s": index_s,
                    "unindexed_ratio": unindexed_ratio,
                    "directory_peak_rss_mib": t["directory"][1],
                    "tarball_peak_rss_mib": t["tarball"][1],
                }
                if "baseline" in t:
                    base_ratio = t["baseline"][0] / t["directory"][0]
                    print(
                        f"   {'':34s} {'':8s} baseline ({baseline}) tarball "
                        f"{t['baseline'][0] * 1000:7.1f} ms ({t['baseline'][1]:5.1f} MiB)  "
                        f"{base_ratio:5.2f}x the directory"
                    )
                    row["baseline_s"] = t["baseline"][0]
                    row["baseline_ratio"] = base_ratio
                    row["baseline_peak_rss_mib"] = t["baseline"][1]
                rows.append(row)
            if base_env is not None and tarball == dumps[0]:
                roots = {"directory": str(directory), "live /": None}
                same = _same_paths(base_env, base_dir, roots)
    out: dict[str, object] = {"rounds": ROUNDS, "dumps": rows}
    if base_env is not None:
        out["baseline_vs_this"] = same
    return out


def _same_paths(
    base_env: dict[str, str], base_dir: Path, roots: dict[str, str | None]
) -> dict[str, dict[str, float]]:
    """The baseline checkout against this one where neither reads a tarball."""
    this_env = dict(os.environ, PYTHONPATH=str(ROOT))
    rows = {}
    for label, root in roots.items():
        argv = [sys.executable, "-m", "mcpnode", "topo", "--format", "json"]
        if root is not None:
            argv += ["--root", root]
        t = _alternate(
            {
                "baseline": lambda a=argv, e=base_env: _run(a, e, base_dir),  # type: ignore[misc]
                "this": lambda a=argv, e=this_env: _run(a, e, ROOT),  # type: ignore[misc]
            },
            ROUNDS,
        )
        ratio = t["this"][0] / t["baseline"][0]
        print(
            f"   {label:43s} baseline {t['baseline'][0] * 1000:7.1f} ms  this checkout "
            f"{t['this'][0] * 1000:7.1f} ms  {ratio:5.2f}x (no tarball read: 1.00 expected)"
        )
        rows[label] = {"baseline_s": t["baseline"][0], "this_s": t["this"][0], "ratio": ratio}
    return rows


if __name__ == "__main__":
    bench_tarball()
