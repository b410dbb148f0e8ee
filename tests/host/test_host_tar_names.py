"""The member loop's straight path (a new entry in a directory already indexed) indexes every
name exactly as the general path (`_member`) does. A pax global header sends every member of
an archive down the general path, so the same members written with and without one must give
the same index and the same notes: odd names (`a//b`, `./x`, `a/../b`, `.hidden`, `x.`, `.`,
`..`), absolute ones, names through a symlink or a file, replaced files, and names at the
MAX_DEPTH and MAX_NAME_BYTES caps."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

from mcpnode.host import decompress, tarball

SYS = "top/sys"
DEEP = "/".join(["d"] * (tarball.MAX_DEPTH - 2))  # top/sys/DEEP: MAX_DEPTH components


def _members() -> list[tuple[str, bytes, str | None]]:
    """(name, content, symlink target or None); a name ending in '/' is a directory."""
    files = [
        f"{SYS}/d/f",
        f"{SYS}//g",
        f"{SYS}/./h",
        f"{SYS}/d/../i",
        f"{SYS}/.hidden",
        f"{SYS}/d/.",
        f"{SYS}/d/..",
        f"{SYS}/e.",
        f"{SYS}/a..b",
        "/abs",
        "./top/sys/j",
        f"{SYS}/d/f",  # replaces the first
        f"{SYS}/l/x",  # through the symlink below
        f"{SYS}/d/f/z",  # below a file
        f"{SYS}/" + "n" * 300,
        f"{SYS}/{DEEP}",
        f"{SYS}/{DEEP}/past",
        f"{SYS}/" + "é" * 200,
    ]
    out: list[tuple[str, bytes, str | None]] = [("top/", b"", None), (f"{SYS}/", b"", None)]
    out += [(f"{SYS}/d/", b"", None), (f"{SYS}/l", b"", "d")]
    out += [(name, f"{i}\n".encode(), None) for i, name in enumerate(files)]
    out += [(f"{SYS}/d/", b"", None), (f"{SYS}/d", b"again\n", None)]  # dir again; file over dir
    return out


def _write(path: Path, pax_global: bool) -> Path:
    fmt = tarfile.PAX_FORMAT if pax_global else tarfile.GNU_FORMAT
    headers = {"comment": "every member down the general path"} if pax_global else {}
    with tarfile.open(path, "w:gz", format=fmt, pax_headers=headers) as tf:
        for name, content, target in _members():
            info = tarfile.TarInfo(name)
            info.mtime = 1_700_000_000
            if target is not None:
                info.type, info.linkname = tarfile.SYMTYPE, target
            elif name.endswith("/"):
                info.type, info.mode = tarfile.DIRTYPE, 0o755
            else:
                info.size = len(content)
            tf.addfile(info, io.BytesIO(content) if target is None else None)
    return path


def _index(archive: tarball.Archive) -> dict[str, tuple[object, ...]]:
    out: dict[str, tuple[object, ...]] = {}
    for key, node in archive.nodes.items():
        st = tarball._stat(node, 0)
        payload = sorted(node[2]) if isinstance(node[2], set) else node[2]
        out[key[len(archive.base) :]] = (st.st_mode, st.st_uid, st.st_mtime, st.st_size, payload)
    return out


def test_straight_path_indexes_as_the_general_path(tmp_path: Path) -> None:
    paths = [_write(tmp_path / "gnu.tar.gz", False), _write(tmp_path / "pax.tar.gz", True)]
    for path in paths:  # the archive's mtime is its implied directories' mtime
        os.utime(path, (1_700_000_000, 1_700_000_000))
    straight, general = (tarball.load(str(path)) for path in paths)
    assert _index(straight) == _index(general)
    assert straight.notes == general.notes
    assert straight.members == general.members
    # The odd names did reach the rules they test (not a test that cannot fail).
    why = dict(straight.notes)
    assert why["/abs"] == "absolute member name"
    assert why[f"{SYS}/d/../i"] == "member name contains '..'"
    assert why[f"{SYS}/l/x"] == "parent directory is reached through a symlink"
    assert f"{SYS}/{DEEP}/past" in why and f"{SYS}/{DEEP}" not in why
    got = _index(straight)
    assert got[f"/{SYS}/g"][4] == b"1\n" and got[f"/{SYS}/h"][4] == b"2\n"
    assert got[f"/{SYS}/d/f"][4] == b"11\n" and got[f"/{SYS}/.hidden"][4] == b"4\n"


def test_members_across_chunk_boundaries(tmp_path: Path) -> None:
    """A GNU long name whose data block begins the next decompressed chunk, and a member whose
    data spans two chunks, are read through the stream (the loop's in-buffer slices do not
    reach them) and index as tarfile reads them. Uncompressed, so that the chunks are exactly
    CHUNK bytes and the boundaries fall where this archive puts them."""
    chunk = decompress.CHUNK
    long_name = f"{SYS}/" + "L" * 150  # over tar's 100 bytes: a GNU long-name header first
    spanning = b"s" * (3 * 512 + 100)
    # Blocks: top/ and top/sys/ (one header each), pad's header and data; then the long name's
    # 'L' header ends the first chunk, so its data block opens the second.
    pad = b"p" * (chunk - 4 * 512)
    members = [("top/", b""), (f"{SYS}/", b""), (f"{SYS}/pad", pad), (long_name, b"long\n")]
    # Then enough to put `spanning` across the second boundary.
    filler = b"f" * (chunk - 6 * 512)
    members += [(f"{SYS}/filler", filler), (f"{SYS}/spanning", spanning)]
    path = tmp_path / "boundaries.tar"
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tf:
        for name, content in members:
            info = tarfile.TarInfo(name)
            if name.endswith("/"):
                info.type, info.mode = tarfile.DIRTYPE, 0o755
            else:
                info.size = len(content)
            tf.addfile(info, io.BytesIO(content))
    raw = path.read_bytes()
    # The layout the test relies on: the long-name header is the first chunk's last block, and
    # `spanning`'s data begins before the second boundary and ends after it.
    assert raw[chunk - 512 + 156] == ord("L")
    assert raw[chunk : chunk + len(long_name)] == long_name.encode()
    start = raw.index(spanning)
    assert start < 2 * chunk < start + len(spanning)
    got = _index(tarball.load(str(path)))
    with tarfile.open(path) as tf:
        want = {
            "/" + m.name.rstrip("/"): tf.extractfile(m).read()  # type: ignore[union-attr]
            for m in tf.getmembers()
            if m.isfile()
        }
    assert {k: v[4] for k, v in got.items() if k in want} == want
    assert got["/" + long_name][4] == b"long\n" and got[f"/{SYS}/spanning"][4] == spanning
