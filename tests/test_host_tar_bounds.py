"""Tarball roots are bounded (host/tarball.py): a 1 TiB sparse member in a 200-byte .tar.gz is
refused, not written; members beyond the per-member, total and count caps are refused; a
3000-deep member path is a clean note; the unpack leaves nothing behind."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

import pytest

from mcpnode.errors import RootError
from mcpnode.host import Host
from mcpnode.host import tarball as host_tar


def snap_dir(tmp: Path) -> Path:
    top = tmp / "snap"
    (top / "sys/devices/system/cpu").mkdir(parents=True)
    (top / "sys/devices/system/cpu/online").write_text("0\n")
    (top / "proc").mkdir()
    return top


def unpack_dirs() -> set[str]:
    return {n for n in os.listdir(tempfile.gettempdir()) if n.startswith("mcpnode-root-")}


@pytest.mark.skipif(shutil.which("tar") is None, reason="GNU tar makes the sparse member")
def test_a_1tib_sparse_member_is_refused_not_written(tmp_path: Path) -> None:
    top = snap_dir(tmp_path)
    with (top / "huge").open("wb") as f:
        f.truncate(1 << 40)
    tarball = tmp_path / "snap.tar.gz"
    subprocess.run(["tar", "-S", "-czf", str(tarball), "-C", str(tmp_path), "snap"], check=True)
    assert tarball.stat().st_size < 40_000
    before = unpack_dirs()
    with Host(tarball) as host:
        assert ("snap/huge", "sparse member skipped") in host.unpack_notes
        assert not host.exists("/huge")
        assert host.read_text("/sys/devices/system/cpu/online") == "0\n"
    assert unpack_dirs() == before  # removed at close


def _tarball(tmp: Path, members: list[tuple[str, bytes]]) -> Path:
    path = tmp / "t.tar.gz"
    with tarfile.open(path, "w:gz") as tf:
        for name, data in [("snap/proc/", b""), *members]:
            info = tarfile.TarInfo(name.rstrip("/"))
            if name.endswith("/"):
                info.type = tarfile.DIRTYPE
                tf.addfile(info)
            else:
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
    return path


def test_a_member_over_the_largest_read_cap_is_refused(tmp_path: Path) -> None:
    big = b"\0" * (host_tar.MAX_MEMBER_BYTES + 1)
    tarball = _tarball(tmp_path, [("snap/proc/big", big), ("snap/proc/ok", b"1\n")])
    with Host(tarball) as host:
        assert any(n == "snap/proc/big" and "larger than" in w for n, w in host.unpack_notes)
        assert host.read_text("/proc/ok") == "1\n"


def test_total_size_and_member_count_are_capped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(host_tar, "MAX_TOTAL_BYTES", 1000)
    tarball = _tarball(tmp_path, [(f"snap/proc/f{i}", b"x" * 100) for i in range(11)])
    before = unpack_dirs()
    with pytest.raises(RootError, match="unpacks to more than 1000 bytes"):
        Host(tarball)
    monkeypatch.setattr(host_tar, "MAX_TOTAL_BYTES", 2 << 30)
    monkeypatch.setattr(host_tar, "MAX_MEMBERS", 50)
    many = _tarball(tmp_path, [(f"snap/proc/e{i}", b"") for i in range(60)])
    with pytest.raises(RootError, match="more than 50 members"):
        Host(many)
    assert unpack_dirs() == before  # a refused archive leaves no copy


def test_a_3000_deep_member_is_a_clean_note(tmp_path: Path) -> None:
    deep = "snap/" + "/".join(["d"] * 3000) + "/f"
    tarball = _tarball(tmp_path, [(deep, b"x"), ("snap/proc/ok", b"1\n")])
    with Host(tarball) as host:
        assert any(
            n == deep and ("deeper than" in w or "longer than" in w) for n, w in host.unpack_notes
        )
        assert host.read_text("/proc/ok") == "1\n"
