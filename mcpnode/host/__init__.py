"""Host: the only code in mcpnode that touches the machine.

Everything above names *logical* absolute paths (`/sys/devices/system/node`) and one `Host`
object maps them under its root: `/` for the live machine, a directory holding a snapshot or a
sysfs dump, or a tarball of one. Host is one class built from one file per concern, each
layer adding to the one before it:

    root.py      the root (directory or tarball), logical -> filesystem paths, symlinks
                 resolved inside the root, the one-pass cache, recording for snapshots
    read.py      bounded reads of regular files, listings, the trusted read
    write.py     in-place writes of existing files, atomic file replacement, removal, the lock
    record.py    what a snapshot recorded beyond files (command answers, effective uid)
    command.py   version/status commands and modprobe (live, or replayed)
    process.py   placement of live processes: affinity, memory policy, NUMA-placed memory,
                 exec
    kmsg.py      the kernel log (/dev/kmsg live, a recorded root's dev/kmsg file)
and beside them:
    roles.py     what a caller may do with a Host, as Protocols: HostReader (discovery and
                 the audit), HostWriter, HostProcess
    backend.py   the file operations resolution and reads go through: the OS's, or a tarball's
    tarball.py   a tarball root read in place: its in-memory index and the backend over it
    decompress.py  gzip/bzip2/xz, decompressed in bounded chunks (tarball.py, imported only
                 for a tarball root, like it)
    trust.py     who controls a file: root (or this euid) alone, sticky directories excepted
    translate.py OSError -> mcpnode's typed errors, in one place
    types.py     the values Host hands out

The read path imports no more than it uses: subprocess, shutil, ctypes, platform, tempfile and
the compressors are imported inside the calls that need them, and neither typing nor re is
imported at all (codec/typenames.py says why). The roles (roles.py: runtime-checkable Protocols,
so typing's) are imported at their first use as `mcpnode.host.HostReader`, which code on the
`topo` path does only under TYPE_CHECKING.
"""

from __future__ import annotations

from mcpnode.host.kmsg import (
    KMSG_MAX_BYTES,
    KMSG_PATH,
    HostKmsg,
    KmsgStream,
)
from mcpnode.host.process import MPOL_MODES
from mcpnode.host.read import (
    FILE_READ_LIMIT,
    PROCFS_READ_LIMIT,
    SYSFS_READ_LIMIT,
    read_limit,
)
from mcpnode.host.types import (
    CommandResult,
    Entry,
    FileStat,
    KmsgRead,
    KmsgScan,
    NodeMemory,
    Recording,
)
from mcpnode.host.write import FAULT_ENV, STOP_ENV

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (codec/typenames.py)
if TYPE_CHECKING:
    from mcpnode.host.roles import HostProcess, HostReader, HostWriter

__all__ = [
    "FAULT_ENV",
    "FILE_READ_LIMIT",
    "KMSG_MAX_BYTES",
    "KMSG_PATH",
    "MPOL_MODES",
    "PROCFS_READ_LIMIT",
    "STOP_ENV",
    "SYSFS_READ_LIMIT",
    "CommandResult",
    "Entry",
    "FileStat",
    "Host",
    "HostProcess",
    "HostReader",
    "HostWriter",
    "KmsgRead",
    "KmsgScan",
    "KmsgStream",
    "NodeMemory",
    "Recording",
    "read_limit",
]


class Host(HostKmsg):
    """A machine, live (`root="/"`) or recorded (a directory or tarball): the one object passed
    to everything that reads or changes the machine. See the module docstring for its parts."""


def __getattr__(name: str) -> object:
    """The roles, imported at their first use (module docstring; PEP 562)."""
    if name in ("HostProcess", "HostReader", "HostWriter"):
        from mcpnode.host import roles

        return getattr(roles, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
