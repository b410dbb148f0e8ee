"""`mcpnode pin` on real processes this test starts: every thread moved, a gone or zombie PID,
a kernel thread, a process someone else narrowed (refused, then --force), and the undo when a
thread cannot take the CPUs."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

from mcpnode.errors import AccessDenied, PlacementUnavailable, ProcessGone
from mcpnode.host import Host
from mcpnode.placement.apply import PF_KTHREAD, Target, parse_stat, pin_process
from mcpnode.topology.model import CpuSet
from mcpnode.topology.parse import ParseError
from tests.support import placeroot
from tests.support.pinchild import affinities, start_child, stop
from tests.support.tuningcli import run_cli

needs_machine = placeroot.needs_machine


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return placeroot.build(tmp_path_factory.mktemp("placed"))


@pytest.fixture
def child() -> Iterator[subprocess.Popen[str]]:
    proc = start_child()
    yield proc
    stop(proc)


@needs_machine
def test_pin_moves_every_thread(root: Path, child: subprocess.Popen[str]) -> None:
    before = affinities(child.pid)
    assert len(before) == 3  # main + 2
    code, out, err = run_cli("pin", str(child.pid), "--gpu", "0", "--fresh", "--root", str(root))
    assert (code, err) == (0, ""), err
    assert affinities(child.pid) == {tid: placeroot.SLICE for tid in before}
    lines = out.splitlines()
    assert lines[0] == f"pid {child.pid}"
    assert "cpus: 1 (slice)" in lines
    assert any(line.startswith("memory: not changed (placement: preferred 0;") for line in lines)
    for tid in before:
        assert f"thread {tid}: 0-1 -> 1" in lines
    # Pinning again is not "narrowed by someone else": the threads are where we put them.
    code, _, err = run_cli("pin", str(child.pid), "--gpu", "0", "--fresh", "--root", str(root))
    assert code == 0, err


@needs_machine
def test_pin_node_scope(root: Path, child: subprocess.Popen[str]) -> None:
    code, _, err = run_cli(
        "pin", str(child.pid), "--gpu", "0", "--scope", "node", "--fresh", "--root", str(root)
    )
    assert code == 0, err
    assert set(map(frozenset, affinities(child.pid).values())) == {frozenset({0, 1})}


@needs_machine
def test_narrowed_process_refused_then_forced(root: Path) -> None:
    proc = start_child("--narrow", "0")
    try:
        assert set(map(frozenset, affinities(proc.pid).values())) == {frozenset({0})}
        code, out, err = run_cli("pin", str(proc.pid), "--gpu", "0", "--fresh", "--root", str(root))
        assert (code, out) == (77, "")
        assert "already limited to CPUs 0" in err and "--force" in err
        assert set(map(frozenset, affinities(proc.pid).values())) == {frozenset({0})}
        code, _, err = run_cli(
            "pin", str(proc.pid), "--gpu", "0", "--force", "--fresh", "--root", str(root)
        )
        assert code == 0, err
        assert set(map(frozenset, affinities(proc.pid).values())) == {frozenset({1})}
    finally:
        stop(proc)


@needs_machine
def test_gone_pid_exits_66(root: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    code, out, err = run_cli("pin", str(proc.pid), "--gpu", "0", "--fresh", "--root", str(root))
    assert (code, out) == (66, "")
    assert "no such process" in err


@needs_machine
def test_zombie_is_gone(root: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        # Not reaped yet: once it has exited it is a zombie, whose threads are gone.
        deadline = time.monotonic() + 10
        while parse_stat(Host("/").read_proc(proc.pid, "stat"))[0] != "Z":
            assert time.monotonic() < deadline
            time.sleep(0.01)
        code, _, err = run_cli("pin", str(proc.pid), "--gpu", "0", "--fresh", "--root", str(root))
        assert code == 66
        assert "has exited (state Z)" in err
    finally:
        proc.wait()


@needs_machine
def test_kernel_thread_refused(root: Path) -> None:
    kthread = next(
        (
            int(p)
            for p in sorted(os.listdir("/proc"), key=lambda n: (len(n), n))
            if p.isdigit() and _is_kthread(int(p))
        ),
        None,
    )
    if kthread is None:
        pytest.skip("no kernel thread visible (a PID namespace)")
    code, _, err = run_cli("pin", str(kthread), "--gpu", "0", "--fresh", "--root", str(root))
    assert code == 77
    assert "is a kernel thread" in err


def _is_kthread(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return bool(parse_stat(f.read())[1] & PF_KTHREAD)
    except (OSError, ParseError):
        return False


@needs_machine
def test_bad_pid_and_unknown_gpu(root: Path, child: subprocess.Popen[str]) -> None:
    assert run_cli("pin", "0", "--gpu", "0", "--fresh", "--root", str(root))[0] == 64
    code, _, err = run_cli("pin", str(child.pid), "--gpu", "9", "--fresh", "--root", str(root))
    assert code == 64 and "no GPU with that index" in err


@needs_machine
def test_cpus_this_machine_lacks_refused_before_any_change(
    child: subprocess.Popen[str],
) -> None:
    """CPU 4095 does not exist: the check before any change catches it, and Host.set_affinity
    alone also refuses when the kernel would quietly drop it (or has nothing left)."""
    live = Host("/")
    target = Target((), "node", CpuSet({1, 4095}), "preferred", CpuSet({0}), ())
    before = affinities(child.pid)
    with pytest.raises(PlacementUnavailable, match="CPUs 4095 are not online"):
        pin_process(live, child.pid, target)
    assert affinities(child.pid) == before
    tid = max(before)
    with pytest.raises(PlacementUnavailable, match="the kernel applied 1"):
        live.set_affinity(tid, {1, 4095})
    live.set_affinity(tid, before[tid])
    with pytest.raises(PlacementUnavailable, match="none of CPUs 4095"):
        live.set_affinity(tid, {4095})
    assert affinities(child.pid) == before


@needs_machine
class FailsOnSecondThread(Host):
    """The live host, except that pinning a second thread fails as EPERM would."""

    def __init__(self) -> None:
        super().__init__("/")
        self.calls: list[int] = []

    def set_affinity(self, tid: int, cpus: Iterable[int]) -> frozenset[int]:
        self.calls.append(tid)
        if len(self.calls) == 2:
            raise AccessDenied(f"tid:{tid}", errno.EPERM, "Operation not permitted")
        return super().set_affinity(tid, cpus)


@needs_machine
def test_failure_midway_restores_the_threads(child: subprocess.Popen[str]) -> None:
    before = affinities(child.pid)
    host = FailsOnSecondThread()
    target = Target((), "slice", CpuSet({1}), "preferred", CpuSet({0}), ())
    with pytest.raises(AccessDenied):
        pin_process(host, child.pid, target)
    first = min(before)
    # First thread pinned, second failed, then the first was put back (the third call).
    assert host.calls == [first, sorted(before)[1], first]
    assert affinities(child.pid) == before


@needs_machine
def test_host_process_reads(child: subprocess.Popen[str]) -> None:
    live = Host("/")
    tasks = live.list_tasks(child.pid)
    assert tasks[0] == child.pid and len(tasks) == 3
    assert "python" in live.read_proc(child.pid, "stat")
    with pytest.raises(ProcessGone):
        live.list_tasks(2**22 + 1)  # above pid_max's ceiling: never a process
    with pytest.raises(ProcessGone):
        live.read_proc(2**22 + 1, "stat")
    with pytest.raises(ProcessGone):
        live.get_affinity(2**22 + 1)


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("1 (systemd) S 0 1 1 0 -1 4194560 100 0", ("S", 4194560)),
        ("2 (kthreadd) S 0 0 0 0 -1 2129984 0 0", ("S", 2129984)),
        ("77 (a) b (c)) Z 1 77 77 0 -1 4194308 0", ("Z", 4194308)),
        ("9 (with space) R 1 9 9 0 -1 0 0", ("R", 0)),
    ],
)
def test_parse_stat(text: str, parsed: tuple[str, int]) -> None:
    assert parse_stat(text) == parsed


@pytest.mark.parametrize("text", ["", "garbage", "1 (x) S 0 1", "1 (x) S 0 1 1 0 -1 zz 0"])
def test_parse_stat_rejects(text: str) -> None:
    with pytest.raises(ParseError):
        parse_stat(text)
