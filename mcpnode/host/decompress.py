"""A tarball's bytes, decompressed: gzip, bzip2, xz or none, found by magic number (as tarfile's
"r:*" finds them), read ahead on a thread of its own.

zlib, bz2 and lzma release the GIL while they decompress, so while tarball.py parses one chunk
of the stream on this thread, the next is being decompressed on another core: for a `.tar.bz2`
sysfs dump bzip2 alone costs more than the whole parse, and the two then overlap instead of
adding up. The first chunk is small (FIRST), so parsing starts early; the others are large
(CHUNK), because the decompressing thread waits for the GIL after each decompressor call while
the parser holds it (up to sys.getswitchinterval(), 5 ms): with 1 MiB chunks those waits cost
more than the overlap saved. At most AHEAD chunks wait, so memory stays bounded whatever the
compression ratio; the thread ends with the stream, on an error, or when the reader closes.

Each format is read by the standard library's own rules (gzip.GzipFile, bz2.BZ2File,
lzma.LZMAFile): gzip members may follow one another with NUL padding between them and anything
else after one is an error; bzip2 and xz streams may follow one another and trailing data that
is not one is ignored; a stream cut short is EOFError; a CRC mismatch is OSError (gzip) or the
decompressor's error. Imported only for tarball roots.
"""

from __future__ import annotations

import collections
import threading
import zlib
from collections.abc import Callable, Iterator
from typing import BinaryIO, NamedTuple, Protocol

FIRST = 256 << 10  # decompressed bytes in the first chunk
CHUNK = 4 << 20  # ... and at most in each one after it
AHEAD = 2  # chunks decompressed ahead of the reader, at most
_INPUT = 1 << 20  # compressed bytes read at a time
_GZIP_MAGIC = b"\x1f\x8b"


class _Decompressor(Protocol):
    """bz2.BZ2Decompressor and lzma.LZMADecompressor."""

    @property
    def eof(self) -> bool: ...
    @property
    def needs_input(self) -> bool: ...
    @property
    def unused_data(self) -> bytes: ...
    def decompress(self, data: bytes, max_length: int = -1) -> bytes: ...


def _gzip(raw: BinaryIO) -> Iterator[bytes]:
    """gzip members (RFC 1952), each checked against its CRC-32 and length by zlib."""
    data = raw.read(_INPUT)
    size = FIRST
    while data:
        inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
        while not inflate.eof:
            if not data:
                data = raw.read(_INPUT)
                if not data:
                    raise EOFError(
                        "Compressed file ended before the end-of-stream marker was reached"
                    )
            out = inflate.decompress(data, size)
            data = inflate.unconsumed_tail
            if out:
                yield out
                size = CHUNK
        # After a member: NUL padding, then another member or the end (gzip._GzipReader).
        data = inflate.unused_data.lstrip(b"\0")
        while not data:
            more = raw.read(_INPUT)
            if not more:
                return
            data = more.lstrip(b"\0")
        if not data.startswith(_GZIP_MAGIC[: len(data)]):
            raise OSError(f"Not a gzipped file ({data[:2]!r})")


def _streams(
    raw: BinaryIO, new: Callable[[], _Decompressor], trailing: type[Exception]
) -> Iterator[bytes]:
    """bzip2 or xz streams one after another, as _compression.DecompressReader reads them."""
    decomp = new()
    size = FIRST
    while True:
        if decomp.eof:
            data = decomp.unused_data or raw.read(_INPUT)
            if not data:
                return
            decomp = new()
            try:
                out = decomp.decompress(data, size)
            except trailing:
                return  # trailing data that is not a stream is ignored, as BZ2File does
        else:
            if decomp.needs_input:
                data = raw.read(_INPUT)
                if not data:
                    raise EOFError(
                        "Compressed file ended before the end-of-stream marker was reached"
                    )
            else:
                data = b""
            out = decomp.decompress(data, size)
        if out:
            yield out
            size = CHUNK


def _plain(raw: BinaryIO) -> Iterator[bytes]:
    while chunk := raw.read(CHUNK):
        yield chunk


class Source(NamedTuple):
    """The decompressed content of a file as chunks of at most CHUNK bytes; the exceptions its
    decompressor raises for damaged data; whether there is a decompressor at all."""

    chunks: Iterator[bytes]
    errors: tuple[type[Exception], ...]
    compressed: bool


def open_source(raw: BinaryIO) -> Source:
    """`raw` (positioned at its start) through the decompressor its magic number names."""
    magic = raw.read(6)
    raw.seek(0)
    errors: tuple[type[Exception], ...] = (OSError, EOFError, zlib.error)
    if magic.startswith(_GZIP_MAGIC):
        return Source(_gzip(raw), errors, True)
    if magic.startswith(b"BZh"):
        import bz2

        return Source(_streams(raw, bz2.BZ2Decompressor, OSError), errors, True)
    if magic == b"\xfd7zXZ\x00":
        import lzma

        lz_errors = (*errors, lzma.LZMAError)
        return Source(_streams(raw, lzma.LZMADecompressor, lzma.LZMAError), lz_errors, True)
    return Source(_plain(raw), errors, False)


class ReadAhead:
    """Chunks of `source` produced on a thread of its own, at most AHEAD ahead of `next()`.

    `next()` returns b"" at the end and re-raises whatever the source raised; `close()` stops
    the thread (it finishes the chunk in hand) and waits for it. Use as a context manager."""

    def __init__(self, source: Iterator[bytes]) -> None:
        self._source = source
        self._ready: collections.deque[bytes] = collections.deque()
        self._cond = threading.Condition()
        self._error: BaseException | None = None
        self._done = False
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="mcpnode-decompress", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            for chunk in self._source:
                with self._cond:
                    while len(self._ready) >= AHEAD and not self._stop:
                        self._cond.wait()
                    if self._stop:
                        return
                    self._ready.append(chunk)
                    self._cond.notify()
        except BaseException as err:  # handed to the reader, raised there
            with self._cond:
                self._error = err
        finally:
            with self._cond:
                self._done = True
                self._cond.notify()

    def next(self) -> bytes:
        with self._cond:
            while not self._ready and not self._done:
                self._cond.wait()
            if self._ready:
                chunk = self._ready.popleft()
                self._cond.notify()
                return chunk
            if self._error is not None:
                raise self._error
            return b""

    def close(self) -> None:
        with self._cond:
            self._stop = True
            self._ready.clear()
            self._cond.notify()
        self._thread.join()

    def __enter__(self) -> ReadAhead:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
