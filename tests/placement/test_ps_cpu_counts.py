"""The CPU verdict counts the agent publishes each auto-pin scan (`mcpnode_gpu_processes`), on
real child processes of this machine against tests/support/placeroot.py's recorded GPU (its slice is
CPU 1): the same verdicts `mcpnode ps` gives, per GPU, every verdict present."""

from __future__ import annotations

import subprocess
from pathlib import Path

from mcpnode.host import Host
from mcpnode.placement.plan import plan_placement
from mcpnode.placement.ps import CPU_VERDICTS, cpu_verdict_counts
from mcpnode.topology.discover import discover_host
from tests.placement.test_ps import needs_machine, root_with_processes, start, stop


@needs_machine
def test_counts_tell_the_slice_from_housekeeping(tmp_path: Path) -> None:
    on_slice, off_slice = start("1"), start("0")
    gone = subprocess.Popen(["true"])
    gone.wait()
    try:
        root = root_with_processes(tmp_path / "root", [on_slice.pid, off_slice.pid])
        with Host(root) as host:
            placement = plan_placement(discover_host(host))
        pairs = [(on_slice.pid, 0), (off_slice.pid, 0), (gone.pid, 0), (on_slice.pid, 99)]
        counts = cpu_verdict_counts(Host("/"), pairs, placement)
    finally:
        stop(on_slice)
        stop(off_slice)
    gpu0 = str(placement.gpus[0].address)
    assert set(counts) == {str(g.address) for g in placement.gpus}
    # a process gone mid-scan is unknown; a GPU index the placement lacks is not counted
    assert counts[gpu0] == {"slice": 1, "node": 1, "off-node": 0, "unknown": 1}
    for by_verdict in counts.values():
        assert tuple(by_verdict) == CPU_VERDICTS
