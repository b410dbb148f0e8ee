"""Manifest benchmarks (issue 6), in process on the HGX H100 fixture (8 GPUs, 8 NICs, recorded
NVML):

1. "manifest build + publish (in-process, target < 20 ms)": what the agent pays on a republish
   (drift timer, link event): plan + tuning verify + audit summary + assemble + hash + atomic
   write, from the topology it holds. Discovery is timed apart (it reruns only on device
   events), and so is the cold path `make_manifest` + publish with discovery included.
2. "1,000 read-while-republish rounds: partial reads = 0": a reader process loops over the file
   while this process republishes it 1,000 times, alternating two manifests of different
   sizes (tests/support/manifest_race.py).
"""

from __future__ import annotations

import tempfile
from datetime import datetime, timezone
from pathlib import Path

from bench_tuning import median_s

from mcpnode.host import Host
from mcpnode.placement.build import make_manifest
from mcpnode.placement.manifest import publish
from mcpnode.topology.discover import discover_host
from tests.support.manifest_race import read_while_republish

ROOT = Path(__file__).resolve().parents[1]
HOSTS = ROOT / "tests" / "fixtures" / "hosts"
HGX = HOSTS / "hgx-h100-8gpu-8nic"
TARGET_S = 0.020
RACE_ROUNDS = 1000


def bench_manifest(rounds: int = 30) -> dict[str, object]:
    print("\n== Manifest: build + publish on the HGX fixture (in-process, target < 20 ms)")
    src = Host(HGX)
    topo = discover_host(src)
    now = datetime(2025, 6, 1, tzinfo=timezone.utc)
    with tempfile.TemporaryDirectory(prefix="mcpnode-bench-manifest-") as tmp:
        out = Host(tmp)

        def republish() -> None:
            publish(out, make_manifest(src, now=now, topology=topo))

        def cold() -> None:
            publish(out, make_manifest(src, now=now))

        t_republish = median_s(republish, rounds)
        t_discover = median_s(lambda: discover_host(src), rounds)
        t_cold = median_s(cold, rounds)
    verdict = "met" if t_republish < TARGET_S else "MISSED"
    print(f"   build + publish (topology held)     {t_republish * 1000:8.1f} ms  ({verdict})")
    print(f"   discovery alone                     {t_discover * 1000:8.1f} ms")
    print(f"   cold: discover + build + publish    {t_cold * 1000:8.1f} ms")

    print(f"\n== Manifest: {RACE_ROUNDS:,} read-while-republish rounds: partial reads = 0")
    pair = (
        make_manifest(Host(HGX), now=now),
        make_manifest(Host(HOSTS / "h100-nvl-pair"), now=now),
    )
    with tempfile.TemporaryDirectory(prefix="mcpnode-bench-race-") as tmp:
        race = read_while_republish(Path(tmp), pair, RACE_ROUNDS)
    ok = race.partial == 0 and race.missing == 0
    print(
        f"   {race.rounds} republishes in {race.seconds * 1000:.0f} ms, reader made {race.reads}"
        f" reads: partial {race.partial}, missing {race.missing}"
        f" ({'met' if ok else 'FAILED'})"
    )
    if not ok:
        raise RuntimeError(f"partial manifest reads: {race}")
    return {
        "build_publish_s": t_republish,
        "discover_s": t_discover,
        "cold_s": t_cold,
        "target_s": TARGET_S,
        "race_rounds": race.rounds,
        "race_reads": race.reads,
        "race_partial": race.partial,
        "race_missing": race.missing,
        "race_seconds": race.seconds,
    }


if __name__ == "__main__":
    bench_manifest()
