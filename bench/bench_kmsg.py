"""Kernel log parsing: what the agent's watcher does with /dev/kmsg records (bench/run.py).

A root whose `dev/kmsg` holds RECORDS records in kmsg format (a boot log's worth of ordinary
lines, a quarter with ` KEY=VALUE` continuation lines, one in eight an XID) is read the way the
agent reads it: Host.open_kmsg(), read_new() batch by batch (KMSG_BATCH_BYTES), each batch
parsed into XIDs and SXIDs (agent/health.py parse_records). The peer, alternated round by round
in the same run: `wc -l` over the same file, the floor of reading it at all. Figures are
records per second, and the ratio between the two.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from mcpnode.agent.health import KMSG_BATCH_BYTES, parse_records  # noqa: E402
from mcpnode.host import Host  # noqa: E402

RECORDS = 100_000


def write_log(root: Path, count: int = RECORDS) -> Path:
    """`count` records: ordinary messages, some with continuation lines, one in eight an XID."""
    path = root / "dev" / "kmsg"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as fh:
        for i in range(count):
            usec = 1_000_000 + i * 1000
            if i % 8 == 0:
                msg = f"NVRM: Xid (PCI:0000:{i % 256:02x}:00): 79, pid={i}, name=python3, GPU has"
                fh.write(f"4,{i},{usec},-;{msg} fallen off the bus.\n")
            elif i % 4 == 1:
                fh.write(f"6,{i},{usec},-;pci 0000:{i % 256:02x}:00.0: enabling device\n")
                fh.write(" SUBSYSTEM=pci\n DEVICE=+pci:0000:16:00.0\n")
            else:
                fh.write(f"6,{i},{usec},-;audit: type=1400 audit({i}.1:2): apparmor=ALLOWED\n")
    return path


def parse_all(root: Path) -> int:
    """Read and parse the whole log as the agent does; how many records it held."""
    host = Host(root)
    stream = host.open_kmsg()
    seen = 0
    try:
        while True:
            got = stream.read_new(batch_bytes=KMSG_BATCH_BYTES)
            xids, _sxids, _bad = parse_records(got.records)
            seen += len(got.records)
            assert len(xids) * 8 <= len(got.records) + 8
            if not got.more:
                return seen
    finally:
        stream.close()


def bench_kmsg(rounds: int = 5) -> dict[str, object]:
    print("\n== Kernel log parsing ==")
    wc = shutil.which("wc")
    with tempfile.TemporaryDirectory(prefix="mcpnode-bench-kmsg-") as tmp_name:
        root = Path(tmp_name)
        path = write_log(root)
        size = path.stat().st_size
        assert parse_all(root) == RECORDS

        def timed(fn: Callable[[], object]) -> float:
            t0 = time.perf_counter()
            fn()
            return time.perf_counter() - t0

        def run_wc() -> None:
            assert wc is not None
            subprocess.run([wc, "-l", str(path)], stdout=subprocess.DEVNULL, check=True)

        cases: dict[str, Callable[[], object]] = {"parse": lambda: parse_all(root)}
        if wc is not None:
            cases["wc -l"] = run_wc
        samples: dict[str, list[float]] = {k: [] for k in cases}
        for _ in range(rounds):  # alternated: drift on a shared machine hits both alike
            for name, fn in cases.items():
                samples[name].append(timed(fn))
        best = {k: statistics.median(v) for k, v in samples.items()}
        rate = RECORDS / best["parse"]
        line = (
            f"  {RECORDS:,} records ({size / 1e6:.1f} MB), batches of {KMSG_BATCH_BYTES >> 10} "
            f"KiB: {rate:,.0f} records/s ({best['parse'] * 1000:.0f} ms)"
        )
        result: dict[str, object] = {"records": RECORDS, "parse_records_per_s": round(rate)}
        if "wc -l" in best:
            peer = RECORDS / best["wc -l"]
            line += f"; wc -l {peer:,.0f} records/s: {best['parse'] / best['wc -l']:.1f}x its time"
            result["wc_records_per_s"] = round(peer)
        print(line)
        return result


if __name__ == "__main__":
    bench_kmsg()
