"""A tarball's bytes, decompressed: gzip, bzip2, xz or none, found by magic number (as tarfile's
"r:*" finds them), as a generator of bounded chunks the tar parser pulls one at a time.

Chunks are at most CHUNK bytes, so memory stays bounded whatever the compression ratio, and
small: a tarball root's peak RSS is mostly the chunk in hand, the decompressor's buffers and
the copy made when a member spans two chunks, and freshly mapped pages cost page faults. The
32em64t dump's `topo --root` (alternated runs, peak RSS): 4 MiB chunks 179 ms / 34 MiB for
.tar.bz2 and 168 ms / 31 MiB for .tar.gz; 256 KiB chunks 177 ms / 22 MiB and 152 ms / 18 MiB;
128 KiB no better.

Decompression runs on the parsing thread. A thread decompressing ahead overlapped the two only
on an idle machine; on a busy one it paid GIL hand-overs and waits instead (the 32em64t dump's
`topo --root X.tar.bz2`: 427 ms with the thread, 383 ms without, alternated, load 4 on 2
cores), and it cost CPU time everywhere.

Each format is read by the standard library's own rules (gzip.GzipFile, bz2.BZ2File,
lzma.LZMAFile): gzip members may follow one another with NUL padding between them and anything
else after one is an error; bzip2 and xz streams may follow one another and trailing data that
is not one is ignored; a stream cut short is EOFError; a CRC mismatch is OSError (gzip) or the
decompressor's error. Imported only for tarball roots.
"""

from __future__ import annotations

import zlib

from mcpnode.codec.typenames import NamedTuple, Protocol

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (codec/typenames.py)
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from typing import BinaryIO

CHUNK = 256 << 10  # decompressed bytes in a chunk, at most
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
    while data:
        inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
        while not inflate.eof:
            if not data:
                data = raw.read(_INPUT)
                if not data:
                    raise EOFError(
                        "Compressed file ended before the end-of-stream marker was reached"
                    )
            out = inflate.decompress(data, CHUNK)
            data = inflate.unconsumed_tail
            if out:
                yield out
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
    while True:
        if decomp.eof:
            data = decomp.unused_data or raw.read(_INPUT)
            if not data:
                return
            decomp = new()
            try:
                out = decomp.decompress(data, CHUNK)
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
            out = decomp.decompress(data, CHUNK)
        if out:
            yield out


def _plain(raw: BinaryIO) -> Iterator[bytes]:
    while chunk := raw.read(CHUNK):
        yield chunk


class Source(NamedTuple):
    """The decompressed content of a file as chunks of at most CHUNK bytes, and the exceptions
    its decompressor raises for damaged data."""

    chunks: Iterator[bytes]
    errors: tuple[type[Exception], ...]


def open_source(raw: BinaryIO) -> Source:
    """`raw` (positioned at its start) through the decompressor its magic number names."""
    magic = raw.read(6)
    raw.seek(0)
    errors: tuple[type[Exception], ...] = (OSError, EOFError, zlib.error)
    if magic.startswith(_GZIP_MAGIC):
        return Source(_gzip(raw), errors)
    if magic.startswith(b"BZh"):
        import bz2

        return Source(_streams(raw, bz2.BZ2Decompressor, OSError), errors)
    if magic == b"\xfd7zXZ\x00":
        import lzma

        lz_errors = (*errors, lzma.LZMAError)
        return Source(_streams(raw, lzma.LZMADecompressor, lzma.LZMAError), lz_errors)
    return Source(_plain(raw), errors)
