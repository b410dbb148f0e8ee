"""Tarball roots are bounded (host/tarball.py): a 1 TiB sparse member in a tiny .tar.gz is
refused, not expanded; a member over the per-member cap is a note; past the member-count, the
content or the decompression cap the archive is refused with one error naming it and the cap;
a 3000-deep member path and an oversized extended header are clean refusals. Nothing is written
to disk, and the peak memory of the two bombs that fill memory fastest (distinct members up to
the count cap, content up to the content cap) is measured in a child process: the caps are
what bound it."""

from __future__ import annotations

import gzip
import io
import shutil
import subprocess
import tarfile
import zlib
from pathlib import Path

import pytest

from mcpnode.errors import RootError
from mcpnode.host import Host
from mcpnode.host import tarball as host_tar
from tests.support.childrss import child_peak_rss_mib

pytestmark = pytest.mark.usefixtures("tmpdir_watch")

REPO = Path(__file__).resolve().parents[2]


def snap_dir(tmp: Path) -> Path:
    top = tmp / "snap"
    (top / "sys/devices/system/cpu").mkdir(parents=True)
    (top / "sys/devices/system/cpu/online").write_text("0\n")
    (top / "proc").mkdir()
    return top


@pytest.mark.skipif(shutil.which("tar") is None, reason="GNU tar makes the sparse member")
def test_a_1tib_sparse_member_is_refused_not_expanded(tmp_path: Path) -> None:
    top = snap_dir(tmp_path)
    with (top / "huge").open("wb") as f:
        f.truncate(1 << 40)
    for fmt in ("gnu", "posix"):  # old GNU sparse headers, and PAX's GNU.sparse records
        tarball = tmp_path / f"snap-{fmt}.tar.gz"
        subprocess.run(
            ["tar", f"--format={fmt}", "-S", "-czf", str(tarball), "-C", str(tmp_path), "snap"],
            check=True,
        )
        assert tarball.stat().st_size < 40_000
        with Host(tarball) as host:
            notes = dict(host.unpack_notes)
            assert notes.get("snap/huge") == "sparse member skipped", (fmt, notes)
            assert not host.exists("/huge")
            assert host.read_text("/sys/devices/system/cpu/online") == "0\n"


def _tarball(tmp: Path, members: list[tuple[str, bytes]], name: str = "t.tar.gz") -> Path:
    path = tmp / name
    with tarfile.open(path, "w:gz") as tf:
        for member, data in [("snap/proc/", b""), *members]:
            info = tarfile.TarInfo(member.rstrip("/"))
            if member.endswith("/"):
                info.type = tarfile.DIRTYPE
                tf.addfile(info)
            else:
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
    return path


def test_a_member_over_the_largest_read_cap_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(host_tar, "MAX_MEMBER_BYTES", 4096)
    big = b"\0" * 4097
    tarball = _tarball(tmp_path, [("snap/proc/big", big), ("snap/proc/ok", b"1\n")])
    with Host(tarball) as host:
        assert dict(host.unpack_notes) == {"snap/proc/big": "member larger than 4096 bytes skipped"}
        assert host.read_text("/proc/ok") == "1\n"
        assert host.read_optional("/proc/big") is None


def test_the_real_member_cap_is_the_largest_read_cap() -> None:
    from mcpnode.host.read import FILE_READ_LIMIT, PROCFS_READ_LIMIT, SYSFS_READ_LIMIT

    assert max(FILE_READ_LIMIT, PROCFS_READ_LIMIT, SYSFS_READ_LIMIT) == host_tar.MAX_MEMBER_BYTES


def test_content_stream_and_member_count_are_capped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(host_tar, "MAX_TOTAL_BYTES", 1000)
    tarball = _tarball(tmp_path, [(f"snap/proc/f{i}", b"x" * 100) for i in range(11)])
    with pytest.raises(RootError, match=r"t\.tar\.gz: holds more than 1000 bytes of content"):
        Host(tarball)
    monkeypatch.setattr(host_tar, "MAX_TOTAL_BYTES", 512 << 20)
    # Members refused one by one still have to be decompressed to get past: that is capped too.
    monkeypatch.setattr(host_tar, "MAX_MEMBER_BYTES", 10)
    monkeypatch.setattr(host_tar, "MAX_STREAM_BYTES", 3 << 20)
    skipped = _tarball(tmp_path, [(f"snap/proc/s{i}", b"\0" * (1 << 20)) for i in range(5)])
    with pytest.raises(RootError, match=r"decompresses to more than 3145728 bytes"):
        Host(skipped)
    monkeypatch.setattr(host_tar, "MAX_MEMBERS", 50)
    many = _tarball(tmp_path, [(f"snap/proc/e{i}", b"") for i in range(60)], "many.tar.gz")
    with pytest.raises(RootError, match=r"many\.tar\.gz: more than 50 members"):
        Host(many)


def test_a_3000_deep_member_is_a_clean_note(tmp_path: Path) -> None:
    deep = "snap/" + "/".join(["d"] * 3000) + "/f"
    tarball = _tarball(tmp_path, [(deep, b"x"), ("snap/proc/ok", b"1\n")])
    with Host(tarball) as host:
        assert any(
            n == deep and ("deeper than" in w or "longer than" in w) for n, w in host.unpack_notes
        )
        assert host.read_text("/proc/ok") == "1\n"
    shallow_but_deep = "snap/" + "/".join(["d"] * 200) + "/f"  # short enough, too many levels
    tarball = _tarball(tmp_path, [(shallow_but_deep, b"x"), ("snap/proc/ok", b"1\n")])
    with Host(tarball) as host:
        assert dict(host.unpack_notes) == {
            shallow_but_deep: f"member path deeper than {host_tar.MAX_DEPTH} directories"
        }


def test_an_oversized_extended_header_is_refused(tmp_path: Path) -> None:
    """A pax header is a few records for one member; 1 MiB of them is not a snapshot."""
    info = tarfile.TarInfo("snap/proc/x")
    info.pax_headers = {"comment": "c" * (1 << 20)}
    path = tmp_path / "pax.tar.gz"
    with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT) as tf:
        tf.addfile(info, io.BytesIO(b""))
    with pytest.raises(RootError, match="extended header of"):
        Host(path)


# -- bombs, measured in a child ----------------------------------------------------------------


def _header(name: bytes, size: int, kind: bytes = b"0") -> bytes:
    """A ustar header, built as tar(1) writes one."""
    h = bytearray(512)
    h[0 : len(name)] = name
    h[100:108] = b"0000644\0"
    h[108:116] = h[116:124] = b"0000000\0"
    h[124:136] = b"%011o\0" % size
    h[136:148] = b"00000000000\0"
    h[156] = kind[0]
    h[257:265] = b"ustar\x0000"
    h[148:156] = b" " * 8
    h[148:156] = b"%06o\0 " % sum(h)
    return bytes(h)


def _count_bomb(path: Path, members: int) -> None:
    """`members` distinct empty files in one directory, gzipped: what fills the index fastest
    per byte of archive. Each header differs from the first only in its name and checksum."""
    first = bytearray(_header(b"snap/proc/000000", 0))
    base_sum = sum(first) - sum(b"000000") - sum(first[148:156]) + 8 * 32
    with gzip.open(path, "wb", compresslevel=1) as out:
        out.write(_header(b"snap/proc/", 0, b"5"))
        batch = []
        for i in range(members):
            digits = b"%06d" % i
            first[10:16] = digits
            first[148:156] = b"%06o\0 " % (base_sum + sum(digits))
            batch.append(bytes(first))
            if len(batch) == 20_000:
                out.write(b"".join(batch))
                batch.clear()
        out.write(b"".join(batch) + bytes(1024))


def _content_bomb(path: Path, members: int, size: int) -> None:
    """`members` distinct files of `size` zero bytes: a few hundred kB that hold more content
    than a tarball root keeps. One gzip member of zeros, compressed once, follows each header
    (concatenated gzip members are one gzip stream, RFC 1952)."""
    zeros = zlib.compressobj(1, zlib.DEFLATED, 31)
    chunk = bytes(1 << 20)
    body = b"".join(zeros.compress(chunk) for _ in range(size >> 20)) + zeros.flush()
    with path.open("wb") as out:
        for i in range(members):
            out.write(gzip.compress(_header(b"snap/proc/big%03d" % i, size), 1))
            out.write(body)
        out.write(gzip.compress(bytes(1024), 1))


def _topo_child(root: Path) -> tuple[int, str, float]:
    """(exit status, stderr, peak RSS MiB) of `mcpnode topo --root ROOT` as a child process."""
    code, rss, err = child_peak_rss_mib(["topo", "--format", "json", "--root", str(root)])
    return code, err, rss


def test_bombs_are_refused_in_bounded_memory(tmp_path: Path, tmpdir_watch: Path) -> None:
    """Past the member-count cap and past the content cap, at the real caps: exit 2 with one
    line naming the archive and the cap, no traceback, nothing written; the peak RSS stays
    within what the cap allows (an empty entry of the index costs ~500 bytes; content
    is held once, plus the member being read), measured against the same command on a small
    root."""
    small = snap_dir(tmp_path / "small")
    code, _err, base_rss = _topo_child(small)
    assert code == 0, _err

    count = tmp_path / "count.tar.gz"
    _count_bomb(count, host_tar.MAX_MEMBERS + 1)
    code, err, count_rss = _topo_child(count)
    assert code == 2, err
    assert err.strip() == (
        f"mcpnode: --root {count}: more than {host_tar.MAX_MEMBERS} members (MAX_MEMBERS); refused"
    )
    # An index entry of an empty file costs ~500 bytes, measured (238 MiB over the small
    # root's figure for 500,001 members): its key (~140: the archive's path and the member's),
    # the dict slot and hash (~100), the node tuple (64), its header's 48 metadata bytes (81),
    # the leaf name in its directory's set (~55 + slot).
    assert count_rss - base_rss < host_tar.MAX_MEMBERS * 640 / 2**20, (count_rss, base_rss)

    content = tmp_path / "content.tar.gz"
    per_member = 48 << 20
    _content_bomb(content, host_tar.MAX_TOTAL_BYTES // per_member + 2, per_member)
    assert content.stat().st_size < 8 << 20
    code, err, content_rss = _topo_child(content)
    assert code == 2, err
    assert err.strip().startswith(
        f"mcpnode: --root {content}: holds more than {host_tar.MAX_TOTAL_BYTES}"
    )
    assert "Traceback" not in err
    allowed = host_tar.MAX_TOTAL_BYTES + host_tar.MAX_MEMBER_BYTES + (16 << 20)
    assert content_rss - base_rss < allowed / 2**20, content_rss
    print(  # the figures, for the log: pytest -s
        f"peak RSS: small root {base_rss:.0f} MiB, count bomb {count_rss:.0f} MiB, "
        f"content bomb {content_rss:.0f} MiB"
    )
    assert list(tmpdir_watch.iterdir()) == []
