"""read_port_counter (the agent's health timer) reads the counter read_ports (the audit) reads,
for every port, and nothing else of the port."""

from __future__ import annotations

import shutil
from pathlib import Path

from mcpnode.audit.ib import read_port_counter, read_ports
from mcpnode.host import Host
from tests.support import auditroot

HGX = auditroot.HOSTS / auditroot.HGX


def test_same_ports_and_values_as_the_audit() -> None:
    with Host(HGX) as host:
        audit = {p.name: dict(p.counters)["link_downed"] for p in read_ports(host).ports}
        watched = dict(read_port_counter(host, "link_downed"))
    assert len(audit) == 8
    assert watched == audit


def test_a_changed_counter_and_a_missing_one(tmp_path: Path) -> None:
    root = tmp_path / "root"
    shutil.copytree(HGX, root, symlinks=True)
    with Host(root) as host:
        ((first, _), (second, _), *_) = read_port_counter(host, "link_downed")
        base = host.realpath(f"/sys/class/infiniband/{first.split('/')[0]}/ports/1/counters")
        Path(host.fs_path(base), "link_downed").write_text("7\n")
        gone = host.realpath(f"/sys/class/infiniband/{second.split('/')[0]}/ports/1/counters")
        Path(host.fs_path(gone), "link_downed").unlink()
        got = dict(read_port_counter(host, "link_downed"))
    assert got[first].text == "7\n"
    assert got[second].text is None and got[second].missing
