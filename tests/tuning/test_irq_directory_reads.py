"""[irq] reads each interrupt's two files with one listing of /proc/irq/N (Host.read_directory).
What it reads must be what reading each file alone gives, for well-formed and hostile roots:
absent directories, a FIFO planted as the affinity, a directory that is a file, a symlinked
directory, an affinity that is a symlink, a node that is not a number."""

from __future__ import annotations

import os
from pathlib import Path

from mcpnode.host import Host
from mcpnode.tuning import paths
from mcpnode.tuning.plugins import irq
from mcpnode.tuning.read import Unreadable, read_value


def _root(tmp: Path) -> Path:
    root = tmp / "root"
    proc = root / "proc"
    lines = ["           CPU0       CPU1"]
    for n in range(10, 19):
        lines.append(f" {n}:          0          0  IR-PCI-MSI  dev{n}")
    lines.append("NMI:          0          0   Non-maskable interrupts")
    (proc / "irq").mkdir(parents=True)
    (proc / "interrupts").write_text("\n".join(lines) + "\n")

    def irqdir(n: int, affinity: str | None = "0-1\n", node: str | None = "0\n") -> Path:
        d = proc / "irq" / str(n)
        d.mkdir()
        if affinity is not None:
            (d / "smp_affinity_list").write_text(affinity)
        if node is not None:
            (d / "node").write_text(node)
        return d

    irqdir(10)  # well formed
    irqdir(11, node="-1\n")  # no node
    os.mkfifo(irqdir(12, affinity=None) / "smp_affinity_list")  # never opened
    # 13: listed in /proc/interrupts, no directory (a per-CPU or chained interrupt)
    (proc / "irq" / "14").write_text("not a directory\n")
    (root / "elsewhere").mkdir()
    (root / "elsewhere" / "smp_affinity_list").write_text("1\n")
    (root / "elsewhere" / "node").write_text("1\n")
    os.symlink("../../elsewhere", proc / "irq" / "15")  # a symlinked directory, inside the root
    d = irqdir(16, affinity=None)
    os.symlink("/elsewhere/smp_affinity_list", d / "smp_affinity_list")  # resolved in the root
    irqdir(17, node="zero\n")  # a node that is not a number
    irqdir(18, affinity=None)  # a directory without an affinity file
    return root


def _one_by_one(host: Host) -> tuple[irq.IrqReading, ...]:
    """The reference: every file read on its own with read_value, as before the batch."""
    raw = read_value(host, paths.PROC_INTERRUPTS)
    assert isinstance(raw, str)
    out = []
    for n, name in irq.parse_interrupts(raw):
        affinity = read_value(host, paths.irq_affinity_path(n))
        if not isinstance(affinity, (str, Unreadable)):
            continue
        text = read_value(host, paths.irq_node_path(n))
        node = int(text.strip()) if isinstance(text, str) and text.strip().isdigit() else None
        out.append(irq.IrqReading(n, node, affinity, name))
    return tuple(out)


def test_batched_irq_reads_equal_reading_each_file(tmp_path: Path) -> None:
    host = Host(_root(tmp_path))
    expected = _one_by_one(host)
    with host.oneshot():
        got = irq.read_irqs(host)
    assert got == expected
    by_irq = {r.irq: r for r in expected}
    assert sorted(by_irq) == [10, 11, 12, 14, 15, 16, 17]
    assert (by_irq[10].affinity, by_irq[10].node) == ("0-1", 0)
    assert by_irq[11].node is None and by_irq[17].node is None
    assert isinstance(by_irq[12].affinity, Unreadable)  # the FIFO: refused, never opened
    assert isinstance(by_irq[14].affinity, Unreadable)  # a file where a directory should be
    assert (by_irq[15].affinity, by_irq[15].node) == ("1", 1)
    assert by_irq[16].affinity == "1"


def test_an_unlistable_proc_irq_reads_each_file(tmp_path: Path) -> None:
    root = _root(tmp_path)
    host = Host(root)
    expected = _one_by_one(host)
    (root / "proc/irq").rename(root / "proc/irq.moved")
    (root / "proc/irq").write_text("")  # /proc/irq itself is not a directory now
    assert irq.read_irqs(host) == _one_by_one(host)
    assert expected  # the first layout had interrupts; this one has none readable
