"""Tarball roots: a snapshot or sysfs dump as `.tar.gz`/`.tgz`/`.tar.bz2`/`.tar.xz`/`.tar`, read
in place. Nothing is unpacked or written anywhere.

The archive is decompressed once, front to back, into an in-memory index: member path -> type,
mode, owner, mtime, and the content (regular files) or target (symlinks). gzip and bzip2 cannot
seek, so reading members lazily would mean decompressing again from the start for each; one
pass that keeps what a root can need is the cheapest. Reads are then answered from the index by
`ArchiveBackend`, which speaks the same small interface as the operating system's files
(host/backend.py), so Host resolves symlinks, checks types and trust, and reads with the very
code it uses for a directory root; only where the bytes come from differs.

The headers are parsed here rather than by `tarfile`, whose per-member Python overhead (tens of
microseconds: more than reading a dump's whole directory tree) would dominate: ustar, GNU (long
names and links, `L`/`K`, old sparse `S`) and POSIX pax (`x`, `g`), each field read by tarfile's
rules (octal or base-256 numbers, the checksum signed or unsigned, the ustar prefix, a V7
directory as a name ending in `/`, pax `path`/`linkpath`/`size`/`uid`/`gid`/`mtime`, which
types carry data blocks), and the compressed stream through the standard library's gzip, bz2
and lzma readers, as tarfile does.

What a member may do, and what happens when it tries (each is an adversarial test):
- names are relative: an absolute name, a `..` component, a name over PATH_MAX or deeper than
  MAX_DEPTH is refused (a note);
- a member below a symlinked directory is refused, and a hard link must name a regular file
  already in the archive: nothing can reach or copy what lies outside it;
- symlinks are kept as stored (absolute or `..` ones too): Host resolves them inside the root,
  with the root's top acting as `/`;
- FIFOs and device nodes are kept as entries of their type without content, so a read refuses
  them as it would in a directory root (NotRegularFile); nothing is ever opened or created;
- sparse members are refused (nothing mcpnode records is sparse), and so is a member larger
  than MAX_MEMBER_BYTES;
- past MAX_MEMBERS members, MAX_TOTAL_BYTES of content kept or MAX_STREAM_BYTES decompressed,
  the whole archive is refused with one error naming the archive and the cap;
- a corrupt or truncated archive (bad header, cut stream, CRC mismatch, data after the end
  marker) is refused: never a silently smaller tree.
Refused members are returned as notes `(member name, why)` (Host.unpack_notes): a snapshot with
one bad entry is still worth reading, and discovery reports each.

Imported only for tarball roots, so reading the live machine does not import the compressors.
"""

from __future__ import annotations

import errno as errno_mod
import os
import stat
import zlib

from mcpnode.codec.bounded import is_digits
from mcpnode.codec.lazyre import pattern
from mcpnode.errors import RootError
from mcpnode.host import decompress
from mcpnode.host.trust import _mode_problem, _pid_running, _untrusted_dirs
from mcpnode.host.types import Entry

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (codec/typenames.py)
if TYPE_CHECKING:
    from collections.abc import Callable

# Markers of a usable root: what a snapshot or a sysfs dump holds at its top.
_ROOT_MARKERS = ("sys", "proc", "mcpnode-snapshot.json")

# Bounds on what an archive may hold. A snapshot of the largest hosts seen (hwloc's dumps of
# 4-socket machines: ~40k entries, ~10 MB of tar) is far below each; a 40 KB .tar.gz holding a
# 1 TiB sparse member, millions of empty entries or gigabytes of zeros is not.
MAX_MEMBERS = 500_000
# Content kept in memory, all members together.
MAX_TOTAL_BYTES = 512 << 20
# What may be decompressed before the archive is refused: content, headers, padding, and the
# content of members refused one by one (which still has to be decompressed to get past).
MAX_STREAM_BYTES = 2 << 30
# No file mcpnode reads is larger than its biggest read cap (procfs tables, host/read.py).
MAX_MEMBER_BYTES = 64 << 20
# PATH_MAX is 4096 bytes; the deepest sysfs paths of real dumps are ~25 components.
MAX_NAME_BYTES = 4096
MAX_DEPTH = 128
# A pax header holds a few records for one member (path, linkpath, times, owner).
_MAX_EXTENDED_BYTES = 64 << 10

_BLOCK = 512
_ZERO_BLOCK = bytes(_BLOCK)

# Member types (POSIX ustar typeflag and GNU's), as tarfile names them.
_REGULAR, _OLD_REGULAR, _CONTIGUOUS = b"0\x007"
_LINK, _SYMLINK, _CHR, _BLK, _DIR, _FIFO = b"123456"
_LONG_NAME, _LONG_LINK, _SPARSE = b"LKS"
_PAX, _PAX_GLOBAL, _PAX_SOLARIS = b"xgX"
_REG_TYPES = frozenset((_REGULAR, _OLD_REGULAR, _CONTIGUOUS))
_EXTENDED = frozenset((_LONG_NAME, _LONG_LINK, _PAX, _PAX_GLOBAL, _PAX_SOLARIS))
_IFMT = {_CHR: stat.S_IFCHR, _BLK: stat.S_IFBLK, _DIR: stat.S_IFDIR, _FIFO: stat.S_IFIFO}
# tarfile.SUPPORTED_TYPES: a member of any other type is read as a file (its data skipped).
_KNOWN_TYPES = _REG_TYPES | _EXTENDED | {_LINK, _SYMLINK, _CHR, _BLK, _DIR, _FIFO, _SPARSE}

# One index entry: (file type, attributes, payload). The type is stat's S_IFREG, S_IFDIR...;
# the attributes are the header's number fields as stored (bytes 100-147: mode, uid, gid, size,
# mtime, already checked to be octal digits, read only when the entry is stat()ed), or
# (permissions, uid, gid, mtime) where they had to be worked out; the payload is a regular
# file's content (bytes), a symlink's target (str), a directory's names (a set, filled as
# members arrive), None for a FIFO or device node. A hard link is the same tuple under two
# paths, so both share content, owner and inode number (the tuple's id), as on a filesystem.
_Attrs = bytes | tuple[int, int, int, float]
_Payload = bytes | str | set[str] | None
_Node = tuple[int, _Attrs, _Payload]
_S_IFREG, _S_IFDIR, _S_IFLNK = stat.S_IFREG, stat.S_IFDIR, stat.S_IFLNK
# Names shorter than this (in characters) are within MAX_NAME_BYTES (4 bytes at most each) and
# MAX_DEPTH (128 components need 255 characters at least) without counting either.
_PLAIN_NAME_CHARS = min(MAX_NAME_BYTES // 4, 2 * MAX_DEPTH - 1)
# The number fields as GNU tar and tarfile write them (zero-padded octal, then NUL; the
# checksum: six digits, NUL, space), from byte 100 of a header to 156: bytes 100-155 with every
# octal digit translated to '0' equal _PLAIN_LAYOUT exactly when they are laid out so (one C
# translate and compare; a regular expression of the same costs ten times the instructions).
_OCTAL_AS_ZERO = bytes(0x30 if 0x30 <= b <= 0x37 else b for b in range(256))
_PLAIN_LAYOUT = b"0000000\0" * 3 + b"00000000000\0" * 2 + b"000000\0 "


def is_tarball(path: str) -> bool:
    name = os.path.basename(path)
    return name.endswith((".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".tar"))


def _member_ok(name: str) -> str | None:
    """Why a tar member name is refused, or None when it is safe to place under the root."""
    if name.startswith("/"):
        return "absolute member name"
    parts = name.split("/")
    if ".." in parts:
        return "member name contains '..'"
    if len(name.encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES:
        return f"member name longer than {MAX_NAME_BYTES} bytes"
    if len(parts) > MAX_DEPTH:
        return f"member path deeper than {MAX_DEPTH} directories"
    return None


def _relative(name: str) -> str | None:
    """A member name as a path below the archive's top (`a//b/./c/` -> `a/b/c`); None for the
    top itself (`.`, empty)."""
    parts = [p for p in name.split("/") if p and p != "."]
    return "/".join(parts) if parts else None


class _BadHeader(Exception):
    """A header block that is not a tar header."""


def _num(field: bytes) -> int:
    """A numeric header field: octal text up to the first NUL, or GNU's base-256 (first byte
    0x80, or 0xff for a negative number), as tarfile.nti reads it."""
    first = field[0]
    if first == 0x80 or first == 0xFF:
        n = int.from_bytes(field[1:], "big")
        return n - (1 << (8 * (len(field) - 1))) if first == 0xFF else n
    text = field.split(b"\0", 1)[0].strip()
    try:
        return int(text, 8) if text else 0
    except ValueError:
        raise _BadHeader("invalid number field") from None


def _text(field: bytes) -> str:
    end = field.find(0)
    return (field if end < 0 else field[:end]).decode("utf-8", "surrogateescape")


def _checksum_ok(buf: bytes) -> bool:
    """The header checksum: the sum of its bytes with the checksum field counted as spaces,
    unsigned (POSIX) or signed (some old tars), as tarfile accepts both. The unsigned sum of
    each 256-byte half is exactly adler32's low word minus one (at most 65280 < 65521: no
    modulo is ever taken), which is the sum done by a C loop instead of a Python one."""
    # tar(1) and tarfile write six digits, NUL, space.
    try:
        want = int(buf[148:154], 8) if buf[154] == 0 else _num(buf[148:156])
    except ValueError:
        want = _num(buf[148:156])
    halves = (zlib.adler32(buf[:256]) & 0xFFFF) + (zlib.adler32(buf[256:]) & 0xFFFF) - 2
    if want == halves - sum(buf[148:156]) + 256:
        return True
    signed = sum(b - 256 if b > 127 else b for b in buf) - sum(
        b - 256 if b > 127 else b for b in buf[148:156]
    )
    return want == signed + 256


class _Stream:
    """The decompressed tar stream, read forward in bounded chunks, counted against
    MAX_STREAM_BYTES.

    `buf[pos:]` is what has been decompressed and not yet consumed; `start` is the stream
    offset of `buf[0]`. The member loop reads `buf` in place (no call per block) and calls
    `fill` only when a block or a member's data runs past its end."""

    def __init__(
        self,
        next_chunk: Callable[[], bytes],
        tarball: str,
        errors: tuple[type[Exception], ...],
    ) -> None:
        self._next_chunk = next_chunk
        self._errors = errors
        self._tarball = tarball
        self.buf = b""
        self.pos = 0
        self.start = 0
        self.limit = MAX_STREAM_BYTES

    @property
    def offset(self) -> int:
        return self.start + self.pos

    def fill(self, need: int) -> bool:
        """Make `buf[pos:]` hold at least `need` bytes (pos becomes 0); False when the stream
        ends first (`buf` then holds what was left)."""
        self.start += self.pos
        # A chunk the buffer was used up before is kept as it came, not copied by the join:
        # the decompressors fill each chunk to CHUNK bytes, a multiple of the block, so in a
        # plain tar stream (many small members) this is most fills.
        parts = [self.buf[self.pos :]] if self.pos < len(self.buf) else []
        have = len(parts[0]) if parts else 0
        while have < need:
            chunk = self._next(self.start + have)
            if not chunk:
                break
            parts.append(chunk)
            have += len(chunk)
        self.buf = parts[0] if len(parts) == 1 else b"".join(parts)  # b"" when none came
        self.pos = 0
        return have >= need

    def read(self, n: int) -> bytes:
        """Exactly `n` bytes, or fewer when the stream ends first."""
        pos = self.pos
        if pos + n > len(self.buf):
            self.fill(n)
            pos = 0
        self.pos = min(pos + n, len(self.buf))
        return self.buf[pos : pos + n]

    def skip(self, n: int) -> bool:
        """Pass over `n` bytes without keeping them; False when the stream ends first."""
        left = len(self.buf) - self.pos
        if n <= left:
            self.pos += n
            return True
        n -= left
        self.start += len(self.buf)
        self.buf, self.pos = b"", 0
        while n > 0:
            chunk = self._next(self.start)
            if not chunk:
                return False
            if n < len(chunk):
                self.buf, self.pos = chunk, n
                return True
            self.start += len(chunk)
            n -= len(chunk)
        return True

    def rest_is_zeros(self) -> bool:
        """Read the stream to its end (which checks the compression trailer); True when every
        byte left is zero."""
        if self.buf.count(0, self.pos) != len(self.buf) - self.pos:
            return False
        at = self.start + len(self.buf)
        while chunk := self._next(at):
            if chunk.count(0) != len(chunk):
                return False
            at += len(chunk)
        return True

    def _next(self, at: int) -> bytes:
        """The next chunk of the stream, which begins at offset `at`; b"" at its end."""
        if at > self.limit:
            raise RootError(
                f"{self._tarball}: decompresses to more than {self.limit} bytes "
                "(MAX_STREAM_BYTES); refused"
            )
        try:
            return self._next_chunk()
        except self._errors as err:
            raise RootError(f"{self._tarball}: corrupt or truncated archive ({err})") from err


class Archive:
    """A tarball's members, indexed by filesystem path (`<archive path>/<member path>`), and
    the notes on those refused. Built by `load()`."""

    def __init__(self, path: str, base: str, st: os.stat_result) -> None:
        self.path = path
        self.base = base  # the archive's real path: the key of the archive's own top
        self.st = st  # the archive file as it was read
        self.notes: list[tuple[str, str]] = []
        self.members = 0
        self.kept = 0  # bytes of content held
        self._euid = os.geteuid()
        self._egid = os.getegid()
        self.nodes: dict[str, _Node] = {base: self._implicit_dir()}

    def _implicit_dir(self) -> _Node:
        """A directory the archive implies (a member's parent) but does not hold: what tar(1)
        would create, owned by the reader, 0755, with the archive's mtime."""
        return (stat.S_IFDIR, (0o755, self._euid, self._egid, self.st.st_mtime), set())

    def _parent(self, key: str, name: str) -> set[str] | None:
        """The names of the directory that holds `key`, created as needed; None (and a note)
        when a component on the way is a symlink or not a directory."""
        nodes = self.nodes
        here = self.base
        names = nodes[here][2]
        for comp in key[len(here) + 1 :].split("/")[:-1]:
            assert isinstance(names, set)
            here = here + "/" + comp
            node = nodes.get(here)
            if node is None:
                node = nodes[here] = self._implicit_dir()
                names.add(comp)
            elif isinstance(node[2], str):
                # Placing the member would mean following that link.
                self.notes.append((name, "parent directory is reached through a symlink"))
                return None
            elif not isinstance(node[2], set):
                self.notes.append((name, "cannot create parent directory: Not a directory"))
                return None
            names = node[2]
        assert isinstance(names, set)
        return names

    def add(self, name: str, rel: str, node: _Node) -> None:
        """Place `node` at member path `rel` (already checked), as extraction in archive order
        would: a later member replaces an earlier file or link; a directory is never replaced
        by anything but a directory, whose mode, owner and mtime it then takes."""
        key = self.base + "/" + rel
        parent_key, _, leaf = key.rpartition("/")
        parent = self.nodes.get(parent_key)
        names = parent[2] if parent is not None else None
        if not isinstance(names, set):
            names = self._parent(key, name)
            if names is None:
                return
        old = self.nodes.get(key)
        if old is not None:
            is_dir = isinstance(node[2], set)
            if isinstance(old[2], set):
                if not is_dir:
                    self.notes.append((name, "not extracted: a directory of that name exists"))
                else:
                    self.nodes[key] = (node[0], node[1], old[2])
                return
            if is_dir:
                self.notes.append((name, "not extracted: a file or symlink of that name exists"))
                return
        self.nodes[key] = node
        names.add(leaf)

    def hard_link(self, name: str, rel: str, linkname: str) -> None:
        """A hard link shares the node of a regular file already in the archive, named as a
        member is (relative to the archive's top); anything else is refused."""
        target = _relative(linkname) if _member_ok(linkname) is None else None
        node = None if target is None else self.nodes.get(self.base + "/" + target)
        if node is None or not isinstance(node[2], bytes):
            self.notes.append((name, "hard link to a file outside the archive"))
            return
        self.add(name, rel, node)

    def find_top(self) -> str:
        """The key of the folder that holds `sys/`, `proc/` or a snapshot manifest: the archive's
        top, or the one directory below it, up to 4 levels (hwloc's dumps hold one folder whose
        name need not match the tarball's). A symlink is never descended: an archive holding
        only `snap -> /` must not make the live machine the root of what the caller believes is
        a recorded one (and links are only ever resolved inside the root anyway)."""
        here = self.base
        for _ in range(4):
            names = self.nodes[here][2]
            assert isinstance(names, set)
            if any(m in names for m in _ROOT_MARKERS):
                return here
            dirs = [n for n in names if isinstance(self.nodes[here + "/" + n][2], set)]
            if len(dirs) != 1:
                break
            here = here + "/" + dirs[0]
        shown = here[len(self.base) :] or "/"
        raise RootError(
            f"{self.path}: no sys/, proc/ or mcpnode-snapshot.json found in the archive "
            f"(looked in {shown})"
        )


def load(tarball: str) -> Archive:
    """Read a tarball into an Archive index in one pass (module docstring). Raises RootError
    for an archive that is unreadable, corrupt, truncated or over a cap."""
    try:
        raw = open(tarball, "rb")  # noqa: SIM115 - closed by the `with raw` below
    except OSError as err:
        raise RootError(f"{tarball}: cannot open the archive ({err.strerror})") from err
    with raw:
        archive = Archive(tarball, os.path.realpath(tarball), os.fstat(raw.fileno()))
        source = decompress.open_source(raw)
        chunks = source.chunks
        _read_members(_Stream(lambda: next(chunks, b""), tarball, source.errors), archive)
    return archive


def _read_members(stream: _Stream, archive: Archive) -> None:
    """Index every member of the tar stream, then check that it ends as a tar archive must.

    The common member (a plain name in a directory already indexed, no pax header, number
    fields as tar writes them, data within the buffer) takes the straight path of this loop,
    which reads the stream's buffer in place; everything else goes through _member. This loop
    is what a tarball root costs (a few microseconds a member), hence the inlining: `buf`,
    `pos` and the bytes kept are locals, handed back to the stream and the archive only around
    the slow paths, and a GNU long name within the buffer is sliced from it in place. With
    _Stream.fill's uncopied chunks: 376 to 359 million instructions to load the 32em64t dump's
    .tar.gz (callgrind, whose counts do not vary from run to run as times do)."""
    tarball = archive.path
    nodes = archive.nodes
    base = archive.base
    nodes_get = nodes.get
    adler32 = zlib.adler32
    pax_global: dict[str, str] = {}
    # What the extended headers before a member say of it: GNU long name/link, pax records.
    long_name: str | None = None
    long_link: str | None = None
    pax: dict[str, str] | None = None
    first = True
    members = 0
    kept = archive.kept
    buf, pos = stream.buf, stream.pos
    while True:
        if len(buf) - pos < _BLOCK:
            stream.pos = pos
            if not stream.fill(_BLOCK):
                if first and not stream.buf:
                    raise RootError(f"{tarball}: not a readable tar archive (empty)")
                raise RootError(f"{tarball}: truncated tar archive (no end-of-archive marker)")
            buf, pos = stream.buf, 0
        head = buf[pos : pos + _BLOCK]
        if head == _ZERO_BLOCK:
            if long_name is not None or long_link is not None or pax is not None:
                raise RootError(f"{tarball}: corrupt tar archive (an extended header ends it)")
            # The end-of-archive marker. Reading on to EOF checks the compression trailer
            # (tarfile never does: a damaged snapshot would read as a smaller tree), and
            # anything but zeros after the marker is a second archive or damage.
            stream.pos = pos
            if not stream.rest_is_zeros():
                raise RootError(f"{tarball}: corrupt tar archive (data after the end marker)")
            archive.members = members
            archive.kept = kept
            return
        try:
            plain = head[100:156].translate(_OCTAL_AS_ZERO) == _PLAIN_LAYOUT
            if plain:
                size = int(head[124:135], 8)
                # The checksum (_checksum_ok, inlined): the unsigned byte sum with the field
                # counted as spaces. An ASCII header sums to at most 512 * 127 = 65024 < 65521,
                # so adler32's low word over the whole block is that sum plus one, with no
                # modulo taken, and signed and unsigned sums are equal: one C call. Any other
                # header (UTF-8 names), or a mismatch, is summed by _checksum_ok's rules.
                ok = (
                    head.isascii()
                    and int(head[148:154], 8) == (adler32(head) & 0xFFFF) + 255 - sum(head[148:156])
                ) or _checksum_ok(head)
            else:
                ok = _checksum_ok(head)
                size = _num(head[124:136])
                for at in (100, 108, 116, 136):  # read as tarfile would, or refused
                    _num(head[at : at + 8 if at < 124 else at + 12])
            if not ok:
                raise _BadHeader("bad checksum")
            if size < 0:
                raise _BadHeader("negative size")
        except _BadHeader as err:
            if first:
                raise RootError(f"{tarball}: not a readable tar archive ({err})") from None
            raise RootError(
                f"{tarball}: corrupt tar archive (bad header at byte {stream.start + pos})"
            ) from None
        first = False
        pos += _BLOCK
        kind = head[156]
        if kind in _EXTENDED:
            if size > _MAX_EXTENDED_BYTES:
                raise RootError(f"{tarball}: corrupt tar archive (extended header of {size} bytes)")
            padded = size + (-size % _BLOCK)
            if pos + padded <= len(buf):  # within the buffer (GNU's long names: nearly always)
                data = buf[pos : pos + size]
                pos += padded
            else:
                stream.pos = pos
                data = stream.read(size)
                if len(data) < size or not stream.skip(-size % _BLOCK):
                    raise RootError(f"{tarball}: truncated tar archive")
                buf, pos = stream.buf, stream.pos
            # Two of a kind before one member: the first wins, as in tarfile (which applies the
            # outer header after the inner one).
            if kind == _LONG_NAME:
                long_name = _text(data) if long_name is None else long_name
            elif kind == _LONG_LINK:
                long_link = _text(data) if long_link is None else long_link
            elif kind == _PAX_GLOBAL:
                pax_global.update(_pax_records(data, tarball))
            else:
                pax = {**_pax_records(data, tarball), **(pax or {})}
            continue
        members += 1
        if members > MAX_MEMBERS:
            raise RootError(f"{tarball}: more than {MAX_MEMBERS} members (MAX_MEMBERS); refused")
        if plain and pax is None and long_link is None and not pax_global:
            if long_name is not None:
                name = long_name
            elif not head[345]:  # no ustar prefix
                end = head.find(0, 0, 100)
                name = head[: end if end >= 0 else 100].decode("utf-8", "surrogateescape")
            else:
                name = ""
            if kind == _DIR and name.endswith("/"):
                name = name[:-1]  # how tar(1) names a directory
            key = base + "/" + name
            parent_key, _, leaf = key.rpartition("/")
            parent = nodes_get(parent_key)
            # Only the leaf needs testing here: keys are normal paths already checked, so a
            # parent found as a key means the name's directory part is relative, normal, free
            # of `..` components and within the caps (a name like `/x`, `a//b`, `./a` or
            # `a/../b` finds no parent key and takes _member's path, which refuses or
            # normalises it); `.`, `..` and `.hidden` leaves take that path too, as does a name
            # long enough to be near MAX_NAME_BYTES or MAX_DEPTH. Both paths index a name they
            # both take identically.
            if (
                parent is not None
                and leaf
                and leaf[0] != "."
                and len(name) < _PLAIN_NAME_CHARS
                and key not in nodes
            ):
                names = parent[2]
                if isinstance(names, set):
                    # A new entry in a directory already indexed: the common case, in full.
                    if kind in _REG_TYPES:
                        padded = size + (-size % _BLOCK)
                        if size <= MAX_MEMBER_BYTES and pos + padded <= len(buf):
                            kept += size
                            if kept > MAX_TOTAL_BYTES:
                                raise _over_total(tarball)
                            nodes[key] = (_S_IFREG, head[100:148], buf[pos : pos + size])
                            names.add(leaf)
                            pos += padded
                            long_name = None
                            continue
                    elif kind == _DIR:
                        nodes[key] = (_S_IFDIR, head[100:148], set())
                        names.add(leaf)
                        long_name = None
                        continue
                    elif kind == _SYMLINK:
                        nodes[key] = (_S_IFLNK, head[100:148], _text(head[157:257]))
                        names.add(leaf)
                        long_name = None
                        continue
        info = {**pax_global, **pax} if pax else pax_global
        stream.pos = pos
        archive.kept = kept
        _member(stream, archive, head, kind, size, long_name, long_link, info)
        buf, pos, kept = stream.buf, stream.pos, archive.kept
        long_name = long_link = pax = None


def _over_total(tarball: str) -> RootError:
    return RootError(
        f"{tarball}: holds more than {MAX_TOTAL_BYTES} bytes of content (MAX_TOTAL_BYTES, the "
        "most a tarball root keeps in memory); refused"
    )


# codec/lazyre.py: compiled at the first pax header, so a tarball without one (GNU tar's default
# format) never imports re.
_PAX_RECORD = rb"(\d+) ([^=]+)="


def _pax_records(data: bytes, tarball: str) -> dict[str, str]:
    """`LENGTH KEY=VALUE\\n` records of a pax extended header (POSIX.1-2008, pax)."""
    out: dict[str, str] = {}
    pos = 0
    record = pattern(_PAX_RECORD)
    while (m := record.match(data, pos)) is not None:
        length = int(m.group(1))
        if length <= 0:
            raise RootError(f"{tarball}: corrupt tar archive (bad pax record)")
        value = data[m.end(2) + 1 : m.start(1) + length - 1]
        key = m.group(2).decode("utf-8", "surrogateescape")
        out[key] = value.decode("utf-8", "surrogateescape")
        pos += length
    return out


def _member(
    stream: _Stream,
    archive: Archive,
    buf: bytes,
    kind: int,
    size: int,
    long_name: str | None,
    long_link: str | None,
    pax: dict[str, str],
) -> None:
    """Index one member whose header is `buf` (checked; its data, if any, follows in
    `stream`): every case the straight path of _read_members leaves, by the same rules."""
    tarball = archive.path
    mode = _num(buf[100:108]) & 0o7777
    uid, gid = _num(buf[108:116]), _num(buf[116:124])
    mtime: float = _num(buf[136:148])
    if long_name is not None:
        name = long_name
    else:
        name = _text(buf[0:100])
        if kind == _OLD_REGULAR and name.endswith("/"):
            kind = _DIR  # V7: a directory is a regular file whose name ends in '/'
        # The ustar prefix (POSIX: the name is prefix/name), applied as tarfile applies it.
        if buf[345] and kind != _SPARSE:
            name = _text(buf[345:500]) + "/" + name
    linkname = long_link if long_link is not None else _text(buf[157:257])
    sparse = kind == _SPARSE
    if pax:
        name = pax.get("GNU.sparse.name", pax.get("path", name))
        linkname = pax.get("linkpath", linkname)
        sparse = sparse or any(k.startswith("GNU.sparse.") for k in pax)
        import contextlib  # pax headers only, as re (_PAX_RECORD)

        with contextlib.suppress(ValueError):  # as tarfile: an unreadable number is ignored
            uid = int(pax["uid"]) if "uid" in pax else uid
        with contextlib.suppress(ValueError):
            gid = int(pax["gid"]) if "gid" in pax else gid
        with contextlib.suppress(ValueError):
            mtime = float(pax["mtime"]) if "mtime" in pax else mtime
        if "size" in pax:
            try:
                size = int(pax["size"])
            except ValueError:
                size = 0
            if size < 0:
                raise RootError(f"{tarball}: corrupt tar archive (negative pax size)")
    if kind == _SPARSE:
        # Old GNU sparse headers may be followed by extension blocks listing more regions
        # (byte 482 of the header, then byte 504 of each extension, says another follows).
        extended = buf[482]
        while extended:
            ext = stream.read(_BLOCK)
            if len(ext) < _BLOCK:
                raise RootError(f"{tarball}: truncated tar archive")
            extended = ext[504]
    # Which members have data blocks, by tarfile's rule: regular and sparse files, and any
    # type it does not know. Other types' size fields are not read.
    regular = kind in _REG_TYPES
    has_data = regular or sparse or kind not in _KNOWN_TYPES
    if kind == _DIR:
        name = name.rstrip("/")
    path = name
    while path.startswith("./"):
        path = path[2:]
    why = _member_ok(path)
    rel = _relative(path) if why is None else None
    if why is None and rel is not None:
        if sparse:
            # Sparse members (GNU/PAX sparse maps) expand to their full size when written;
            # nothing mcpnode records is sparse, so they are refused rather than filled in.
            why = "sparse member skipped"
        elif regular and size > MAX_MEMBER_BYTES:
            why = f"member larger than {MAX_MEMBER_BYTES} bytes skipped"
        elif kind not in _KNOWN_TYPES:
            why = f"unsupported member type {chr(kind)!r} skipped"
    if why is not None:
        archive.notes.append((name, why))
    if regular and rel is not None and why is None:
        archive.kept += size
        if archive.kept > MAX_TOTAL_BYTES:
            raise _over_total(tarball)
        data = stream.read(size)
        if len(data) < size or not stream.skip(-size % _BLOCK):
            raise RootError(f"{tarball}: truncated tar archive")
        archive.add(name, rel, (stat.S_IFREG, (mode, uid, gid, mtime), data))
        return
    if has_data and not stream.skip(size + -size % _BLOCK):
        raise RootError(f"{tarball}: truncated tar archive")
    if why is not None or rel is None:
        return  # refused (noted), or the top itself (`./`)
    attrs = (mode, uid, gid, mtime)
    if kind == _LINK:
        archive.hard_link(name, rel, linkname)
    elif kind == _SYMLINK:
        archive.add(name, rel, (stat.S_IFLNK, attrs, linkname))
    elif kind == _DIR:
        archive.add(name, rel, (stat.S_IFDIR, attrs, set()))
    else:
        archive.add(name, rel, (_IFMT[kind], attrs, None))


def _stat(node: _Node, dev: int) -> os.stat_result:
    """What lstat(2) would say of the entry unpacked: its size (a symlink's: its target's
    length), the member's mode, owner and mtime, the node's identity as the inode number."""
    fmt, attrs, payload = node
    if isinstance(attrs, bytes):  # digits checked when indexed (_PLAIN_LAYOUT)
        perm, uid, gid = int(attrs[0:7], 8) & 0o7777, int(attrs[8:15], 8), int(attrs[16:23], 8)
        mtime: float = int(attrs[36:47], 8)
    else:
        perm, uid, gid, mtime = attrs
    if isinstance(payload, bytes):
        size = len(payload)
    elif isinstance(payload, str):
        size = len(payload.encode("utf-8", "surrogateescape"))
    else:
        size = 0
    ns = int(mtime * 1_000_000_000)
    t = float(mtime)
    fields = (fmt | perm, id(node), dev, 1, uid, gid, size, 0, 0, 0)
    return os.stat_result((*fields, t, t, t, ns, ns, ns))


def _error(code: int, path: str | None = None) -> OSError:
    """The OSError (its subclass for the errno, as the os functions raise) for `code`."""
    if path is None:
        return OSError(code, os.strerror(code))
    return OSError(code, os.strerror(code), path)


class ArchiveBackend:
    """Host's file operations (host/backend.py) answered from an Archive, read-only.

    Paths are `<archive path>/<member path>`; the kernel's errnos are raised where it would
    raise them: ENOENT (absent), ENOTDIR (a component is not a directory), EINVAL (readlink of
    a non-link), ELOOP (open of a symlink: nothing is followed here, Host resolves links
    first), EISDIR (read of a directory), EROFS (open for writing), EBADF. File descriptors
    are this object's own numbers, never the process's."""

    def __init__(self, archive: Archive, top: str) -> None:
        self.archive = archive
        self.top = top
        self._nodes = archive.nodes
        # Inode numbers are the nodes' own; the device is the archive file's, so no entry's
        # identity can equal a real file's on another device.
        self._dev = archive.st.st_dev
        self._open_nodes: dict[int, _Node] = {}  # fd -> what it reads
        self._positions: dict[int, int] = {}  # fd -> where read() goes on
        self._next_fd = 3

    def close_all(self) -> None:
        """Forget the index (Host.close): every later call answers ENOENT."""
        self._nodes = self.archive.nodes = {}
        self._open_nodes.clear()
        self._positions.clear()

    def _missing(self, path: str) -> OSError:
        """ENOENT, or ENOTDIR when a component on the way exists and is not a directory."""
        here = path
        while len(here) > len(self.archive.base):
            here = here.rpartition("/")[0]
            node = self._nodes.get(here)
            if node is not None:
                if not isinstance(node[2], set):
                    return _error(errno_mod.ENOTDIR, path)
                break
        return _error(errno_mod.ENOENT, path)

    def _node(self, path: str) -> _Node:
        node = self._nodes.get(path)
        if node is None:
            clean = path.rstrip("/")
            node = self._nodes.get(clean) if clean != path else None
            if node is None:
                raise self._missing(clean)
        return node

    def lstat(self, path: str, /) -> os.stat_result:
        return _stat(self._node(path), self._dev)

    def content(self, path: str, /) -> tuple[int, bytes | None]:
        """The entry's file type (its S_IFMT bits) and, for a regular file, its content: what
        lstat() and then a whole read() of the entry unpacked would give, in one lookup
        (Host.read_bytes). Raises as lstat() does."""
        fmt, _, payload = self._node(path)
        return fmt, payload if isinstance(payload, bytes) else None

    def readlink(self, path: str, /) -> str:
        target = self._node(path)[2]
        if not isinstance(target, str):
            raise _error(errno_mod.EINVAL, path)
        return target

    def open(self, path: str, flags: int, /) -> int:
        node = self._node(path)
        if isinstance(node[2], str):
            raise _error(errno_mod.ELOOP, path)
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC):
            raise _error(errno_mod.EROFS, path)
        fd = self._next_fd
        self._next_fd += 1
        self._open_nodes[fd] = node
        self._positions[fd] = 0
        return fd

    def _open_node(self, fd: int) -> _Node:
        node = self._open_nodes.get(fd)
        if node is None:
            raise _error(errno_mod.EBADF)
        return node

    def fstat(self, fd: int, /) -> os.stat_result:
        return _stat(self._open_node(fd), self._dev)

    def pread(self, fd: int, n: int, offset: int, /) -> bytes:
        payload = self._open_node(fd)[2]
        if isinstance(payload, set):
            raise _error(errno_mod.EISDIR)
        return payload[offset : offset + n] if isinstance(payload, bytes) else b""

    def read(self, fd: int, n: int, /) -> bytes:
        pos = self._positions.get(fd, 0)
        chunk = self.pread(fd, n, pos)
        self._positions[fd] = pos + len(chunk)
        return chunk

    def close(self, fd: int, /) -> None:
        if self._open_nodes.pop(fd, None) is None:
            raise _error(errno_mod.EBADF)
        del self._positions[fd]

    def _names(self, path: str) -> set[str]:
        names = self._node(path)[2]
        if not isinstance(names, set):
            raise _error(errno_mod.ENOTDIR, path)
        return names

    def listdir(self, path: str, /) -> list[str]:
        return list(self._names(path))

    def scandir(self, path: str, /) -> list[Entry]:
        names = self._names(path)
        base = path.rstrip("/")
        nodes = self._nodes
        out = []
        for name in names:
            payload = nodes[base + "/" + name][2]
            out.append(Entry(name, isinstance(payload, set), isinstance(payload, str)))
        return out

    def isdir(self, path: str, /) -> bool:
        node = self._nodes.get(path) or self._nodes.get(path.rstrip("/"))
        return node is not None and isinstance(node[2], set)

    def untrusted_dirs(self, directory: str, /) -> str | None:
        """trust.py's rule, from the members' owners and modes: every directory from
        `directory` up to the archive's own top, then the archive file (whoever can rewrite it
        controls every member), then the directories holding it, up to `/`."""
        base = self.archive.base
        here = directory.rstrip("/") or base
        while len(here) >= len(base):
            node = self._nodes.get(here)
            if node is None:
                return f"directory {here} cannot be checked: {os.strerror(errno_mod.ENOENT)}"
            problem = _mode_problem(_stat(node, self._dev), "directory", here)
            if problem is not None:
                return problem
            here = here.rpartition("/")[0]
        problem = _mode_problem(self.archive.st, "archive", base)
        if problem is not None:
            return problem
        return _untrusted_dirs(os.path.dirname(base) or "/")


def open_root(tarball: str) -> tuple[ArchiveBackend, list[tuple[str, str]]]:
    """An ArchiveBackend serving `tarball` from its top (the folder holding sys/, proc/ or the
    snapshot manifest), and the notes on refused members. Raises RootError."""
    _remove_stale_unpacks()
    archive = load(tarball)
    return ArchiveBackend(archive, archive.find_top()), archive.notes


# Copies unpacked into the temporary directory by mcpnode versions that unpacked tarball roots
# (`mcpnode-root-PID-*`) stay behind when their process was SIGKILLed. Nothing creates them any
# more; opening a tarball still removes those whose process is gone, so an upgrade does not
# leave them for good. It costs one listing of the temporary directory: tempfile and shutil
# (5 ms of imports, more than a small root's whole read) are imported only when there is a
# copy to remove.
_UNPACK_PREFIX = "mcpnode-root-"


def _unpack_pid(entry: str) -> int | None:
    """The pid in an unpacked copy's name (`mcpnode-root-PID-...`, PID 1 to 10 ASCII digits),
    or None for any other name. String tests: re is not imported to open a tarball."""
    if not entry.startswith(_UNPACK_PREFIX):
        return None
    pid, dash, _rest = entry[len(_UNPACK_PREFIX) :].partition("-")
    if not dash or not is_digits(pid, most=10):
        return None
    return int(pid)


def _temp_dir() -> str:
    """tempfile.gettempdir()'s answer without importing tempfile unless it is already: its
    `tempdir` when set, else the first of TMPDIR, TEMP, TMP, /tmp, /var/tmp, /usr/tmp that is
    a directory (its candidate order)."""
    import sys

    loaded = sys.modules.get("tempfile")
    if loaded is not None:
        return str(loaded.gettempdir())
    for name in ("TMPDIR", "TEMP", "TMP"):
        value = os.environ.get(name)
        if value and os.path.isdir(value):
            return value
    for path in ("/tmp", "/var/tmp", "/usr/tmp"):  # noqa: S108 - only listed, never written
        if os.path.isdir(path):
            return path
    return os.getcwd()


def _remove_stale_unpacks() -> None:
    base = _temp_dir()
    try:
        entries = os.listdir(base)
    except OSError:
        return
    for entry in entries:
        pid = _unpack_pid(entry)
        if pid is None or _pid_running(pid):
            continue
        path = os.path.join(base, entry)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        # Only our own: a directory (not a link to one) owned by this uid.
        if stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid():
            import shutil

            shutil.rmtree(path, ignore_errors=True)
