"""The kernel log (`/dev/kmsg`) through Host: what the XID/SXID health checks read.

Live root: the character device, read non-blocking one record per read(2) until EAGAIN (so the
agent can also wait on it in its selectors loop). Other roots: a regular file `dev/kmsg`
holding records in kmsg format (what `mcpnode snapshot` records), read through the root's file
operations (a directory's, or a tarball's in-memory index: host/backend.py), refused when it is
anything else, so a FIFO planted there cannot hang the read. Bounded in records and bytes.
"""

from __future__ import annotations

import errno as errno_mod
import os
import stat

from mcpnode.codec.bounded import BoundError, parse_decimal
from mcpnode.codec.lazyre import pattern
from mcpnode.errors import HostError, ReadError
from mcpnode.host.backend import OS, Backend
from mcpnode.host.process import HostProcesses
from mcpnode.host.read import _READ_CHUNK
from mcpnode.host.translate import _translate
from mcpnode.host.types import KmsgRead, KmsgScan

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (codec/typenames.py)
if TYPE_CHECKING:
    from collections.abc import Callable


class HostKmsg(HostProcesses):
    """The kernel log."""

    def read_kmsg(self, max_bytes: int | None = None, max_records: int | None = None) -> KmsgRead:
        """Every record the kernel log buffer holds now, oldest first, in /dev/kmsg's format
        (`PRIORITY,SEQ,USEC,FLAGS;MESSAGE`, then ` KEY=VALUE` continuation lines;
        Documentation/ABI/testing/dev-kmsg). At most the newest `max_records` records and
        `max_bytes` bytes are kept (default KMSG_MAX_RECORDS, KMSG_MAX_BYTES; `truncated` says
        when older ones were dropped).

        Live root: `/dev/kmsg` opened O_RDONLY|O_NONBLOCK, one record per read(2) until EAGAIN
        (the end of the buffer); EPIPE (records overwritten while reading) is counted in
        `overwritten` and reading goes on. Other roots: the regular file `dev/kmsg` of the
        root, one record per line (a snapshot writes it so); anything but a regular file is
        refused, so a FIFO planted there cannot hang the read.

        Raises PathNotFound (no kmsg: CONFIG_PRINTK off, or not in this root), AccessDenied
        (EPERM/EACCES: kernel.dmesg_restrict without CAP_SYSLOG), ReadError. While recording,
        the records read are kept as the file /dev/kmsg of the snapshot."""
        stream = self.open_kmsg()
        try:
            got = stream.read_new(max_bytes, max_records, final=True)
        finally:
            stream.close()
        if self._recording is not None:
            self._recording.files[KMSG_PATH] = "".join(r + "\n" for r in got.records).encode()
        return got

    def scan_kmsg(
        self,
        on_records: Callable[[tuple[str, ...]], None],
        max_bytes: int | None = None,
        batch_bytes: int | None = None,
    ) -> KmsgScan:
        """Every record the kernel log holds now, as read_kmsg reads them, handed to
        `on_records` a batch (`batch_bytes`, default KMSG_SCAN_BATCH_BYTES) at a time and not
        kept: what a reader that counts needs, in the memory of one batch however long the log.
        The newest `max_bytes` (default KMSG_MAX_BYTES) of a root's file are read
        (`truncated`: older ones were not); reading stops after about `max_bytes` even when
        records keep coming (`unread`: records were left, as on a live log a flood outpaces).
        No bound on records: none is kept.

        `on_records` runs between two reads, so a caller on an event loop can do there what
        must not wait for the whole log (the agent's watchdog ping). Raises as read_kmsg, and
        whatever `on_records` raises. While recording, the records read are kept as the file
        /dev/kmsg of the snapshot, as read_kmsg keeps them."""
        max_bytes = KMSG_MAX_BYTES if max_bytes is None else max_bytes
        batch_bytes = KMSG_SCAN_BATCH_BYTES if batch_bytes is None else max(1, batch_bytes)
        recorded: list[str] | None = [] if self._recording is not None else None
        truncated = False
        overwritten = skipped = count = 0
        more = True
        stream = self.open_kmsg()
        try:
            for _ in range(max_bytes // batch_bytes + 1):
                # No record bound per batch: a batch is far below it, and nothing is kept.
                got = stream.read_new(
                    max_bytes, _BATCH_RECORDS_UNBOUNDED, final=True, batch_bytes=batch_bytes
                )
                truncated |= got.truncated
                overwritten += got.overwritten
                skipped += got.skipped
                count += len(got.records)
                if recorded is not None:
                    recorded.extend(got.records)
                on_records(got.records)
                more = got.more
                if not more:
                    break
        finally:
            stream.close()
        if self._recording is not None and recorded is not None:
            self._recording.files[KMSG_PATH] = "".join(r + "\n" for r in recorded).encode()
        return KmsgScan(count, truncated, overwritten, skipped, more)

    def open_kmsg(self) -> KmsgStream:
        """The kernel log as a stream for a watcher, positioned at the oldest record.

        Live root: `/dev/kmsg` non-blocking; `fileno()` can wait in a selector (readable when a
        record arrives) and `read_new()` drains what arrived. Other roots: the regular file
        `dev/kmsg`, read from where the last `read_new()` stopped; a regular file is always
        readable, so `fileno()` is None there and the caller polls. Raises as read_kmsg."""
        if self.is_live:
            try:
                fd = os.open(KMSG_PATH, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            except OSError as err:
                raise _translate(err, KMSG_PATH) from err
            return KmsgStream(fd, None, KMSG_PATH)
        io = self._io
        try:
            fs = self._real_fs(KMSG_PATH)
            fd = io.open(fs, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW)
        except HostError:
            raise
        except OSError as err:
            raise _translate(err, KMSG_PATH) from err
        try:
            if not stat.S_ISREG(io.fstat(fd).st_mode):
                raise ReadError(KMSG_PATH, None, "not a regular file (a snapshot's kmsg is one)")
        except BaseException:
            io.close(fd)
            raise
        return KmsgStream(None, fd, KMSG_PATH, io)


# -- the kernel log --------------------------------------------------------------------------

KMSG_PATH = "/dev/kmsg"
# The kernel's own bound on one /dev/kmsg record (CONSOLE_EXT_LOG_MAX, kernel/printk): a
# read(2) with a smaller buffer fails with EINVAL.
_KMSG_RECORD_MAX = 8192
# What a read of the log keeps: the kernel buffer is 128 KiB to a few MiB (CONFIG_LOG_BUF_SHIFT,
# log_buf_len=), so these hold all of it on every real host; they bound a hostile root.
KMSG_MAX_BYTES = 16 << 20
KMSG_MAX_RECORDS = 200_000
# How much one drain reads before stopping even if records keep coming (a flood racing us).
_KMSG_DRAIN_BYTES = 64 << 20
# What Host.scan_kmsg reads at a time: about a thousand records, a few ms of parsing, and the
# memory a scan of the whole log holds at once.
KMSG_SCAN_BATCH_BYTES = 128 << 10
# A batch's record bound in a scan: none below the batch's bytes (a record is at least a byte).
_BATCH_RECORDS_UNBOUNDED = 1 << 62
# The numbers of a record's head: the priority is an int (syslog facility << 3 | level), the
# sequence number and the time since boot are u64 (kernel/printk/printk.c, info_print_ext_header
# prints them with %llu): 20 digits. A longer one is not the kernel's, and Python's int() would
# refuse it past 4,300 digits with a ValueError of its own.
_PRIORITY_DIGITS = 10
_U64_DIGITS = 20
# A record's head, and one whose numbers are in those bounds (codec/lazyre.py: compiled at the
# first kernel log read, so the commands that never read the log never import re).
_HEAD = r"(?a)([0-9]+),([0-9]+),([0-9]+),"
_HEAD_IN_BOUNDS = (
    rf"(?a)[0-9]{{1,{_PRIORITY_DIGITS}}},[0-9]{{1,{_U64_DIGITS}}},[0-9]{{1,{_U64_DIGITS}}},"
)
# A regular file's line longer than this without its newline is dropped, never held back whole.
_PARTIAL_MAX = 2 * _KMSG_RECORD_MAX


class KmsgStream:
    """An open kernel log (Host.open_kmsg): the live char device, or a root's regular file
    (`file_fd` of the root's file operations `io`).

    `read_new()` returns the records that arrived since the last call (the first call: every
    record held), newest kept when over the bounds. Not thread-safe; close() once done."""

    def __init__(
        self, device_fd: int | None, file_fd: int | None, path: str, io: Backend = OS
    ) -> None:
        self._dev = device_fd
        self._file = file_fd
        self._io = io
        self.path = path
        self._offset = 0
        self._partial = b""

    def fileno(self) -> int | None:
        """The fd a selector can wait on (live /dev/kmsg), None for a regular file."""
        return self._dev

    def read_new(
        self,
        max_bytes: int | None = None,
        max_records: int | None = None,
        *,
        final: bool = False,
        batch_bytes: int | None = None,
    ) -> KmsgRead:
        """Records since the last call. In a regular file a last line without its newline is
        held back until it is complete, unless `final` (nothing more will be read) and the
        call reached the end of the file.

        `batch_bytes`: read about that much now and say `more` when records are left, so that a
        caller on an event loop can let its other sources run between batches (a flood of
        records must not starve the watchdog). Without it, everything that arrived is read.
        Raises AccessDenied / ReadError."""
        max_bytes = KMSG_MAX_BYTES if max_bytes is None else max_bytes
        max_records = KMSG_MAX_RECORDS if max_records is None else max_records
        if self._dev is not None:
            return self._drain_device(self._dev, max_bytes, max_records, batch_bytes)
        if self._file is not None:
            return self._read_file(self._file, max_bytes, max_records, final, batch_bytes)
        raise ReadError(self.path, None, "kernel log already closed")

    def _drain_device(
        self, fd: int, max_bytes: int, max_records: int, batch_bytes: int | None
    ) -> KmsgRead:
        from collections import deque  # the log's readers only: `topo` never loads collections

        kept: deque[str] = deque()
        size = 0
        total = 0
        truncated = False
        overwritten = 0
        skipped = 0
        limit = _KMSG_DRAIN_BYTES if batch_bytes is None else min(batch_bytes, _KMSG_DRAIN_BYTES)
        while total < limit:
            try:
                data = os.read(fd, _KMSG_RECORD_MAX)
            except BlockingIOError:
                break
            except OSError as err:
                if err.errno == errno_mod.EPIPE:
                    # The record at our position was overwritten before we read it; the next
                    # read returns the oldest one still held (Documentation/ABI/testing/
                    # dev-kmsg).
                    overwritten += 1
                    continue
                raise _translate(err, self.path) from err
            if not data:
                break
            total += len(data)
            # One read(2) is one record, its continuation lines included; splitting on lines
            # gives the same records and also reads a pipe that carries several at once.
            lead, records, bad = _kmsg_records(data.decode("utf-8", errors="replace"))
            skipped += bad
            if lead and kept:
                size -= len(kept[-1])
                kept[-1] = _join_capped([kept[-1], *lead])
                size += len(kept[-1])
            for record in records:
                kept.append(record)
                size += len(record) + 1
            while len(kept) > max_records or (size > max_bytes and len(kept) > 1):
                size -= len(kept.popleft()) + 1
                truncated = True
        else:
            if batch_bytes is None or total >= _KMSG_DRAIN_BYTES:
                truncated = True
        more = batch_bytes is not None and total >= limit
        return KmsgRead(tuple(kept), truncated, overwritten, skipped, more)

    def _read_file(
        self, fd: int, max_bytes: int, max_records: int, final: bool, batch_bytes: int | None
    ) -> KmsgRead:
        io = self._io
        skipped = 0
        try:
            end = io.fstat(fd).st_size
            if end < self._offset:  # rewritten shorter: start over
                self._offset, self._partial = 0, b""
            start = self._offset
            truncated = False
            if end - start > max_bytes:
                start, truncated = end - max_bytes, True
                self._partial = b""
            stop = end if batch_bytes is None else min(end, start + max(1, batch_bytes))
            chunks = []
            pos = start
            while pos < stop:
                chunk = io.pread(fd, min(_READ_CHUNK, stop - pos), pos)
                if not chunk:
                    break
                chunks.append(chunk)
                pos += len(chunk)
        except OSError as err:
            raise _translate(err, self.path) from err
        self._offset = pos
        more = pos < end
        data = self._partial + b"".join(chunks)
        if truncated and start > 0:
            data = data.split(b"\n", 1)[1] if b"\n" in data else b""  # drop a partial line
        body, _, self._partial = data.rpartition(b"\n")
        if more and body:
            # The last record of the batch may go on in the next one (its continuation lines):
            # it waits with the partial line, unless it is the whole batch.
            cut = _last_record_start(body)
            if cut > 0:
                body, self._partial = body[: cut - 1], body[cut:] + b"\n" + self._partial
        if final and not more and self._partial:
            body, self._partial = data, b""
        if len(self._partial) > _PARTIAL_MAX:
            # A line the kernel cannot have written, still without its newline: dropped, and
            # its rest with it (what follows up to the newline is not the head of a record).
            skipped += 1
            self._partial = b" "
        text = body.decode("utf-8", errors="replace")
        _lead, listed, bad = _kmsg_records(text)  # nothing before this read to continue
        skipped += bad
        from collections import deque

        records = deque(listed, maxlen=max_records)
        if len(listed) > max_records:
            truncated = True
        return KmsgRead(tuple(records), truncated, 0, skipped, more)

    def close(self) -> None:
        import contextlib  # not at import: `topo` never loads contextlib (host/root.py)

        if self._dev is not None:
            with contextlib.suppress(OSError):
                os.close(self._dev)
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._io.close(self._file)
        self._dev = self._file = None


def _kmsg_records(text: str) -> tuple[list[str], list[str], int]:
    """Lines of kmsg text as records: a line starting with a space continues the record before
    it (the ` KEY=VALUE` dictionary lines). Returns (the continuation lines before the first
    record, which belong to a record read before; the records; how many were skipped or cut).
    Empty lines are dropped. Each record's lines are joined once: joining line by line copies
    the record again for every line (quadratic in a record of many continuation lines)."""
    lead: list[str] = []
    out: list[str] = []
    parts: list[str] = lead
    skipped = 0
    skipping = False  # inside a record whose head was refused: its continuation lines go too
    for line in text.split("\n"):
        if not line:
            continue
        if line.startswith(" "):
            if not skipping:
                parts.append(line)
            continue
        if parts is not lead and not skipping:
            record, cut = _join(parts)
            out.append(record)
            skipped += cut
        skipping = not _head_ok(line)
        if skipping:
            skipped += 1
            parts = []
            continue
        parts = [line]
    if parts is not lead and not skipping:
        record, cut = _join(parts)
        out.append(record)
        skipped += cut
    return lead, out, skipped


def _head_ok(line: str) -> bool:
    """False for a record head whose numbers no kernel writes (more digits than their type
    holds); a line without the `PRIORITY,SEQ,USEC,` head is left to the parsers, which ignore
    it."""
    if pattern(_HEAD_IN_BOUNDS).match(line) is not None:  # every record the kernel writes
        return True
    m = pattern(_HEAD).match(line)
    if m is None:
        return True
    try:
        parse_decimal(m.group(1), max_digits=_PRIORITY_DIGITS)
        parse_decimal(m.group(2), max_digits=_U64_DIGITS)
        parse_decimal(m.group(3), max_digits=_U64_DIGITS)
    except BoundError:
        return False
    return True


def _join(parts: list[str]) -> tuple[str, int]:
    """A record's lines joined, cut at the kernel's bound on one record (the continuation
    lines past it dropped); (the record, 1 when it was cut)."""
    total = -1
    for i, part in enumerate(parts):
        total += len(part) + 1
        if total > _KMSG_RECORD_MAX and i > 0:
            return "\n".join(parts[:i]), 1
    return "\n".join(parts), 0


def _join_capped(parts: list[str]) -> str:
    return _join(parts)[0]


def _last_record_start(body: bytes) -> int:
    """The offset of the last line of `body` that starts a record (not a continuation line);
    0 when every line after the first continues the first."""
    pos = len(body)
    while True:
        nl = body.rfind(b"\n", 0, pos)
        if nl < 0:
            return 0
        if not body.startswith(b" ", nl + 1):
            return nl + 1
        pos = nl
