"""Auto-pinning: the agent's periodic scan that puts GPU processes on their GPU's CPUs
(`[autopin]` in mcpnode.toml, docs/config.md). Opt-in, and only for processes a rule names.

Each scan (every `pin_interval` seconds):

1. find the processes using each GPU: NVML's compute processes, else, for a GPU whose call
   fails or when NVML is missing altogether, the processes holding `/dev/nvidia<minor>` open
   (`/proc/PID/fd`). NVML gives host PIDs (the driver does not know PID namespaces:
   NVIDIA/nvidia-docker#1483); the PID inside the process's own namespace comes from `NSpid`;
2. read what the rules match on (exe, comm, cmdline, systemd unit) and the start time, which
   tells a reused PID from the process met before;
3. pin the matching ones with `placement.apply.pin_process`, which refuses a process whose
   affinity someone else narrowed: that one is left alone, and said so once.

Each process is pinned, or left alone, once in its life: (pid, start time) is remembered until
the process is gone, so a user who narrows a pinned process later is not overruled every scan.

Reads go through the Host's generic primitives (not `read_proc`, which is live-only), so the
finding half runs on a fabricated root in tests; the pinning half needs the live kernel.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from mcpnode.agent.config import PinRule
from mcpnode.errors import HostError, PinRefused, PlacementUnavailable, ProcessGone, UsageError
from mcpnode.host import Host
from mcpnode.logs import EventLog
from mcpnode.placement.apply import PF_KTHREAD, Target, choose_target, merge_env, pin_process
from mcpnode.placement.plan import Placement
from mcpnode.topology.model import CpuSet, Gpu, Topology
from mcpnode.topology.nvml import GpuBackend, NvmlError
from mcpnode.topology.parse import ParseError
from mcpnode.topology.sysfs import PROC_NVIDIA_GPUS

Source = Literal["nvml", "fd"]
Scope = Literal["slice", "node"]

# The logical procfs root; every per-process path below is built from it by `proc_path`.
PROC = "/proc"
# A GPU's character device: /dev/nvidia<minor>. /dev/nvidiactl, /dev/nvidia-uvm(-tools),
# /dev/nvidia-modeset and /dev/nvidia-caps/* are opened by every CUDA process but name no GPU.
# The link text is the path in the process's mount namespace; the NVIDIA container toolkit
# (and CDI specs) inject device nodes under their host names, so the minor still holds there.
_GPU_DEVICE = re.compile(r"/dev/nvidia(\d+)\Z")
_FD_SCAN = f"{PROC}/PID/fd"  # in messages
_NS_LINK = re.compile(r"pid:\[(\d+)\]\Z")
_UNIT_SUFFIXES = (".service", ".scope")
# The kernel appends this to /proc/PID/exe when the binary was unlinked or replaced since
# execve (d_path(), fs/d_path.c): a package upgrade under a running server.
_DELETED = " (deleted)"


def proc_path(pid: int, name: str) -> str:
    """`/proc/PID/NAME`, the logical path a Host maps under its root."""
    return f"{PROC}/{int(pid)}/{name}"


# -- model --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuProcess:
    """A process using a GPU. `pid` is in the host's PID namespace (the one of the /proc the
    agent reads); `ns_pid` is its PID inside its own namespace (a container's), None when it
    lives in the host's."""

    pid: int
    gpu_index: int  # Gpu.index: PCI order, the placement's index
    source: Source
    ns_pid: int | None


@dataclass(frozen=True)
class GpuScan:
    processes: tuple[GpuProcess, ...]  # by pid, then GPU index
    problems: tuple[str, ...]
    unreadable: int  # processes skipped: exited mid-scan, or unreadable (EACCES)


@dataclass(frozen=True)
class ProcInfo:
    """What a rule matches on, read from /proc/PID."""

    pid: int
    exe: str | None  # base name of the `exe` link; None for kernel threads or when unreadable
    comm: str  # the kernel's command name (at most 15 characters, TASK_COMM_LEN)
    cmdline: str  # arguments joined by single spaces
    unit: str | None  # the systemd unit (`vllm.service`, `docker-<id>.scope`) from cgroup
    start_time: int  # clock ticks since boot (stat field 22): with pid, the process's identity
    kernel_thread: bool


@dataclass(frozen=True)
class PinEvent:
    pid: int
    ns_pid: int | None
    gpus: tuple[int, ...]
    rule: str
    cpus: str  # cpulist
    threads: int  # threads moved


@dataclass(frozen=True)
class LeftAlone:
    pid: int
    ns_pid: int | None
    rule: str
    reason: str


@dataclass(frozen=True)
class Skipped:
    pid: int
    reason: str


@dataclass(frozen=True)
class ScanResult:
    pinned: tuple[PinEvent, ...]  # newly pinned by this scan
    adopted: tuple[int, ...]  # found already on their CPUs (an agent restart): tracked, not moved
    left_alone: tuple[LeftAlone, ...]  # newly found narrowed by someone else
    skipped: tuple[Skipped, ...]  # GPU processes not pinned this scan, and why
    problems: tuple[str, ...]
    unreadable: int
    tracked: int  # processes pinned (or adopted) by this agent and still alive
    processes: tuple[GpuProcess, ...] = ()  # every GPU process the scan found


# -- parsers (pure) ----------------------------------------------------------------------------


def parse_nspid(status: str) -> tuple[int, ...] | None:
    """The `NSpid:` field of /proc/PID/status: the process's PID in each PID namespace it is in,
    from the namespace of the /proc mount (the host's, for the agent) down to its own, innermost
    last. None when the line is absent: kernels before 4.1 (proc(5), "NSpid"). Raises
    ParseError."""
    for line in status.splitlines():
        if line.startswith("NSpid:"):
            fields = line[len("NSpid:") :].split()
            if not fields or not all(f.isdigit() for f in fields):
                raise ParseError(f"not an NSpid line: {line[:60]!r}")
            return tuple(int(f) for f in fields)
    return None


def ns_pid_of(nspid: tuple[int, ...] | None) -> int | None:
    """The innermost PID when the process is in a nested namespace, else None."""
    return nspid[-1] if nspid is not None and len(nspid) > 1 else None


def parse_stat_identity(text: str) -> tuple[str, int, int]:
    """(comm, flags, start time in clock ticks) from /proc/PID/stat. comm (field 2) is in
    parentheses and may hold spaces and parentheses itself, so fields are counted after the
    *last* `)`: flags is field 9, starttime field 22 (proc_pid_stat(5)). Raises ParseError."""
    head, sep, rest = text.rpartition(")")
    fields = rest.split()
    if not sep or "(" not in head or len(fields) < 20:
        raise ParseError(f"not a /proc/PID/stat line: {text[:60]!r}")
    comm = head.split("(", 1)[1]
    if not (fields[6].isdigit() and fields[19].isdigit()):
        raise ParseError(f"flags or starttime not a number: {fields[6]!r}, {fields[19]!r}")
    return comm, int(fields[6]), int(fields[19])


def parse_exe(target: str | None) -> str | None:
    """The base name of a /proc/PID/exe link text, its " (deleted)" suffix dropped."""
    if target is None:
        return None
    name = target.removesuffix(_DELETED).rstrip("/").rsplit("/", 1)[-1]
    return name or None


def parse_cmdline(raw: str) -> str:
    """The text of /proc/PID/cmdline (arguments each ended by NUL) as one line, joined by spaces.
    A process that rewrote its title (setproctitle) may have spaces instead of NULs: kept."""
    return " ".join(raw.removesuffix("\0").split("\0"))


def parse_cgroup_unit(text: str) -> str | None:
    """The systemd unit a process runs in, from /proc/PID/cgroup: the last path component ending
    in `.service` or `.scope`, of the unified (`0::`) line, else of the `name=systemd` line
    (cgroup v1 and hybrid hosts, where the unified line may be a bare `/`). A process in a
    sub-cgroup of a service (`/system.slice/vllm.service/worker`) belongs to that service.
    None when neither line names one (a container with its own cgroup namespace sees `/`)."""
    unified: str | None = None
    named: str | None = None
    for line in text.splitlines():
        hierarchy, sep1, rest = line.partition(":")
        controllers, sep2, path = rest.partition(":")  # the path itself may hold ':'
        if not (sep1 and sep2):
            continue
        if hierarchy == "0" and not controllers:
            unified = path
        elif "name=systemd" in controllers.split(","):
            named = path
    for path in (p for p in (unified, named) if p is not None):
        for part in reversed(path.split("/")):
            if part.endswith(_UNIT_SUFFIXES):
                return part
    return None


def parse_device_minor(text: str) -> int | None:
    """`Device Minor:` of /proc/driver/nvidia/gpus/<bus id>/information: N of /dev/nvidiaN.
    None when the line is absent. Raises ParseError."""
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "Device Minor":
            if not value.strip().isdigit():
                raise ParseError(f"Device Minor is not a number: {value.strip()!r}")
            return int(value)
    return None


def parse_ns_link(target: str | None) -> int | None:
    """The inode of a `/proc/PID/ns/pid` link text (`pid:[4026531836]`); None otherwise."""
    m = _NS_LINK.match(target or "")
    return int(m.group(1)) if m else None


# -- rules (pure) ------------------------------------------------------------------------------


def rule_matches(rule: PinRule, info: ProcInfo) -> bool:
    """Every field the rule gives must match; a rule giving none matches nothing. `exe` is
    compared with the executable's base name, or with comm when the exe link is unreadable."""
    if rule.exe is None and rule.cmdline is None and rule.unit is None:
        return False
    if rule.exe is not None and rule.exe != (info.exe if info.exe is not None else info.comm):
        return False
    if rule.cmdline is not None and rule.cmdline.search(info.cmdline) is None:
        return False
    return rule.unit is None or rule.unit == info.unit


def first_rule(rules: Iterable[PinRule], info: ProcInfo) -> PinRule | None:
    return next((r for r in rules if rule_matches(r, info)), None)


def target_for(
    placement: Placement, gpus: tuple[int, ...], scope: Scope, online: CpuSet | None
) -> Target:
    """The pin target of a process using `gpus` (indexes): one GPU's target, or the union of
    several GPUs' CPUs and memory nodes with their environments merged. Raises UsageError
    (unknown GPU, no slice / NUMA node)."""
    parts = [choose_target(placement, str(i), scope=scope, online=online) for i in gpus]
    if len(parts) == 1:
        return parts[0]
    return Target(
        gpus=tuple(g for t in parts for g in t.gpus),
        scope=scope,
        cpus=functools.reduce(lambda a, b: a | b, (t.cpus for t in parts), CpuSet()),
        policy=parts[0].policy,
        memory_nodes=functools.reduce(
            lambda a, b: a | b, (t.memory_nodes for t in parts), CpuSet()
        ),
        env=merge_env(t.env for t in parts),
    )


# -- reading processes -------------------------------------------------------------------------


def read_ns_pids(live: Host, pid: int) -> tuple[int, ...] | None:
    """NSpid of `pid` (see parse_nspid). Raises a HostError subclass (PathNotFound once the
    process has exited), ParseError."""
    return parse_nspid(live.read_text(proc_path(pid, "status")))


def read_proc_info(live: Host, pid: int) -> ProcInfo | None:
    """What the rules match on; None when the process has exited or cannot be read."""
    try:
        comm, flags, start = parse_stat_identity(live.read_text(proc_path(pid, "stat")))
        cmdline = parse_cmdline(live.read_text(proc_path(pid, "cmdline")))
        # No cgroup file: a kernel without CONFIG_CGROUPS; the process just has no unit.
        unit = parse_cgroup_unit(live.read_optional(proc_path(pid, "cgroup")) or "")
    except (HostError, ParseError):
        return None
    try:
        exe = parse_exe(live.readlink(proc_path(pid, "exe")))
    except HostError:
        # EACCES: the exe link needs ptrace read access (proc(5)); rules fall back to comm.
        exe = None
    return ProcInfo(pid, exe, comm, cmdline, unit, start, bool(flags & PF_KTHREAD))


def _pids(live: Host) -> list[int]:
    return [int(n) for n in live.listdir(PROC) if n.isdigit()]


def _gpu_minor(live: Host, gpu: Gpu) -> int | None:
    """N of /dev/nvidiaN: NVML's minor number, else the driver's /proc information file.
    Raises a HostError subclass, ParseError."""
    if gpu.nvml is not None and gpu.nvml.minor is not None:
        return gpu.nvml.minor
    text = live.read_optional(f"{PROC_NVIDIA_GPUS}/{gpu.address}/information")
    return None if text is None else parse_device_minor(text)


def _open_minors(live: Host, pid: int) -> set[int]:
    """Minors of the /dev/nvidiaN a process holds open. Raises a HostError subclass."""
    out = set()
    for fd in live.listdir(proc_path(pid, "fd")):
        m = _GPU_DEVICE.match(live.readlink(f"{proc_path(pid, 'fd')}/{fd}") or "")
        if m:
            out.add(int(m.group(1)))
    return out


def find_gpu_processes(live: Host, topo: Topology, backend: GpuBackend | None) -> GpuScan:
    """The processes using each GPU of `topo`, read through `live` (see the module docstring).

    NVML is asked per GPU by its NVML index (nvidia-smi's `Processes`); a GPU whose call fails
    (NotSupported on vGPU and some MIG setups, a lost GPU), or every GPU when NVML is
    unavailable, is looked for in /proc/PID/fd instead, and the problems say so. Never raises:
    a process that exits or cannot be read mid-scan is skipped and counted."""
    problems: list[str] = []
    users: dict[int, dict[int, Source]] = {}  # pid -> {GPU index: where it was seen}
    fallback: list[Gpu] = []
    gpus = sorted(topo.gpus, key=lambda g: g.index)
    if backend is None:
        fallback = gpus
        if gpus:
            problems.append(f"no NVML backend: GPU processes are found from {_FD_SCAN}")
    else:
        try:
            backend.call("nvmlInit")
        except NvmlError as err:
            fallback = gpus
            problems.append(f"NVML unavailable ({err}): GPU processes are found from {_FD_SCAN}")
        else:
            for gpu in gpus:
                # NVML's index when discovery joined NVML; PCI order (NVML's own) otherwise.
                index = gpu.nvml.index if gpu.nvml is not None else gpu.index
                try:
                    answer = backend.call("nvmlDeviceGetComputeRunningProcesses", index)
                    pids = [int(p["pid"]) for p in answer]
                except NvmlError as err:
                    why = str(err)
                except (TypeError, ValueError, KeyError) as err:
                    why = f"malformed answer: {err}"
                else:
                    # A driver and binding whose process structs disagree (535.43-535.86
                    # with nvidia-ml-py 12.535.77) answer garbage PIDs: 0 and below are dropped
                    # here, the others are not found in /proc and counted as unreadable.
                    for pid in pids:
                        if pid > 0:
                            users.setdefault(pid, {})[gpu.index] = "nvml"
                    continue
                fallback.append(gpu)
                problems.append(
                    f"GPU {gpu.index} ({gpu.address}): {why}; its processes are found from "
                    f"{_FD_SCAN}"
                )
    unreadable = 0
    if fallback:
        scanned, unreadable = _scan_fds(live, fallback, problems)
        for pid, indexes in scanned.items():
            users.setdefault(pid, {}).update(dict.fromkeys(indexes, "fd"))
    out: list[GpuProcess] = []
    for pid in sorted(users):
        try:
            ns_pid = ns_pid_of(read_ns_pids(live, pid))
        except HostError:  # exited since NVML or the fd scan saw it
            unreadable += 1
            continue
        except ParseError as err:
            problems.append(f"pid {pid}: {err}")
            ns_pid = None
        out.extend(GpuProcess(pid, i, s, ns_pid) for i, s in sorted(users[pid].items()))
    return GpuScan(tuple(out), tuple(problems), unreadable)


def _scan_fds(live: Host, gpus: list[Gpu], problems: list[str]) -> tuple[dict[int, set[int]], int]:
    """{pid: GPU indexes} for the processes holding one of `gpus`' device nodes open, and how
    many processes could not be read."""
    by_minor: dict[int, int] = {}
    for gpu in gpus:
        try:
            minor = _gpu_minor(live, gpu)
        except (HostError, ParseError) as err:
            problems.append(f"GPU {gpu.index} ({gpu.address}): device minor unreadable: {err}")
            continue
        if minor is None:
            problems.append(
                f"GPU {gpu.index} ({gpu.address}): device minor unknown (no NVML, no "
                f"{PROC_NVIDIA_GPUS} entry); its processes cannot be found"
            )
            continue
        by_minor[minor] = gpu.index
    found: dict[int, set[int]] = {}
    unreadable = 0
    if not by_minor:
        return found, unreadable
    try:
        pids = _pids(live)
    except HostError as err:
        problems.append(f"cannot list processes: {err}")
        return found, unreadable
    for pid in pids:
        try:
            minors = _open_minors(live, pid)
        except HostError:  # exited (PathNotFound), or EACCES without CAP_SYS_PTRACE
            unreadable += 1
            continue
        indexes = {by_minor[m] for m in minors if m in by_minor}
        if indexes:
            found[pid] = indexes
    return found, unreadable


def host_pid_for(live: Host, ns_pid: int, ns_inode: int) -> int | None:
    """The host PID of the process that is `ns_pid` inside the PID namespace whose inode is
    `ns_inode` (`/proc/PID/ns/pid` reads `pid:[INODE]`); None when no process matches. Only the
    namespace a process itself lives in is matched (its innermost NSpid)."""
    try:
        pids = _pids(live)
    except HostError:
        return None
    for pid in pids:
        try:
            if parse_ns_link(live.readlink(proc_path(pid, "ns/pid"))) != ns_inode:
                continue
            nspid = read_ns_pids(live, pid)
        except (HostError, ParseError):  # exited, or unreadable: not the one we can name
            continue
        if nspid is not None and nspid[-1] == ns_pid:
            return pid
    return None


# -- the agent's pinner ------------------------------------------------------------------------


@dataclass(frozen=True)
class _Met:
    start_time: int
    pinned: bool  # False: left alone


@dataclass
class _Scan:
    pinned: list[PinEvent] = field(default_factory=list)
    adopted: list[int] = field(default_factory=list)
    left_alone: list[LeftAlone] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


@dataclass(eq=False)
class AutoPinner:
    """Pins each GPU process a rule matches, once, and remembers it while it lives.

    Not thread-safe: the agent calls `scan` from its loop thread only."""

    live: Host
    rules: tuple[PinRule, ...]
    scope: Scope
    log: EventLog
    migrate: bool = False  # the rules' default (`[autopin] migrate`)

    def __post_init__(self) -> None:
        self._own_pid = os.getpid()
        self._met: dict[int, _Met] = {}
        self._problems: frozenset[str] = frozenset()

    @property
    def tracked(self) -> int:
        """Processes pinned (or found on their CPUs) by this pinner, alive at the last scan."""
        return sum(1 for m in self._met.values() if m.pinned)

    def scan(self, topo: Topology, placement: Placement, backend: GpuBackend | None) -> ScanResult:
        """One pass: find GPU processes, pin the new matching ones, forget the gone ones.
        Never raises for a process: each one's failure is a skip or a problem."""
        found = find_gpu_processes(self.live, topo, backend)
        out = _Scan(problems=list(found.problems))
        gpus_of: dict[int, list[int]] = {}
        ns_of: dict[int, int | None] = {}
        for p in found.processes:
            gpus_of.setdefault(p.pid, []).append(p.gpu_index)
            ns_of[p.pid] = p.ns_pid
        seen: dict[int, int] = {}
        for pid, gpus in sorted(gpus_of.items()):
            self._consider(pid, ns_of[pid], tuple(gpus), topo, placement, seen, out)
        self._forget(seen)
        for problem in out.problems:
            if problem not in self._problems:
                self.log.warning("autopin.problem", problem=problem)
        self._problems = frozenset(out.problems)
        return ScanResult(
            tuple(out.pinned),
            tuple(out.adopted),
            tuple(out.left_alone),
            tuple(out.skipped),
            tuple(out.problems),
            found.unreadable,
            self.tracked,
            found.processes,
        )

    def _consider(
        self,
        pid: int,
        ns_pid: int | None,
        gpus: tuple[int, ...],
        topo: Topology,
        placement: Placement,
        seen: dict[int, int],
        out: _Scan,
    ) -> None:
        matched = self._match(pid, seen)
        if isinstance(matched, str):
            out.skipped.append(Skipped(pid, matched))
        if not isinstance(matched, tuple):
            return
        info, rule = matched
        try:
            target = target_for(placement, gpus, self.scope, topo.cpus.online)
        except UsageError as err:
            out.problems.append(f"pid {pid} (rule {rule.name}): {err}")
            out.skipped.append(Skipped(pid, "no target"))
            return
        # Between read_proc_info and the pin the PID could in principle be reused; PIDs wrap
        # only after pid_max (4194304 on 64-bit since systemd 243) allocations, and the
        # start-time check at the next scan forgets such an entry.
        try:
            if self._on_target(pid, target.cpus):
                self._met[pid] = _Met(info.start_time, True)
                out.adopted.append(pid)
                self.log.debug(
                    "pin.already",
                    pid=pid,
                    ns_pid=ns_pid,
                    rule=rule.name,
                    cpus=target.cpus.cpulist(),
                )
                return
            result = pin_process(self.live, pid, target)
        except PinRefused as err:
            self._met[pid] = _Met(info.start_time, False)
            out.left_alone.append(LeftAlone(pid, ns_pid, rule.name, str(err)))
            self.log.info("pin.left-alone", pid=pid, ns_pid=ns_pid, rule=rule.name, reason=str(err))
            return
        except ProcessGone:
            out.skipped.append(Skipped(pid, "exited while being pinned"))
            return
        except PlacementUnavailable as err:
            out.problems.append(f"GPU {_gpulist(gpus)}: {err}")
            out.skipped.append(Skipped(pid, "placement unavailable"))
            return
        except HostError as err:  # AccessDenied (no CAP_SYS_NICE), an I/O error
            out.problems.append(f"pid {pid}: cannot pin: {err}")
            out.skipped.append(Skipped(pid, "cannot pin"))
            return
        self._met[pid] = _Met(info.start_time, True)
        event = PinEvent(pid, ns_pid, gpus, rule.name, target.cpus.cpulist(), len(result.threads))
        out.pinned.append(event)
        self.log.info(
            "pin",
            pid=pid,
            ns_pid=ns_pid,
            gpu=_gpulist(gpus),
            rule=rule.name,
            cpus=event.cpus,
            threads=event.threads,
        )
        if rule.migrate if rule.migrate is not None else self.migrate:
            self._migrate(pid, ns_pid, rule.name, target)

    def _match(self, pid: int, seen: dict[int, int]) -> tuple[ProcInfo, PinRule] | str | None:
        """A GPU process and the first rule that matches it; why it is skipped; or None for
        one met at an earlier scan (pinned or left alone, and logged then). Notes its start
        time in `seen`."""
        if pid == self._own_pid:
            return "the agent itself"
        info = read_proc_info(self.live, pid)
        if info is None:
            return "exited or unreadable"
        seen[pid] = info.start_time
        met = self._met.get(pid)
        if met is not None:
            if met.start_time == info.start_time:
                return None
            del self._met[pid]  # the PID was reused: a new process
        if info.kernel_thread:
            return "kernel thread"
        rule = first_rule(self.rules, info)
        return (info, rule) if rule is not None else "no rule matches"

    def _migrate(self, pid: int, ns_pid: int | None, rule: str, target: Target) -> None:
        """Move the pinned process's pages to its GPU's node (placement/memory.py). A failure
        is logged and leaves the pin in place: memory is the second half of placement."""
        from mcpnode.placement.memory import migrate_memory

        try:
            move = migrate_memory(self.live, pid, target)
        except (HostError, PlacementUnavailable) as err:
            self.log.warning("pin.migrate-failed", pid=pid, rule=rule, error=str(err))
            return
        self.log.info(
            "pin.migrated",
            pid=pid,
            ns_pid=ns_pid,
            rule=rule,
            to_nodes=move.to_nodes.cpulist(),
            moved_bytes=move.moved_bytes,
            not_moved_pages=move.not_moved_pages,
            before={str(n): b for n, b in move.before.items()},
            after={str(n): b for n, b in move.after.items()},
        )

    def _on_target(self, pid: int, cpus: CpuSet) -> bool:
        """Every thread already runs on exactly `cpus`. Raises ProcessGone, HostError."""
        masks = []
        for tid in self.live.list_tasks(pid):
            try:
                masks.append(self.live.get_affinity(tid))
            except ProcessGone:  # that thread exited; the others still say
                continue
        return bool(masks) and all(m == cpus for m in masks)

    def _forget(self, seen: dict[int, int]) -> None:
        """Drop what is remembered of processes that are gone or whose PID was reused. One not
        seen on a GPU this scan may still be alive (and pinned by us): its stat says."""
        for pid, met in list(self._met.items()):
            start = seen.get(pid)
            if start is None:
                try:
                    start = parse_stat_identity(self.live.read_text(proc_path(pid, "stat")))[2]
                except (HostError, ParseError):
                    start = None
            if start != met.start_time:
                del self._met[pid]


def _gpulist(gpus: tuple[int, ...]) -> str:
    return ",".join(str(g) for g in gpus)
