"""Putting a process where its GPU's placement says: `mcpnode exec` and `mcpnode pin`.

The placement comes from a topology (`--root`, possibly another machine's recording); the effects
always land on the *live* kernel, through a live `Host`. So before anything changes, the CPUs and
memory nodes asked for are checked against what this kernel has online: a placement naming CPUs
the machine lacks is PlacementUnavailable, never the silent narrowing sched_setaffinity(2) does.

* exec: resolve the command, set this thread's CPU affinity and memory policy, set the
  environment, execve. Affinity and policy are per thread and survive execve, so the command
  starts placed; nothing outside this process changes.
* pin: set the CPU affinity of every thread of a running process. Its memory policy cannot be
  changed from outside (set_mempolicy(2) acts on the calling thread only; `migratepages(8)` moves
  pages already allocated), so pin leaves memory alone and says so. Threads are re-listed until
  no new one appears (a thread created by one not yet pinned inherits the old mask); on a failure
  the threads already changed get their original affinity back, in reverse order.
"""

from __future__ import annotations

from mcpnode.codec.record import record, replace
from mcpnode.errors import (
    CommandNotFound,
    McpnodeError,
    PinRefused,
    PlacementUnavailable,
    ProcessGone,
    UsageError,
)
from mcpnode.host import Host
from mcpnode.placement.plan import GpuPlacement, Placement, select_gpus
from mcpnode.published import env_problem
from mcpnode.topology import sysfs
from mcpnode.topology.model import CpuSet
from mcpnode.topology.parse import ParseError, parse_cpulist

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (codec/typenames.py)
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence
    from typing import Literal, NoReturn

    Scope = Literal["slice", "cache", "node", "socket"]
    Policy = Literal["preferred", "bind"]

# The CPUs `exec`, `pin` and the drop-ins place on, with torchrun's `--numa-binding` names where
# they are shared: `slice` (exclusive), `cache` (the slice's L3 domains: core-complex), `node`,
# `socket` (Scope, for the type checker, above).
SCOPES: tuple[Scope, ...] = ("slice", "cache", "node", "socket")

# include/linux/sched.h: "I am a kernel thread". Stable since 2.6 (0x00200000 since 2.6.27).
PF_KTHREAD = 0x00200000
# A thread created while pin walks the list inherits its creator's old mask; re-list this many
# times at most (a process spawning threads faster than this is reported, not chased forever).
_PIN_ROUNDS = 5


@record(frozen=True)
class Target:
    """What to apply: the CPUs and memory nodes of the selected GPU(s), and their environment."""

    gpus: tuple[GpuPlacement, ...]
    scope: Scope
    cpus: CpuSet
    policy: Policy
    memory_nodes: CpuSet
    env: tuple[tuple[str, str], ...]  # set on top of the inherited environment


@record(frozen=True)
class ExecPlan:
    target: Target
    argv: tuple[str, ...]
    executable: str | None  # the resolved program; None when not found (dry-run only)
    problems: tuple[str, ...]  # what would stop the exec on this machine (dry-run shows them)


@record(frozen=True)
class ThreadPin:
    tid: int
    before: CpuSet
    after: CpuSet


@record(frozen=True)
class PinResult:
    pid: int
    target: Target
    threads: tuple[ThreadPin, ...]
    vanished: tuple[int, ...]  # threads that exited while being pinned


# -- pure -------------------------------------------------------------------------------------


def choose_target(
    placement: Placement,
    selector: str,
    *,
    scope: Scope = "slice",
    policy: Policy = "preferred",
    online: CpuSet | None = None,
    process_cpus: CpuSet | None = None,
) -> Target:
    """The CPUs, memory nodes and environment for the GPUs `selector` names (see select_gpus).

    `scope="slice"` uses the GPUs' exclusive slices, `"cache"` the L3 domain(s) of the slices,
    `"node"` their NUMA-local CPUs, `"socket"` the CPUs of their node's package(s) (each clipped
    to `online`, the topology's online CPUs, when given). Not narrowed to the CPUs the placed
    process may use: exec does that in plan_exec, after checking the target against this
    kernel. Raises UsageError for an unknown GPU, or one without a slice / NUMA node (the
    problem says why), PlacementUnavailable when a slice names a CPU that is not in `online`."""
    gpus = select_gpus(placement, selector, process_cpus)
    cpus = CpuSet()
    nodes = CpuSet()
    for gpu in gpus:
        have = scope_cpus(gpu, scope)
        if online is not None:
            offline = gpu.slice_cpus - online if scope == "slice" else CpuSet()
            if offline:
                # A slice is cut from online CPUs only (plan.py), so one naming an offline CPU
                # was computed for another machine or edited: never narrowed away quietly.
                raise PlacementUnavailable(
                    f"GPU {gpu.index} ({gpu.address}): slice CPUs {offline.cpulist()} are not "
                    f"online on this machine (online: {online.cpulist() or 'none'})"
                )
            have = have & online
        if not have:
            why = _EMPTY_SCOPE.get(scope, "")
            hint = " (try --scope node)" if scope != "node" and gpu.local_cpus else ""
            raise UsageError(f"GPU {gpu.index} ({gpu.address}): no {scope} CPUs{why}{hint}")
        if not gpu.memory_nodes:
            raise UsageError(f"GPU {gpu.index} ({gpu.address}): NUMA node unknown")
        cpus = cpus | have
        nodes = nodes | gpu.memory_nodes
    return Target(gpus, scope, cpus, policy, nodes, merge_env(g.env for g in gpus))


_EMPTY_SCOPE = {
    "cache": ": no exclusive slice, or no L3 domains known (no cpu*/cache in sysfs, or a"
    " manifest published before them)",
    "socket": ": the package of the GPU's node is unknown",
}


def scope_cpus(gpu: GpuPlacement, scope: Scope) -> CpuSet:
    """The CPUs of `gpu` that `scope` names (choose_target)."""
    if scope == "slice":
        return gpu.slice_cpus
    if scope == "cache":
        return gpu.cache_cpus
    if scope == "socket":
        return gpu.socket_cpus
    return gpu.local_cpus


def clip_target(target: Target, allowed: CpuSet) -> Target:
    """`target` narrowed to `allowed`, the CPUs the process to be placed may use (its cgroup
    cpuset, a Slurm job's CPUs), as sched_setaffinity(2) would narrow it anyway. Raises
    PlacementUnavailable when none of the target's CPUs is left."""
    cpus = target.cpus & allowed
    if not cpus:
        shown = ", ".join(str(g.index) for g in target.gpus)
        hint = "; --scope node widens it to the GPU's NUMA node" if target.scope == "slice" else ""
        raise PlacementUnavailable(
            f"GPU {shown}: none of its {target.scope} CPUs {target.cpus.cpulist()} is among the "
            f"CPUs this process may use ({allowed.cpulist() or 'none'}: its cgroup cpuset or "
            f"affinity, e.g. a Slurm job's CPUs){hint}"
        )
    return replace(target, cpus=cpus)


def caller_cpus(live: Host) -> CpuSet | None:
    """The CPUs this process may run on (`Cpus_allowed_list` of /proc/self/status, which the
    kernel keeps as the intersection of its affinity and its cgroup cpuset), None when the
    kernel does not say."""
    from mcpnode.topology.sysfs import Problems, read_process_cpus

    return read_process_cpus(live, Problems()).cpus


def merge_env(envs: Iterable[tuple[tuple[str, str], ...]]) -> tuple[tuple[str, str], ...]:
    """One environment for several GPUs: each variable's comma lists joined, duplicates dropped,
    in first-seen order. A leading `=` (NCCL's "exact names") is kept once in front."""
    order: list[str] = []
    items: dict[str, list[str]] = {}
    exact: dict[str, bool] = {}
    for env in envs:
        for name, value in env:
            if name not in items:
                order.append(name)
                items[name] = []
                exact[name] = value.startswith("=")
            for item in value.removeprefix("=").split(","):
                if item and item not in items[name]:
                    items[name].append(item)
    return tuple((n, ("=" if exact[n] else "") + ",".join(items[n])) for n in order)


def parse_stat(text: str) -> tuple[str, int]:
    """(state, flags) from `/proc/PID/stat`. The command name (field 2) is in parentheses and
    may itself hold spaces and parentheses, so fields are counted after the *last* `)`: state is
    field 3, flags field 9 (proc_pid_stat(5)). Raises ParseError."""
    head, sep, rest = text.rpartition(")")
    fields = rest.split()
    if not sep or "(" not in head or len(fields) < 7:
        raise ParseError(f"not a /proc/PID/stat line: {text[:60]!r}")
    try:
        return fields[0], int(fields[6])
    except ValueError as err:
        raise ParseError(f"flags field is not a number: {fields[6]!r}") from err


# Programs that run as a PID namespace's init and start everything else in it: pinning one
# narrows every process it starts from then on (a container runtime's init, a service
# manager). A server that happens to be PID 1 of its container (`docker run ... python
# serve.py`) is not among them, and auto-pin rules may pin it.
INIT_NAMES = frozenset(
    {
        "systemd",
        "init",
        "tini",
        "dumb-init",
        "docker-init",
        "catatonit",
        "s6-svscan",
        "runit",
        "runsvdir",
        "supervisord",
        "openrc-init",
        "busybox",
        "sh",
        "bash",
    }
)


def parse_status_ids(text: str) -> tuple[int | None, tuple[int, ...]]:
    """(Tgid, NSpid) from `/proc/PID/status` (proc_pid_status(5)); NSpid lists the pid in each
    nested PID namespace, outermost first (Linux 4.1+); None/() when absent."""
    tgid: int | None = None
    nspid: tuple[int, ...] = ()
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        try:
            if name == "Tgid":
                tgid = int(rest.strip())
            elif name == "NSpid":
                nspid = tuple(int(x) for x in rest.split())
        except ValueError:
            continue
    return tgid, nspid


def init_like(pid: int, comm: str, nspid: tuple[int, ...]) -> str | None:
    """Why `pid` is an init (pin refuses it without --force), or None."""
    if pid == 1:
        return "pid 1 is this host's init: every service it starts would inherit the mask"
    if len(nspid) > 1 and nspid[-1] == 1 and comm in INIT_NAMES:
        return (
            f"pid {pid} ({comm}) is the init of a PID namespace (pid 1 inside it): everything "
            "it starts there would inherit the mask"
        )
    return None


# -- checks against the live kernel -----------------------------------------------------------


def live_online_cpus(live: Host) -> CpuSet:
    """The CPUs this kernel has online. Raises a HostError subclass or ParseError."""
    return parse_cpulist(live.read_text(f"{sysfs.SYS_CPU}/online"))


def live_memory_nodes(live: Host) -> CpuSet | None:
    """Nodes with memory on this kernel (N_MEMORY), else the online nodes; None on a kernel
    without NUMA (no node directory: set_mempolicy answers for itself there)."""
    for name in ("has_memory", "online"):
        text = live.read_optional(f"{sysfs.SYS_NODE}/{name}")
        if text is not None:
            return parse_cpulist(text)
    return None


def live_problems(live: Host, target: Target) -> list[str]:
    """Why `target` cannot be applied on this kernel as asked; empty when it can."""
    out = []
    try:
        online = live_online_cpus(live)
    except ParseError as err:
        return [f"cannot read this machine's online CPUs: {err}"]
    missing = target.cpus - online
    if missing:
        out.append(
            f"CPUs {missing.cpulist()} are not online on this machine (online: "
            f"{online.cpulist()}); the placement was computed for another topology"
        )
    nodes = live_memory_nodes(live)
    if nodes is not None and target.memory_nodes - nodes:
        out.append(
            f"memory node(s) {(target.memory_nodes - nodes).cpulist()} have no memory online "
            f"on this machine (nodes with memory: {nodes.cpulist() or 'none'})"
        )
    return out


def _require_available(live: Host, target: Target) -> None:
    problems = live_problems(live, target)
    if problems:
        raise PlacementUnavailable("; ".join(problems))


# -- exec -------------------------------------------------------------------------------------


def plan_exec(
    live: Host,
    target: Target,
    argv: Sequence[str],
    env: Mapping[str, str],
    *,
    dry_run: bool,
    allowed: CpuSet | None = None,
) -> ExecPlan:
    """Check everything an exec needs, before anything changes. Without `dry_run` a problem
    raises: CommandNotFound, PlacementUnavailable. With it, problems are returned to print.

    `allowed` (caller_cpus): the CPUs this process may use; a target whose CPUs are all online
    here is narrowed to them (clip_target). A target naming CPUs this machine lacks is a
    problem first: clipping must not hide a placement computed for another machine."""
    if not argv:
        raise UsageError("exec: no command given (mcpnode exec --gpu N -- CMD ARGS)")
    problems = live_problems(live, target)
    if problems and not dry_run:
        raise PlacementUnavailable("; ".join(problems))
    if not problems and allowed is not None:
        try:
            target = clip_target(target, allowed)
        except PlacementUnavailable as err:
            if not dry_run:
                raise
            problems.append(str(err))
    executable: str | None
    if dry_run:
        try:
            executable = live.resolve_command(argv[0], child_env(env, target))
        except CommandNotFound as err:  # shown rather than raised
            executable = None
            problems.append(str(err))
    else:
        executable = live.resolve_command(argv[0], child_env(env, target))
    return ExecPlan(target, tuple(argv), executable, tuple(problems))


def child_env(env: Mapping[str, str], target: Target) -> dict[str, str]:
    """The inherited environment with the placement's variables set over it. Each of those is
    checked again against the manifest's allow-list (mcpnode/published.py, env_problem): the
    reader already refused anything else, and an exec as root must not depend on that alone.
    Raises PlacementUnavailable."""
    for name, value in target.env:
        why = env_problem(name, value)
        if why is not None:
            raise PlacementUnavailable(f"placement environment {name[:64]!r}: {why}")
    return {**env, **dict(target.env)}


def run_exec(live: Host, plan: ExecPlan, env: Mapping[str, str]) -> NoReturn:
    """Place this thread and execve the command; returns only by raising (PlacementUnavailable,
    CommandNotFound, a HostError). Affinity first: then the memory policy's own allocations
    already come from the right CPUs' node."""
    if plan.executable is None or plan.problems:
        raise PlacementUnavailable("; ".join(plan.problems) or "exec: nothing to run")
    target = plan.target
    live.set_affinity(0, target.cpus)
    live.set_mempolicy(target.policy, target.memory_nodes)
    live.exec(plan.executable, plan.argv, child_env(env, target))


# -- pin --------------------------------------------------------------------------------------


def pin_process(live: Host, pid: int, target: Target, *, force: bool = False) -> PinResult:
    """Set the CPU affinity of every thread of live process `pid` to `target.cpus`.

    Refuses (before any change): a process that is gone or a zombie (ProcessGone), a kernel
    thread (PinRefused), a thread id rather than a process id (PinRefused, naming its process),
    an init (host PID 1, a PID namespace's init: init_like) unless `force`, one whose threads'
    affinity was narrowed by someone else unless `force` (PinRefused; a thread already on
    `target.cpus` counts as ours), CPUs this machine lacks (PlacementUnavailable). A failure
    midway restores the threads already changed, in reverse."""
    if pid <= 0:
        raise UsageError(f"pin: {pid} is not a process id")
    try:
        stat_text = live.read_proc(pid, "stat")
        state, flags = parse_stat(stat_text)
    except ParseError as err:
        raise ProcessGone(f"pid:{pid}", None, f"unreadable stat: {err}") from err
    if state in ("Z", "X", "x"):
        raise ProcessGone(f"pid:{pid}", None, f"the process has exited (state {state})")
    if flags & PF_KTHREAD:
        raise PinRefused(f"pid {pid} is a kernel thread; its placement is the kernel's business")
    tgid, nspid = parse_status_ids(live.read_proc(pid, "status"))
    if tgid is not None and tgid != pid:
        # /proc/TID/ exists for every thread (hidden from listings): pinning "it" would pin
        # only one thread of another process.
        raise PinRefused(
            f"{pid} is a thread id (TID) of process {tgid}, not a process: "
            f"`mcpnode pin {tgid}` pins all of that process's threads"
        )
    comm = stat_text.split("(", 1)[1].rpartition(")")[0] if "(" in stat_text else ""
    why = init_like(pid, comm, nspid)
    if why is not None and not force:
        raise PinRefused(f"{why}; --force overrides")
    _require_available(live, target)
    online = live_online_cpus(live)
    tasks = live.list_tasks(pid)
    if not force:
        for tid in tasks:
            try:
                mask = CpuSet(live.get_affinity(tid))
            except ProcessGone:
                continue
            if mask != online and mask != target.cpus:
                raise PinRefused(
                    f"pid {pid}: thread {tid} is already limited to CPUs {mask.cpulist()} "
                    f"(online: {online.cpulist()}), by someone else; --force overrides"
                )
    done: list[ThreadPin] = []
    vanished: list[int] = []
    seen: set[int] = set()
    try:
        for _ in range(_PIN_ROUNDS):
            fresh = [t for t in tasks if t not in seen]
            if not fresh:
                break
            for tid in fresh:
                seen.add(tid)
                try:
                    before = CpuSet(live.get_affinity(tid))
                    after = CpuSet(live.set_affinity(tid, target.cpus))
                except ProcessGone:
                    vanished.append(tid)
                    continue
                done.append(ThreadPin(tid, before, after))
            try:
                tasks = live.list_tasks(pid)
            except ProcessGone:
                tasks = ()
        else:
            if any(t not in seen for t in tasks):
                raise PinRefused(f"pid {pid}: still creating threads after {_PIN_ROUNDS} passes")
    except BaseException:
        _restore(live, done)
        raise
    if not done:
        raise ProcessGone(f"pid:{pid}", None, "every thread exited while being pinned")
    return PinResult(pid, target, tuple(done), tuple(vanished))


def _restore(live: Host, done: list[ThreadPin]) -> None:
    """Undo, last change first; a thread that exited meanwhile needs nothing."""
    for pinned in reversed(done):
        try:
            live.set_affinity(pinned.tid, pinned.before)
        except McpnodeError:  # best effort: the error that stopped the pin is the one to report
            continue
