"""The values Host hands out: directory entries, file identities, command answers, what a
recording saw, NUMA-placed memory, what a kernel log read gave. Data only: no I/O.

NamedTuples and a plain class rather than dataclasses: every mcpnode command imports these,
and importing dataclasses (with the inspect, ast and tokenize modules it pulls in) costs more
than reading a small host. The NamedTuple is codec/typenames.py's: typing's to the type checker,
and at run time the class collections.namedtuple makes, built without importing typing or
collections into every command. The annotations are plain builtins, valid at run time on every
Python mcpnode supports (3.10+: `X | None`).
"""

from mcpnode.codec.typenames import NamedTuple


class Recording:
    """What a Host was asked for while recording: exactly what a snapshot must hold.

    Paths are logical real paths (symlinks resolved inside the root). `files` keeps the bytes
    as they were read, so a snapshot holds the same content the topology was computed from.
    """

    __slots__ = ("commands", "dirs", "files", "links")

    def __init__(
        self,
        files: dict[str, bytes],
        links: dict[str, str],  # symlink path -> target as stored
        dirs: set[str],
        commands: dict[str, dict[str, object]] | None = None,  # argv joined by " "
    ) -> None:
        self.files = files
        self.links = links
        self.dirs = dirs
        self.commands: dict[str, dict[str, object]] = {} if commands is None else commands


class CommandResult(NamedTuple):
    """A version command's answer. `found` is False when the program is not installed (or, on a
    recorded root, when the snapshot holds no answer: `reason` says which)."""

    argv: tuple[str, ...]
    found: bool
    returncode: int | None
    stdout: str
    stderr: str
    reason: str | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "found": self.found,
            "returncode": self.returncode,
            "stdout": self.stdout,
            "stderr": self.stderr,
            "reason": self.reason,
        }


class FileStat(NamedTuple):
    """What lstat(2) says of one path, for state kept across runs (the persisted file's mode and
    owner to restore; whether the journal changed since it was last read)."""

    mode: int
    uid: int
    gid: int
    size: int
    mtime_ns: int
    ino: int
    dev: int


class Entry(NamedTuple):
    """One directory entry as listed, without following symlinks. A NamedTuple rather than a
    dataclass: discovery lists thousands of these (SR-IOV hosts), and tuples sort by name."""

    name: str
    is_dir: bool  # a real directory (never a symlink to one)
    is_symlink: bool


class NodeMemory(NamedTuple):
    """Memory from Host.node_memory: `pages_on_node` of `pages` pages are on `node`."""

    address: int
    length: int
    node: int
    pages: int
    pages_on_node: int


class KmsgRead(NamedTuple):
    """Kernel log records, oldest first, each `PRIORITY,SEQ,USEC,FLAGS;MESSAGE` with its
    continuation lines after a newline. `truncated`: older records were dropped to stay in
    bounds; `overwritten`: how many times the kernel reported records lost (EPIPE)."""

    records: tuple[str, ...]
    truncated: bool = False
    overwritten: int = 0
    # Records dropped or cut: a head whose numbers are past their digits (kmsg.py's
    # _HEAD_IN_BOUNDS), or a record that continues past the kernel's own bound on one record
    # (_KMSG_RECORD_MAX).
    skipped: int = 0
    # read_new() stopped at its `batch_bytes` with more waiting: call it again (after letting
    # the loop's other sources run).
    more: bool = False


class KmsgScan(NamedTuple):
    """What Host.scan_kmsg read: how many records (before parsing), whether older ones were
    dropped to stay in bounds (`truncated`), the kernel's overwrites while reading, the records
    skipped (as KmsgRead's), and whether it stopped at its bound with records left (`unread`)."""

    records: int
    truncated: bool = False
    overwritten: int = 0
    skipped: int = 0
    unread: bool = False


def _opt_int(v: object) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None
