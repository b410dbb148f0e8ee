"""Process placement, on the live root only: `list_tasks`, `read_proc`, `get_affinity` /
`set_affinity`, `set_mempolicy`, `node_memory` (NUMA-placed buffers for the probe) and
`resolve_command` / `exec`. These act on the live kernel even when discovery reads a fixture
(`exec --root`): the CLI passes a live `Host("/")` for the effects, and a recorded root refuses
them with NotSupported. ctypes is imported only by the calls that need a system call Python
does not wrap.
"""

from __future__ import annotations

import errno as errno_mod
import os

from mcpnode.codec.bounded import is_digits
from mcpnode.codec.cpus import format_list
from mcpnode.errors import (
    CommandNotFound,
    McpnodeError,
    NotSupported,
    PathNotFound,
    PlacementUnavailable,
    ProcessGone,
    ReadError,
    WriteError,
)
from mcpnode.host.command import HostCommands
from mcpnode.host.translate import _translate, _translate_task
from mcpnode.host.types import NodeMemory

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (codec/typenames.py)
if TYPE_CHECKING:
    import ctypes
    from collections.abc import Iterable, Iterator, Mapping, Sequence
    from contextlib import AbstractContextManager
    from typing import Literal, NoReturn

    MempolicyMode = Literal["default", "preferred", "bind"]

# set_mempolicy(2) through libc's syscall(3) and ctypes rather than the `numa`/libnuma Python
# bindings: no new dependency, and no libnuma.so, which minimal hosts and distroless images lack.
# The syscall and its modes are ABI, unchanged since Linux 2.6.7. Numbers per architecture:
# arch/x86/entry/syscalls/syscall_64.tbl, include/uapi/asm-generic/unistd.h (arm64, riscv),
# arch/powerpc/kernel/syscalls/syscall.tbl, arch/s390/kernel/syscalls/syscall.tbl.
_SYS_SET_MEMPOLICY = {"x86_64": 238, "aarch64": 237, "riscv64": 237, "ppc64le": 261, "s390x": 270}
# include/uapi/linux/mempolicy.h
MPOL_MODES = {"default": 0, "preferred": 1, "bind": 2}
# mbind(2) and move_pages(2) numbers, from the same tables as _SYS_SET_MEMPOLICY above.
# mbind(2) and move_pages(2) numbers, from the same tables as _SYS_SET_MEMPOLICY above.
_SYS_MBIND = {"x86_64": 237, "aarch64": 235, "riscv64": 235, "ppc64le": 259, "s390x": 268}
_SYS_MOVE_PAGES = {"x86_64": 279, "aarch64": 239, "riscv64": 239, "ppc64le": 301, "s390x": 310}
# migrate_pages(2), same tables (asm-generic: 238, between set_mempolicy 237 and move_pages 239).
_SYS_MIGRATE_PAGES = {
    "x86_64": 256,
    "aarch64": 238,
    "riscv64": 238,
    "ppc64le": 258,
    "s390x": 287,
}
_CPU_DMA_LATENCY = "/dev/cpu_dma_latency"
# include/uapi/linux/mempolicy.h: fail if pages already there break the policy; move them.
_MPOL_MF_STRICT = 1 << 0
_MPOL_MF_MOVE = 1 << 1


class HostProcesses(HostCommands):
    """Live processes: placement and exec."""

    def _require_live(self, what: str) -> None:
        if not self.is_live:
            raise NotSupported(
                what, None, "needs the live host: a recorded root has no processes to change"
            )

    def read_proc(self, pid: int, name: str) -> str:
        """`/proc/PID/NAME` of a live process (`stat`, `status`, `cmdline`; NUL bytes kept).

        Raises ProcessGone when the process does not exist (ENOENT, ESRCH), AccessDenied for
        EACCES/EPERM, NotSupported on a recorded root (its /proc is not this kernel's)."""
        self._require_live(f"pid:{pid}")
        logical = f"/proc/{int(pid)}/{name}"
        try:
            return self.read_text(logical)
        except PathNotFound as err:
            raise ProcessGone(logical, err.errno, "no such process") from err
        except ReadError as err:
            if err.errno == errno_mod.ESRCH:  # the process exited between open and read
                raise ProcessGone(logical, err.errno, "no such process") from err
            raise

    def list_tasks(self, pid: int) -> tuple[int, ...]:
        """Thread ids of live process `pid` (`/proc/PID/task`), ascending.

        Raises ProcessGone when the process does not exist, NotSupported on a recorded root."""
        self._require_live(f"pid:{pid}")
        logical = f"/proc/{int(pid)}/task"
        try:
            names = os.listdir(logical)
        except OSError as err:
            if err.errno in (errno_mod.ENOENT, errno_mod.ESRCH):
                raise ProcessGone(logical, err.errno, "no such process") from err
            raise _translate(err, logical) from err
        # A pid is at most 7 digits (PID_MAX_LIMIT, 4,194,304: include/linux/threads.h).
        return tuple(sorted(int(n) for n in names if is_digits(n, most=7)))

    def get_affinity(self, tid: int) -> frozenset[int]:
        """CPU affinity of a live thread (sched_getaffinity(2); 0 = the calling thread).

        Raises ProcessGone (ESRCH), AccessDenied (EPERM), NotSupported on a recorded root."""
        self._require_live(f"tid:{tid}")
        try:
            return frozenset(os.sched_getaffinity(tid))
        except OSError as err:
            raise _translate_task(err, tid) from err

    def set_affinity(self, tid: int, cpus: Iterable[int]) -> frozenset[int]:
        """Set the CPU affinity of one live thread (sched_setaffinity(2); 0 = the calling
        thread, which passes it on across fork and execve). Returns the affinity now in force.

        The kernel silently drops CPUs that are offline, absent or outside the thread's cpuset
        and fails (EINVAL) only when none is left; both raise PlacementUnavailable here, so a
        placement from another machine is never half-applied quietly. Also raises ProcessGone
        (ESRCH), AccessDenied (EPERM: another user's process without CAP_SYS_NICE), NotSupported
        on a recorded root."""
        self._require_live(f"tid:{tid}")
        wanted = frozenset(cpus)
        if not wanted:
            raise PlacementUnavailable(f"thread {tid}: an empty CPU set cannot be applied")
        try:
            os.sched_setaffinity(tid, wanted)
            applied = frozenset(os.sched_getaffinity(tid))
        except OSError as err:
            if err.errno == errno_mod.EINVAL:
                raise PlacementUnavailable(
                    f"thread {tid}: none of CPUs {format_list(wanted)} is online and allowed here"
                ) from err
            raise _translate_task(err, tid) from err
        if applied != wanted:
            raise PlacementUnavailable(
                f"thread {tid}: asked for CPUs {format_list(wanted)}, the kernel applied "
                f"{format_list(applied)} (the others are offline, absent or outside the cpuset)"
            )
        return applied

    def set_mempolicy(self, mode: MempolicyMode, nodes: Iterable[int]) -> None:
        """Set the NUMA memory policy of the *calling thread* (set_mempolicy(2)); it is kept
        across fork and execve. There is no system call to set another process's policy.

        `preferred` allocates on the first node of `nodes` and falls back to the others when it
        is full; `bind` restricts allocations to `nodes` (the OOM killer acts rather than fall
        back); `default` (no nodes) restores the system default. Raises PlacementUnavailable
        when the kernel refuses the nodes (EINVAL: not online or outside the cpuset's mems),
        NotSupported on a recorded root, an unknown architecture or a kernel without NUMA
        (ENOSYS)."""
        import ctypes
        import platform

        self._require_live("set_mempolicy")
        node_set = sorted(frozenset(nodes))
        if (mode == "default") != (not node_set) or any(n < 0 for n in node_set):
            raise PlacementUnavailable(f"set_mempolicy {mode}: bad node list {node_set}")
        machine = platform.machine()
        nr = _SYS_SET_MEMPOLICY.get(machine)
        if nr is None:
            raise NotSupported("set_mempolicy", None, f"syscall number unknown for {machine}")
        bits = ctypes.sizeof(ctypes.c_ulong) * 8
        words = (node_set[-1] // bits + 1) if node_set else 1
        mask = (ctypes.c_ulong * words)()
        for node in node_set:
            mask[node // bits] |= 1 << (node % bits)
        # maxnode is one more than the bits passed: mm/mempolicy.c get_nodes() decrements it
        # first (a historical off-by-one that libnuma also compensates for).
        maxnode = words * bits + 1 if node_set else 0
        libc = ctypes.CDLL(None, use_errno=True)
        rc = libc.syscall(
            ctypes.c_long(nr),
            ctypes.c_int(MPOL_MODES[mode]),
            mask if node_set else None,
            ctypes.c_ulong(maxnode),
        )
        if rc != 0:
            raise _numa_error(
                "set_mempolicy",
                f"set_mempolicy {mode} {format_list(frozenset(node_set))}: the kernel refused "
                "the nodes (not online here, or outside this cpuset's memory nodes)",
            )

    def resolve_command(self, name: str, env: Mapping[str, str]) -> str:
        """The executable `name` runs as, looked up on `env`'s PATH like execvp(3) does (a name
        with a slash is taken as a path). Raises CommandNotFound when there is none, or it is
        not an executable file; NotSupported on a recorded root."""
        import shutil

        self._require_live(f"command:{name}")
        path = env.get("PATH", os.defpath)
        found = shutil.which(name, path=path)
        if found is None or not os.path.isfile(found):
            where = "" if "/" in name else f" on PATH ({path})"
            raise CommandNotFound(f"{name}: command not found{where} or not executable")
        return found

    def exec(self, executable: str, argv: Sequence[str], env: Mapping[str, str]) -> NoReturn:
        """Replace this process with `executable` (execve(2), no shell). The CPU affinity and
        memory policy set before are inherited. Only returns by raising CommandNotFound (the
        file vanished or is not executable after all) or another HostError."""
        self._require_live(f"command:{executable}")
        try:
            # No shell on purpose: argv reaches the program exactly as given.
            os.execve(executable, list(argv), dict(env))  # noqa: S606
        except OSError as err:
            if err.errno in (errno_mod.ENOENT, errno_mod.EACCES, errno_mod.ENOEXEC):
                raise CommandNotFound(f"{executable}: cannot execute: {err.strerror}") from err
            raise _translate(err, executable) from err

    def node_memory(self, length: int, node: int) -> AbstractContextManager[NodeMemory]:
        """Anonymous memory of `length` bytes whose pages are on NUMA node `node`, for the block.

        mmap(2) reserves it, mbind(2) binds the range to the node (MPOL_BIND, MPOL_MF_STRICT:
        allocations there come from `node` or fail), writing every page faults it in under that
        policy, and move_pages(2) in query mode reports where each page landed: the result says
        how many are really on `node` (a cpuset's mems can still refuse the node). The range is
        unmapped at the end of the block. Binding the range, not the thread, leaves the memory
        policy of everything else this process allocates (the CUDA driver's own buffers) alone.

        Raises PlacementUnavailable when the kernel refuses the node (EINVAL: offline, no
        memory, outside the cpuset), NotSupported on a recorded root, an unknown architecture
        or a kernel without NUMA, and a HostError for the rest (ENOMEM as ReadError)."""
        # contextlib at the first use, not at import: `topo` never loads it (host/root.py).
        import contextlib

        return contextlib.contextmanager(self._node_memory)(length, node)

    def _node_memory(self, length: int, node: int) -> Iterator[NodeMemory]:
        """node_memory()'s block, as a generator."""
        import ctypes
        import platform

        self._require_live("node_memory")
        machine = platform.machine()
        if machine not in _SYS_MBIND or machine not in _SYS_MOVE_PAGES:
            raise NotSupported("mbind", None, f"syscall number unknown for {machine}")
        if length <= 0 or node < 0:
            raise PlacementUnavailable(f"node_memory: bad length {length} or node {node}")
        import mmap  # the constants only: the mapping itself is made through libc

        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_long,
        ]
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        page = os.sysconf("SC_PAGE_SIZE")
        length = -(-length // page) * page
        addr = libc.mmap(
            None,
            length,
            mmap.PROT_READ | mmap.PROT_WRITE,
            mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS,
            -1,
            0,
        )
        if addr is None or addr == ctypes.c_void_p(-1).value:
            code = ctypes.get_errno()
            raise _translate(OSError(code, os.strerror(code)), "mmap")
        try:
            self._mbind(libc, addr, length, node, machine)
            # Fault every page in now, under the range's policy, before anything pins them.
            ctypes.memset(addr, 0x5A, length)
            pages, on_node = self.pages_on_node(addr, length, node)
            yield NodeMemory(addr, length, node, pages, on_node)
        finally:
            libc.munmap(addr, length)

    def pages_on_node(self, address: int, length: int, node: int) -> tuple[int, int]:
        """(pages in the range, pages the kernel reports on `node`), from move_pages(2) with no
        target nodes (query mode: each page's node, or a negative errno for a page not present).
        Raises NotSupported on a recorded root or an unknown architecture."""
        import ctypes
        import platform

        self._require_live("move_pages")
        machine = platform.machine()
        nr = _SYS_MOVE_PAGES.get(machine)
        if nr is None:
            raise NotSupported("move_pages", None, f"syscall number unknown for {machine}")
        page = os.sysconf("SC_PAGE_SIZE")
        count = length // page
        pages = (ctypes.c_void_p * count)(*(address + i * page for i in range(count)))
        status = (ctypes.c_int * count)()
        libc = ctypes.CDLL(None, use_errno=True)
        rc = libc.syscall(
            ctypes.c_long(nr),
            ctypes.c_int(0),  # this process
            ctypes.c_ulong(count),
            pages,
            None,  # no target nodes: report where each page is
            status,
            ctypes.c_int(0),
        )
        if rc < 0:
            code = ctypes.get_errno()
            raise _translate(OSError(code, os.strerror(code)), "move_pages")
        return count, sum(1 for s in status if s == node)

    @staticmethod
    def _mbind(libc: ctypes.CDLL, addr: int, length: int, node: int, machine: str) -> None:
        import ctypes

        bits = ctypes.sizeof(ctypes.c_ulong) * 8
        words = node // bits + 1
        mask = (ctypes.c_ulong * words)()
        mask[node // bits] |= 1 << (node % bits)
        rc = libc.syscall(
            ctypes.c_long(_SYS_MBIND[machine]),
            ctypes.c_void_p(addr),
            ctypes.c_ulong(length),
            ctypes.c_int(MPOL_MODES["bind"]),
            mask,
            # One more than the bits passed, as for set_mempolicy (mm/mempolicy.c get_nodes()).
            ctypes.c_ulong(words * bits + 1),
            ctypes.c_uint(_MPOL_MF_STRICT | _MPOL_MF_MOVE),
        )
        if rc != 0:
            raise _numa_error(
                "mbind",
                f"mbind node {node}: the kernel refused the node (not online, no memory, or"
                " outside this cpuset's memory nodes)",
            )

    # -- moving another process's memory -------------------------------------------------------

    def migrate_pages(self, pid: int, old_nodes: Iterable[int], new_nodes: Iterable[int]) -> int:
        """Move the pages of live process `pid` that are on `old_nodes` to `new_nodes`
        (migrate_pages(2); Linux 2.6.16+, CONFIG_MIGRATION). Returns the number of pages the
        kernel could not move (pinned, or shared and not ours to move without
        CAP_SYS_NICE). Pages already on `new_nodes` are not touched.

        Raises ProcessGone (ESRCH), AccessDenied (EPERM: another user's process without
        CAP_SYS_NICE), PlacementUnavailable (EINVAL: a node not online or outside the
        process's cpuset mems), NotSupported on a recorded root, an unknown architecture or a
        kernel without NUMA or migration (ENOSYS)."""
        import ctypes
        import platform

        self._require_live(f"pid:{pid}")
        machine = platform.machine()
        nr = _SYS_MIGRATE_PAGES.get(machine)
        if nr is None:
            raise NotSupported("migrate_pages", None, f"syscall number unknown for {machine}")
        old, new = sorted(frozenset(old_nodes)), sorted(frozenset(new_nodes))
        if not old or not new or min(old + new) < 0:
            raise PlacementUnavailable(f"migrate_pages: bad node lists {old} -> {new}")
        bits = ctypes.sizeof(ctypes.c_ulong) * 8
        words = max(old + new) // bits + 1
        masks = []
        for nodes in (old, new):
            mask = (ctypes.c_ulong * words)()
            for node in nodes:
                mask[node // bits] |= 1 << (node % bits)
            masks.append(mask)
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        # maxnode one more than the bits passed (mm/mempolicy.c get_nodes(), as set_mempolicy).
        rc = libc.syscall(
            ctypes.c_long(nr),
            ctypes.c_int(int(pid)),
            ctypes.c_ulong(words * bits + 1),
            masks[0],
            masks[1],
        )
        if rc < 0:
            code = ctypes.get_errno()
            if code == errno_mod.ESRCH:
                raise ProcessGone(f"pid:{pid}", code, "no such process")
            if code == errno_mod.EINVAL:
                raise PlacementUnavailable(
                    f"migrate_pages {format_list(old)} -> {format_list(new)}: "
                    "the kernel refused the nodes (not online, or outside the process's cpuset)"
                )
            if code == errno_mod.ENOSYS:
                raise NotSupported("migrate_pages", code, "kernel without NUMA page migration")
            raise _translate(OSError(code, os.strerror(code)), f"pid:{pid}")
        return int(rc)

    # -- PM QoS: the CPU latency request -------------------------------------------------------

    def _pm_qos_path(self) -> str:
        """/dev/cpu_dma_latency under the root. On a recorded root it must be a regular file
        (a test's stand-in): a device node there is never opened."""
        import stat as stat_mod

        fs = self.fs_path(_CPU_DMA_LATENCY)
        if not self.is_live:
            try:
                st = os.lstat(fs)
            except OSError as err:
                raise _translate(err, _CPU_DMA_LATENCY) from err
            if not stat_mod.S_ISREG(st.st_mode):
                raise NotSupported(_CPU_DMA_LATENCY, None, "not a regular file in this root")
        return fs

    def read_cpu_latency(self) -> int:
        """The CPU wake-up latency the kernel holds to now, in microseconds: the smallest of
        every open request (reading /dev/cpu_dma_latency returns the aggregate as a 32-bit
        int; kernel/power/qos.c cpu_latency_qos_read). 2000000000 means no request.
        Raises PathNotFound (no PM QoS), AccessDenied, ReadError."""
        import struct

        fs = self._pm_qos_path()
        try:
            fd = os.open(fs, os.O_RDONLY | os.O_CLOEXEC)
            try:
                data = os.read(fd, 4)
            finally:
                os.close(fd)
        except OSError as err:
            raise _translate(err, _CPU_DMA_LATENCY) from err
        if len(data) != 4:
            raise ReadError(_CPU_DMA_LATENCY, None, f"{len(data)} bytes, expected 4")
        return int(struct.unpack("=i", data)[0])

    def hold_cpu_latency(self, microseconds: int) -> int:
        """Ask the kernel to keep CPU wake-up latency at most `microseconds` for as long as the
        returned descriptor stays open: open /dev/cpu_dma_latency and write the value as a
        32-bit int (Documentation/power/pm_qos_interface.rst; tuned's cpu plugin does the same
        for `force_latency`). Closing the descriptor (os.close, or the process exiting)
        withdraws the request. Raises PathNotFound, AccessDenied (needs root), WriteError."""
        import struct

        if not 0 <= microseconds < 1 << 31:
            raise WriteError(_CPU_DMA_LATENCY, errno_mod.EINVAL, f"{microseconds} is not a latency")
        fs = self._pm_qos_path()
        try:
            fd = os.open(fs, os.O_WRONLY | os.O_CLOEXEC)
        except OSError as err:
            raise _translate(err, _CPU_DMA_LATENCY) from err
        try:
            written = os.write(fd, struct.pack("=i", microseconds))
        except OSError as err:
            os.close(fd)
            raise _translate(err, _CPU_DMA_LATENCY) from err
        if written != 4:
            os.close(fd)
            raise WriteError(_CPU_DMA_LATENCY, None, f"short write: {written} of 4 bytes")
        return fd


def _numa_error(call: str, refused: str) -> McpnodeError:
    """The error for a failed NUMA system call `call`, from errno: EINVAL is the kernel refusing
    the nodes (`refused` says which and why), ENOSYS a kernel built without NUMA."""
    import ctypes  # loaded already: only the callers of a system call come here

    code = ctypes.get_errno()
    if code == errno_mod.EINVAL:
        return PlacementUnavailable(refused)
    if code == errno_mod.ENOSYS:
        return NotSupported(call, code, "kernel built without NUMA")
    return _translate(OSError(code, os.strerror(code)), call)
