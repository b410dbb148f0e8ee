"""Auto-pinning (mcpnode/agent/autopin.py): the /proc parsers and rule matching as tables; the
/proc/PID/fd fallback on a fabricated root (no /dev/nvidia0 can be made here); and the pinner
for real, on children this test starts, with NVML's process list replayed by RecordedNvml:
matching child pinned once (every thread), others untouched, a narrowed one left alone and
reported once, restarts adopting what is already placed, and every per-process failure."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import CapturingLogger

from mcpnode.agent.autopin import (
    AutoPinner,
    GpuProcess,
    LeftAlone,
    PinEvent,
    ProcInfo,
    Skipped,
    find_gpu_processes,
    first_rule,
    host_pid_for,
    ns_pid_of,
    parse_cgroup_unit,
    parse_cmdline,
    parse_device_minor,
    parse_exe,
    parse_ns_link,
    parse_nspid,
    parse_stat_identity,
    read_ns_pids,
    read_proc_info,
    rule_matches,
    target_for,
)
from mcpnode.agent.config import PinRule
from mcpnode.codec.record import replace
from mcpnode.errors import AccessDenied, UsageError
from mcpnode.host import Host
from mcpnode.placement.apply import PF_KTHREAD, live_online_cpus
from mcpnode.placement.plan import Placement, plan_placement
from mcpnode.topology.discover import discover, discover_host
from mcpnode.topology.model import CpuSet, Topology
from mcpnode.topology.nvml import RecordedNvml
from mcpnode.topology.parse import ParseError
from tests.support import placeroot
from tests.support.pinchild import CHILD, affinities, start_child, stop

GPU_ADDRESS = "0000:01:00.0"  # placeroot's one GPU
WORKER = "--mcpnode-test-worker"
RULES = (PinRule("workers", cmdline=re.compile(re.escape(WORKER) + r"\b")),)


def _live_skip_reason() -> str | None:
    reason = placeroot.skip_reason()
    if reason is not None:
        return reason
    # pin_process takes a thread on fewer than the online CPUs as narrowed by someone else, so
    # the children must start on all of them.
    if frozenset(os.sched_getaffinity(0)) != live_online_cpus(Host("/")):
        return "this process does not run on every online CPU"
    return None


needs_machine = pytest.mark.skipif(
    _live_skip_reason() is not None, reason=_live_skip_reason() or ""
)


# -- parsers -----------------------------------------------------------------------------------

STATUS_HOST = "Name:\tpython3\nTgid:\t4242\nPid:\t4242\nPPid:\t1\nNStgid:\t4242\nNSpid:\t4242\n"
STATUS_NESTED = (
    "Name:\tvllm\nTgid:\t90210\nPid:\t90210\nNStgid:\t90210\t311\t7\nNSpid:\t90210\t311\t7\n"
)


@pytest.mark.parametrize(
    ("status", "nspid", "ns_pid"),
    [
        (STATUS_HOST, (4242,), None),
        (STATUS_NESTED, (90210, 311, 7), 7),
        ("Name:\tcat\nPid:\t12\n", None, None),  # before Linux 4.1
    ],
)
def test_parse_nspid(status: str, nspid: tuple[int, ...] | None, ns_pid: int | None) -> None:
    assert parse_nspid(status) == nspid
    assert ns_pid_of(nspid) == ns_pid


@pytest.mark.parametrize("status", ["NSpid:\n", "NSpid:\t12\tx\n", "NSpid:\t-1\n"])
def test_parse_nspid_rejects(status: str) -> None:
    with pytest.raises(ParseError):
        parse_nspid(status)


CRI_ID = "4f1c2a9be0d3"
CRI_PATH = (
    "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1c2d.slice/"
    f"cri-containerd-{CRI_ID}.scope"
)


@pytest.mark.parametrize(
    ("text", "unit"),
    [
        ("0::/system.slice/vllm.service\n", "vllm.service"),
        ("0::/system.slice/vllm.service/worker\n", "vllm.service"),  # a sub-cgroup of it
        (f"0::{CRI_PATH}\n", f"cri-containerd-{CRI_ID}.scope"),
        ("0::/system.slice/docker-0a1b2c.scope\n", "docker-0a1b2c.scope"),
        ("0::/user.slice/user-1000.slice/session-3.scope\n", "session-3.scope"),
        # cgroup v1: the named systemd hierarchy says; the controllers' paths do not count.
        (
            "12:memory:/system.slice/other.service\n11:cpu,cpuacct:/\n"
            "1:name=systemd:/system.slice/triton.service\n",
            "triton.service",
        ),
        # Hybrid: the unified line is a bare "/", the named hierarchy holds the unit.
        ("1:name=systemd:/system.slice/sshd.service\n0::/\n", "sshd.service"),
        ("0::/\n", None),  # a container in its own cgroup namespace
        ("0::/kubepods.slice/kubepods-pod1.slice\n", None),
        ("", None),
        ("garbage\n0:/x.service\n", None),
    ],
)
def test_parse_cgroup_unit(text: str, unit: str | None) -> None:
    assert parse_cgroup_unit(text) == unit


STAT_TAIL = "S 1 1234 1234 0 -1 4194560 120 0 0 0 1 2 0 0 20 0 3 0 98765 12345678 400 18446744"


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        (f"1234 (my (weird) prog) {STAT_TAIL}", ("my (weird) prog", 4194560, 98765)),
        (f"1234 (with space) {STAT_TAIL}", ("with space", 4194560, 98765)),
        (
            "2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 0 0 0 0 20 0 1 0 5 0 0 18446744",
            ("kthreadd", 2129984, 5),
        ),
    ],
)
def test_parse_stat_identity(text: str, parsed: tuple[str, int, int]) -> None:
    assert parse_stat_identity(text) == parsed


@pytest.mark.parametrize(
    "text",
    [
        "",
        "1234 my prog S 1",
        "1234 (x) S 1 1234 1234 0 -1 4194560",  # truncated before starttime
        f"1234 (x) {STAT_TAIL.replace('98765', 'zz')}",
    ],
)
def test_parse_stat_identity_rejects(text: str) -> None:
    with pytest.raises(ParseError):
        parse_stat_identity(text)


def test_parse_stat_identity_of_this_process() -> None:
    text = Path("/proc/self/stat").read_text()
    comm, flags, start = parse_stat_identity(text)
    assert comm == Path("/proc/self/comm").read_text().rstrip("\n")
    assert not flags & PF_KTHREAD and start > 0


@pytest.mark.parametrize(
    ("target", "name"),
    [
        ("/usr/bin/python3.12", "python3.12"),
        ("/opt/vllm/bin/python3.12 (deleted)", "python3.12"),
        ("/usr/bin/name with space", "name with space"),
        (None, None),
        ("", None),
    ],
)
def test_parse_exe(target: str | None, name: str | None) -> None:
    assert parse_exe(target) == name


@pytest.mark.parametrize(
    ("raw", "line"),
    [
        ("python3\0-m\0vllm.entrypoints.openai.api_server\0--port\08000\0", None),
        ("", ""),
        ("nginx: worker process", "nginx: worker process"),  # setproctitle: no NULs
        ("a\0\0b\0", "a  b"),
    ],
)
def test_parse_cmdline(raw: str, line: str | None) -> None:
    expected = "python3 -m vllm.entrypoints.openai.api_server --port 8000" if line is None else line
    assert parse_cmdline(raw) == expected


INFORMATION = (
    "Model: \t\t NVIDIA H100 PCIe\nIRQ:   \t\t 298\n"
    "GPU UUID: \t GPU-3126d961-2891-5574-b3c1-87ce3c1e6eb9\nVideo BIOS: \t 96.00.99.00.01\n"
    "Bus Type: \t PCIe\nDMA Size: \t 52 bits\nDMA Mask: \t 0xfffffffffffff\n"
    f"Bus Location: \t {GPU_ADDRESS}\nDevice Minor: \t {{minor}}\nGPU Excluded:\t No\n"
)


def test_parse_device_minor() -> None:
    assert parse_device_minor(INFORMATION.format(minor=0)) == 0
    assert parse_device_minor(INFORMATION.format(minor=13)) == 13
    assert parse_device_minor("Model: \t\t NVIDIA H100 PCIe\n") is None
    with pytest.raises(ParseError):
        parse_device_minor(INFORMATION.format(minor="?"))


@pytest.mark.parametrize(
    ("target", "inode"),
    [("pid:[4026531836]", 4026531836), ("net:[4026531840]", None), ("pid:[]", None), (None, None)],
)
def test_parse_ns_link(target: str | None, inode: int | None) -> None:
    assert parse_ns_link(target) == inode


# -- rules -------------------------------------------------------------------------------------


def info(
    exe: str | None = "python3.12",
    comm: str = "python3.12",
    cmdline: str = "python3.12 -m vllm.entrypoints.openai.api_server --port 8000",
    unit: str | None = "vllm.service",
) -> ProcInfo:
    return ProcInfo(4242, exe, comm, cmdline, unit, 98765, False)


@pytest.mark.parametrize(
    ("rule", "proc", "matches"),
    [
        (PinRule("r", exe="python3.12"), info(), True),
        (PinRule("r", exe="python3"), info(), False),  # exact, not a prefix
        (PinRule("r", exe="tritonserver"), info(exe=None, comm="tritonserver"), True),  # comm
        (PinRule("r", exe="python3.12"), info(exe="python3.12", comm="pt_main_thread"), True),
        (PinRule("r", exe="pt_main_thread"), info(comm="pt_main_thread"), False),  # exe wins
        (PinRule("r", cmdline=re.compile(r"vllm\.entrypoints")), info(), True),
        (PinRule("r", cmdline=re.compile(r"^vllm")), info(), False),  # search, anchors kept
        (PinRule("r", unit="vllm.service"), info(), True),
        (PinRule("r", unit="vllm.service"), info(unit=None), False),
        (PinRule("r", unit="vllm"), info(), False),
        (PinRule("r", exe="python3.12", unit="vllm.service"), info(), True),
        (PinRule("r", exe="python3.12", unit="sglang.service"), info(), False),  # AND
        (
            PinRule("r", exe="python3.12", cmdline=re.compile("--port 8000"), unit="vllm.service"),
            info(),
            True,
        ),
        (PinRule("r"), info(), False),  # no field: matches nothing
    ],
)
def test_rule_matches(rule: PinRule, proc: ProcInfo, matches: bool) -> None:
    assert rule_matches(rule, proc) is matches


def test_first_rule_in_order() -> None:
    rules = (
        PinRule("a", exe="sglang"),
        PinRule("b", unit="vllm.service"),
        PinRule("c", exe="python3.12"),
    )
    assert first_rule(rules, info()) == rules[1]
    assert first_rule(rules[:1], info()) is None


# -- topology and placement from a root shaped like this machine -------------------------------


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return placeroot.build(tmp_path_factory.mktemp("placed"))


@pytest.fixture(scope="module")
def topo(root: Path) -> Topology:
    return discover_host(Host(root))


@pytest.fixture(scope="module")
def placement(topo: Topology) -> Placement:
    return plan_placement(topo)


def listing(root: Path, answer: object) -> RecordedNvml:
    """The root's recorded NVML, with GPU 0's compute processes answered by `answer`: a list of
    PIDs, or the raw value / error dict to replay."""
    meta = json.loads((root / "mcpnode-snapshot.json").read_text())
    calls: list[dict[str, Any]] = []
    for call in meta["nvml"]["calls"]:
        if call["fn"] == "nvmlDeviceGetComputeRunningProcesses":
            call = {"fn": call["fn"], "args": call["args"]}
            if isinstance(answer, dict):
                call.update(answer)
            elif isinstance(answer, list) and all(isinstance(p, int) for p in answer):
                call["value"] = [{"pid": p, "usedGpuMemory": 1 << 30} for p in answer]
            else:
                call["value"] = answer
        calls.append(call)
    return RecordedNvml(calls)


def test_target_for_two_gpus(placement: Placement) -> None:
    gpu0 = placement.gpus[0]
    gpu1 = replace(
        gpu0,
        index=1,
        uuid="GPU-00000000-0000-0000-0000-000000000001",
        slice_cpus=CpuSet({0}),
        env=(("CUDA_VISIBLE_DEVICES", "GPU-00000000-0000-0000-0000-000000000001"),),
    )
    two = replace(placement, gpus=(gpu0, gpu1))
    t = target_for(two, (0, 1), "slice", CpuSet({0, 1}))
    assert [g.index for g in t.gpus] == [0, 1]
    assert t.cpus == CpuSet({0, 1}) and t.memory_nodes == CpuSet({0})
    assert dict(t.env)["CUDA_VISIBLE_DEVICES"] == f"{gpu0.uuid},{gpu1.uuid}"
    assert target_for(two, (1,), "slice", None).cpus == CpuSet({0})
    with pytest.raises(UsageError):
        target_for(two, (0, 7), "slice", None)


# -- the /proc/PID/fd fallback on a fabricated root ---------------------------------------------

NS_INODE = 4026532999


def write_proc(
    proc: Path,
    pid: int,
    *,
    fds: dict[int, str] | None = None,
    nspid: str | None = None,
    status: str | None = None,
    cmdline: str = "",
    cgroup: str = "0::/\n",
    exe: str | None = None,
    ns: str | None = None,
    comm: str = "python3",
) -> None:
    """/proc/PID as a kernel writes it: fd/N and exe symlinks, stat, status, cmdline, cgroup."""
    d = proc / str(pid)
    d.mkdir(parents=True)
    if fds is not None:
        (d / "fd").mkdir()
        for fd, target in fds.items():
            (d / "fd" / str(fd)).symlink_to(target)
    if status is None and nspid is not None:
        status = (
            f"Name:\t{comm}\nState:\tS (sleeping)\nTgid:\t{pid}\nPid:\t{pid}\nNSpid:\t{nspid}\n"
        )
    if status is not None:
        (d / "status").write_text(status)
    (d / "stat").write_text(f"{pid} ({comm}) {STAT_TAIL}\n")
    (d / "cmdline").write_bytes(cmdline.encode())
    (d / "cgroup").write_text(cgroup)
    if exe is not None:
        (d / "exe").symlink_to(exe)
    if ns is not None:
        (d / "ns").mkdir()
        (d / "ns" / "pid").symlink_to(ns)


def fake_root(base: Path, information: str | None) -> Path:
    proc = base / "proc"
    write_proc(
        proc,
        100,
        fds={0: "/dev/null", 3: "/dev/nvidia0", 4: "/dev/nvidiactl", 5: "/dev/nvidia-uvm"},
        nspid="100\t7",
        cmdline=f"python3\0-m\0vllm\0{WORKER}\0",
        cgroup=f"0::{CRI_PATH}\n",
        exe="/usr/bin/python3.12 (deleted)",
        ns=f"pid:[{NS_INODE}]",
    )
    write_proc(proc, 200, fds={3: "/dev/nvidiactl", 4: "/dev/nvidia-uvm-tools"}, nspid="200")
    write_proc(proc, 300)  # no fd directory: it exited between the listing and the read
    write_proc(proc, 400, fds={3: "/dev/nvidia1"}, nspid="400")  # a GPU not in the topology
    # NSpid garbage: found, its namespace PID unknown (and a problem).
    write_proc(proc, 500, fds={3: "/dev/nvidia0"}, nspid="x", ns=f"pid:[{NS_INODE}]")
    # Exited between the fd scan and the status read.
    write_proc(proc, 600, fds={3: "/dev/nvidia0"}, ns=f"pid:[{NS_INODE}]")
    write_proc(proc, 700, fds={9: "/dev/nvidia0"}, nspid="700", ns="pid:[4026531836]")
    (proc / "self").symlink_to("700")
    gpus = proc / "driver" / "nvidia" / "gpus" / GPU_ADDRESS
    gpus.mkdir(parents=True)
    if information is not None:
        (gpus / "information").write_text(information)
    return base


FD_FOUND = (
    GpuProcess(100, 0, "fd", 7),
    GpuProcess(500, 0, "fd", None),
    GpuProcess(700, 0, "fd", None),
)


def test_fd_fallback_minor_from_driver_information(root: Path, tmp_path: Path) -> None:
    """No NVML at all: the minor comes from /proc/driver/nvidia/gpus/<bus id>/information."""
    no_nvml = discover(Host(root))  # sysfs only: the GPU has no NVML facts, so no minor
    assert no_nvml.gpus[0].nvml is None
    fake = Host(fake_root(tmp_path, INFORMATION.format(minor=0)))
    scan = find_gpu_processes(fake, no_nvml, RecordedNvml(None, "driver not loaded"))
    assert scan.processes == FD_FOUND
    assert scan.unreadable == 2  # 300 (no fd) and 600 (no status)
    assert scan.problems == (
        "NVML unavailable (nvmlInit: NotRecorded (driver not loaded)): GPU processes are found "
        "from /proc/PID/fd",
        "pid 500: not an NSpid line: 'NSpid:\\tx'",
    )
    scan = find_gpu_processes(fake, no_nvml, None)
    assert scan.processes == FD_FOUND
    assert scan.problems[0] == "no NVML backend: GPU processes are found from /proc/PID/fd"


def test_fd_fallback_minor_from_nvml(root: Path, topo: Topology, tmp_path: Path) -> None:
    """NVML answers but not this call (NotSupported on vGPU): NVML's minor number is used, and
    the driver's information file is not needed."""
    fake = Host(fake_root(tmp_path, None))
    backend = listing(root, {"error": "NotSupported", "code": 3})
    scan = find_gpu_processes(fake, topo, backend)
    assert scan.processes == FD_FOUND
    assert scan.problems[0] == (
        f"GPU 0 ({GPU_ADDRESS}): nvmlDeviceGetComputeRunningProcesses: NotSupported; its "
        "processes are found from /proc/PID/fd"
    )
    malformed = find_gpu_processes(fake, topo, listing(root, [{"process": 1}]))
    assert malformed.processes == FD_FOUND
    assert "malformed answer: 'pid'" in malformed.problems[0]


def test_nvml_answer_used_as_is(root: Path, topo: Topology, tmp_path: Path) -> None:
    fake = Host(fake_root(tmp_path, None))
    scan = find_gpu_processes(fake, topo, listing(root, [100, 4242, 0]))
    # No fd scan when NVML answers; 4242 has no /proc entry here: exited, counted. PID 0 is
    # garbage (a driver/binding ABI mismatch), dropped.
    assert scan.processes == (GpuProcess(100, 0, "nvml", 7),)
    assert (scan.problems, scan.unreadable) == ((), 1)


@pytest.mark.parametrize(
    ("information", "problem"),
    [
        (None, "device minor unknown (no NVML, no /proc/driver/nvidia/gpus entry)"),
        (INFORMATION.format(minor="?"), "device minor unreadable: Device Minor is not a number"),
    ],
)
def test_fd_fallback_without_a_minor(
    root: Path, tmp_path: Path, information: str | None, problem: str
) -> None:
    scan = find_gpu_processes(Host(fake_root(tmp_path, information)), discover(Host(root)), None)
    assert scan.processes == ()
    assert problem in scan.problems[1]


def test_fd_fallback_without_processes(root: Path, topo: Topology, tmp_path: Path) -> None:
    gpus = tmp_path / "proc" / "driver" / "nvidia" / "gpus" / GPU_ADDRESS
    gpus.mkdir(parents=True)
    (gpus / "information").write_text(INFORMATION.format(minor=0))
    scan = find_gpu_processes(Host(tmp_path), discover(Host(root)), None)
    assert (scan.processes, scan.unreadable) == ((), 0)
    # No /proc at all (NVML's minor known, so the listing is tried): a problem, not a crash.
    empty = Host(tmp_path / "proc" / "driver")
    scan = find_gpu_processes(empty, topo, None)
    assert scan.processes == ()
    assert scan.problems[-1].startswith("cannot list processes: /proc: ")
    assert host_pid_for(empty, 1, NS_INODE) is None


def test_read_proc_info_on_a_fabricated_root(tmp_path: Path) -> None:
    fake = Host(fake_root(tmp_path, None))
    assert read_proc_info(fake, 100) == ProcInfo(
        pid=100,
        exe="python3.12",
        comm="python3",
        cmdline=f"python3 -m vllm {WORKER}",
        unit=f"cri-containerd-{CRI_ID}.scope",
        start_time=98765,
        kernel_thread=False,
    )
    no_exe = read_proc_info(fake, 200)  # a kernel thread, or EACCES: no exe link to read
    assert no_exe is not None and no_exe.exe is None and no_exe.unit is None
    assert read_proc_info(fake, 999) is None  # no such process
    (tmp_path / "proc" / "200" / "stat").write_text("200 (garbage")
    assert read_proc_info(fake, 200) is None
    assert read_ns_pids(fake, 100) == (100, 7)


class HidesExe(Host):
    """A root whose exe links answer EACCES, as they do for a reader without ptrace access to
    the process (proc(5)); root here reads them all."""

    def readlink(self, logical: str) -> str | None:
        if logical.endswith("/exe"):
            raise AccessDenied(logical, 13, "Permission denied")
        return super().readlink(logical)


def test_unreadable_exe_falls_back_to_comm(tmp_path: Path) -> None:
    got = read_proc_info(HidesExe(fake_root(tmp_path, None)), 100)
    assert got is not None and (got.exe, got.comm) == (None, "python3")
    assert rule_matches(PinRule("r", exe="python3"), got)


def test_process_unreadable_after_it_was_found(
    root: Path, topo: Topology, placement: Placement, tmp_path: Path
) -> None:
    fake = fake_root(tmp_path, None)
    (fake / "proc" / "100" / "stat").write_text("100 (python3")  # cut short: exited mid-read
    pinner = AutoPinner(Host(fake), RULES, "slice", CapturingLogger())
    result = pinner.scan(topo, placement, listing(root, [100]))
    assert result.skipped == (Skipped(100, "exited or unreadable"),)
    assert (result.pinned, result.tracked) == ((), 0)


def test_host_pid_for_on_a_fabricated_root(tmp_path: Path) -> None:
    fake = Host(fake_root(tmp_path, None))
    assert host_pid_for(fake, 7, NS_INODE) == 100  # 500 (garbage) and 600 (gone) passed over
    assert host_pid_for(fake, 8, NS_INODE) is None
    assert host_pid_for(fake, 700, 4026531836) == 700  # the host's own namespace
    assert host_pid_for(fake, 7, 1) is None


# -- the pinner on real processes ----------------------------------------------------------------


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for p in procs:
        stop(p)


def spawn(procs: list[subprocess.Popen[str]], *args: str) -> subprocess.Popen[str]:
    p = start_child(*args)
    procs.append(p)
    return p


def logged(log: CapturingLogger, level: str) -> list[tuple[str, dict[str, Any]]]:
    return [(c.args[0], c.kwargs) for c in log.calls if c.method_name == level]


@needs_machine
def test_pins_matching_processes_once(
    root: Path, topo: Topology, placement: Placement, children: list[subprocess.Popen[str]]
) -> None:
    worker = spawn(children, WORKER)
    other = spawn(children, "--mcpnode-test-other")
    narrowed = spawn(children, WORKER, "--narrow", "0")
    before_other = affinities(other.pid)
    log = CapturingLogger()
    pinner = AutoPinner(Host("/"), RULES, "slice", log)
    gone = 2**22 + 1  # above pid_max's ceiling: never a process
    nvml = listing(root, [worker.pid, other.pid, narrowed.pid, gone])

    first = pinner.scan(topo, placement, nvml)
    assert first.pinned == (PinEvent(worker.pid, None, (0,), "workers", "1", 3),)
    assert affinities(worker.pid) == {tid: placeroot.SLICE for tid in affinities(worker.pid)}
    assert len(affinities(worker.pid)) == 3  # the main thread and two parked ones
    assert affinities(other.pid) == before_other
    reason = first.left_alone[0].reason
    assert first.left_alone == (LeftAlone(narrowed.pid, None, "workers", reason),)
    assert "already limited to CPUs 0 (online: 0-1), by someone else" in reason
    assert set(map(frozenset, affinities(narrowed.pid).values())) == {frozenset({0})}
    assert first.skipped == (Skipped(other.pid, "no rule matches"),)
    assert (first.adopted, first.problems, first.unreadable, first.tracked) == ((), (), 1, 1)
    infos = logged(log, "info")
    assert infos == [
        ("pin", {"pid": worker.pid, "ns_pid": None, "gpu": "0", "rule": "workers", "cpus": "1",
                 "threads": 3}),
        ("pin.left-alone", {"pid": narrowed.pid, "ns_pid": None, "rule": "workers",
                            "reason": reason}),
    ]  # fmt: skip

    second = pinner.scan(topo, placement, nvml)
    assert (second.pinned, second.left_alone, second.adopted) == ((), (), ())
    assert second.tracked == 1
    assert logged(log, "info") == infos  # nothing logged again

    # An agent restarted finds the worker on its CPUs: tracked, not pinned or logged again.
    restarted_log = CapturingLogger()
    restarted = AutoPinner(Host("/"), RULES, "slice", restarted_log)
    third = restarted.scan(topo, placement, nvml)
    assert (third.pinned, third.adopted, third.tracked) == ((), (worker.pid,), 1)
    assert logged(restarted_log, "info")[0][0] == "pin.left-alone"
    assert [e for e, _ in logged(restarted_log, "debug")] == ["pin.already"]

    # Gone from NVML's list but alive: still ours. Exited: forgotten.
    assert pinner.scan(topo, placement, listing(root, [])).tracked == 1
    stop(worker)
    after = pinner.scan(topo, placement, nvml)
    assert after.tracked == 0 and after.unreadable == 2


@needs_machine
def test_read_proc_info_of_a_live_child(children: list[subprocess.Popen[str]]) -> None:
    worker = spawn(children, WORKER)
    got = read_proc_info(Host("/"), worker.pid)
    assert got is not None
    assert got.exe == os.path.basename(os.path.realpath(sys.executable))
    assert got.cmdline == f"{sys.executable} -c {CHILD} {WORKER}"
    assert got.start_time == parse_stat_identity(Path(f"/proc/{worker.pid}/stat").read_text())[2]
    assert not got.kernel_thread
    assert rule_matches(RULES[0], got)


class ExitsBeforePin(Host):
    """The live host, on which `victim` really exits just before its threads are listed."""

    def __init__(self, victim: subprocess.Popen[str]) -> None:
        super().__init__("/")
        self.victim = victim

    def list_tasks(self, pid: int) -> tuple[int, ...]:
        if pid == self.victim.pid and self.victim.poll() is None:
            self.victim.kill()
            self.victim.wait(timeout=10)
        return super().list_tasks(pid)


class DeniesAffinity(Host):
    """The live host, refusing sched_setaffinity as EPERM would (an agent without CAP_SYS_NICE
    on another user's process)."""

    def __init__(self) -> None:
        super().__init__("/")

    def set_affinity(self, tid: int, cpus: Iterable[int]) -> frozenset[int]:
        raise AccessDenied(f"tid:{tid}", 1, "Operation not permitted")


class ListsAnExitedThread(Host):
    """The live host, whose thread listings also name a thread that has exited since."""

    def __init__(self) -> None:
        super().__init__("/")

    def list_tasks(self, pid: int) -> tuple[int, ...]:
        return (*super().list_tasks(pid), 2**22 + 1)


class RebornPid(Host):
    """The live host, whose stat of `pid` reports a later start time once `reborn` is set: the
    PID reused by a new process, as the pinner sees it."""

    def __init__(self, pid: int) -> None:
        super().__init__("/")
        self.pid = pid
        self.reborn = False

    def read_text(self, logical: str, limit: int | None = None) -> str:
        text = super().read_text(logical, limit)
        if self.reborn and logical == f"/proc/{self.pid}/stat":
            head, _, rest = text.rpartition(")")
            fields = rest.split()
            fields[19] = str(int(fields[19]) + 1)
            text = f"{head}) {' '.join(fields)}\n"
        return text


@needs_machine
def test_process_exiting_before_the_pin(
    root: Path, topo: Topology, placement: Placement, children: list[subprocess.Popen[str]]
) -> None:
    worker = spawn(children, WORKER)
    pinner = AutoPinner(ExitsBeforePin(worker), RULES, "slice", CapturingLogger())
    result = pinner.scan(topo, placement, listing(root, [worker.pid]))
    assert result.skipped == (Skipped(worker.pid, "exited while being pinned"),)
    assert (result.pinned, result.tracked) == ((), 0)


@needs_machine
def test_access_denied_is_a_problem_logged_once(
    root: Path, topo: Topology, placement: Placement, children: list[subprocess.Popen[str]]
) -> None:
    worker = spawn(children, WORKER)
    before = affinities(worker.pid)
    log = CapturingLogger()
    pinner = AutoPinner(DeniesAffinity(), RULES, "slice", log)
    nvml = listing(root, [worker.pid])
    for _ in range(2):
        result = pinner.scan(topo, placement, nvml)
        assert result.skipped == (Skipped(worker.pid, "cannot pin"),)
        assert result.problems == (
            f"pid {worker.pid}: cannot pin: tid:{min(before)}: Operation not permitted",
        )
    assert affinities(worker.pid) == before
    assert logged(log, "warning") == [("autopin.problem", {"problem": result.problems[0]})]


@needs_machine
def test_placement_this_machine_cannot_take(
    root: Path, topo: Topology, placement: Placement, children: list[subprocess.Popen[str]]
) -> None:
    worker = spawn(children, WORKER)
    before = affinities(worker.pid)
    gpu = placement.gpus[0]
    elsewhere = replace(placement, gpus=(replace(gpu, slice_cpus=CpuSet({4095})),))
    # A topology read from a machine that has CPU 4095 online.
    big = replace(topo, cpus=replace(topo.cpus, online=topo.cpus.online | {4095}))
    pinner = AutoPinner(Host("/"), RULES, "slice", CapturingLogger())
    result = pinner.scan(big, elsewhere, listing(root, [worker.pid]))
    assert result.skipped == (Skipped(worker.pid, "placement unavailable"),)
    assert result.problems[0].startswith("GPU 0: CPUs 4095 are not online on this machine")
    no_slice = replace(placement, gpus=(replace(gpu, slice_cpus=CpuSet()),))
    result = pinner.scan(topo, no_slice, listing(root, [worker.pid]))
    assert result.skipped == (Skipped(worker.pid, "no target"),)
    assert result.problems == (
        f"pid {worker.pid} (rule workers): GPU 0 ({GPU_ADDRESS}): no slice CPUs (try --scope node)",
    )
    assert affinities(worker.pid) == before
    # Node scope: the GPU's node is every CPU here, where the worker already runs (a thread
    # that exited after the listing does not change that).
    node = AutoPinner(ListsAnExitedThread(), RULES, "node", CapturingLogger())
    result = node.scan(topo, placement, listing(root, [worker.pid]))
    assert (result.adopted, result.tracked) == ((worker.pid,), 1)


@needs_machine
def test_reused_pid_is_a_new_process(
    root: Path, topo: Topology, placement: Placement, children: list[subprocess.Popen[str]]
) -> None:
    worker = spawn(children, WORKER)
    host = RebornPid(worker.pid)
    pinner = AutoPinner(host, RULES, "slice", CapturingLogger())
    nvml = listing(root, [worker.pid])
    assert len(pinner.scan(topo, placement, nvml).pinned) == 1
    host.reborn = True
    # Seen on the GPU with another start time: met anew (already on its CPUs, so adopted).
    result = pinner.scan(topo, placement, nvml)
    assert (result.pinned, result.adopted, result.tracked) == ((), (worker.pid,), 1)
    host.reborn = False
    # Not on the GPU any more, and its start time differs from the one remembered: forgotten.
    assert pinner.scan(topo, placement, listing(root, [])).tracked == 0


def _kernel_thread() -> int | None:
    for name in sorted(os.listdir("/proc"), key=lambda n: (len(n), n)):
        if name.isdigit():
            try:
                if parse_stat_identity(Path(f"/proc/{name}/stat").read_text())[1] & PF_KTHREAD:
                    return int(name)
            except (OSError, ParseError):
                continue
    return None


@needs_machine
def test_own_pid_and_kernel_threads_skipped(
    root: Path, topo: Topology, placement: Placement
) -> None:
    everything = (PinRule("all", cmdline=re.compile("")), PinRule("k", exe="kthreadd"))
    pinner = AutoPinner(Host("/"), everything, "slice", CapturingLogger())
    kthread = _kernel_thread()
    pids = [os.getpid()] + ([kthread] if kthread is not None else [])
    result = pinner.scan(topo, placement, listing(root, pids))
    expected = [Skipped(os.getpid(), "the agent itself")]
    if kthread is not None:
        expected.append(Skipped(kthread, "kernel thread"))
    assert sorted(result.skipped, key=lambda s: s.pid) == sorted(expected, key=lambda s: s.pid)
    assert result.pinned == ()


@needs_machine
def test_container_pid_namespace(root: Path, topo: Topology, tmp_path: Path) -> None:
    """A process in its own PID namespace (as in a container): NVML's host PID, NSpid's 1."""
    try:
        outer = subprocess.Popen(
            ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c",
             "import time; print('ready', flush=True); time.sleep(60)"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
    except OSError as err:
        pytest.skip(f"unshare: {err}")
    try:
        assert outer.stdout is not None
        if outer.stdout.readline() != "ready\n":
            outer.wait(timeout=10)
            pytest.skip(f"unshare --pid failed: {outer.stderr.read() if outer.stderr else ''}")
        inner = _child_of(outer.pid)
        live = Host("/")
        assert read_ns_pids(live, inner) == (inner, 1)
        scan = find_gpu_processes(live, topo, listing(root, [inner]))
        assert scan.processes == (GpuProcess(inner, 0, "nvml", 1),)
        inode = parse_ns_link(os.readlink(f"/proc/{inner}/ns/pid"))
        assert inode is not None
        assert host_pid_for(live, 1, inode) == inner
    finally:
        # Killing the namespace's init ends the namespace; then unshare exits.
        for pid in _children_of(outer.pid):
            os.kill(pid, signal.SIGKILL)
        outer.kill()
        outer.wait(timeout=10)


def _children_of(ppid: int) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                fields = Path(f"/proc/{name}/stat").read_text().rpartition(")")[2].split()
            except OSError:
                continue
            if int(fields[1]) == ppid:
                out.append(int(name))
    return out


def _child_of(ppid: int) -> int:
    deadline = time.monotonic() + 10
    while not (found := _children_of(ppid)):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    return found[0]
