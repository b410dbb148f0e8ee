"""Host's write primitives: in-root, never through a last-component symlink, atomic where they
create files, typed errors, and the crash-test hook."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from mcpnode.errors import CommandFailed, NotSupported, PathNotFound, SymlinkLoop, WriteError
from mcpnode.host import FAULT_ENV, Host
from tests.support.tuningroot import put


def test_write_text_replaces_an_existing_file(tmp_path: Path) -> None:
    put(tmp_path, "proc/sys/vm/swappiness", "60\n")
    Host(tmp_path).write_text("/proc/sys/vm/swappiness", "10\n")
    assert (tmp_path / "proc/sys/vm/swappiness").read_text() == "10\n"


def test_write_text_never_creates(tmp_path: Path) -> None:
    (tmp_path / "proc/sys/vm").mkdir(parents=True)
    with pytest.raises(PathNotFound):
        Host(tmp_path).write_text("/proc/sys/vm/made_up", "1\n")
    assert not (tmp_path / "proc/sys/vm/made_up").exists()


def test_write_text_refuses_a_symlink_as_last_component(tmp_path: Path) -> None:
    target = put(tmp_path, "etc/shadow", "secret\n")
    put(tmp_path, "proc/sys/vm/x", "1\n").unlink()
    os.symlink("../../../etc/shadow", tmp_path / "proc/sys/vm/x")
    with pytest.raises(SymlinkLoop):
        Host(tmp_path).write_text("/proc/sys/vm/x", "0\n")
    assert target.read_text() == "secret\n"


def test_write_text_resolves_parent_links_inside_the_root(tmp_path: Path) -> None:
    put(tmp_path, "real/kernel/value", "1\n")
    (tmp_path / "proc/sys").mkdir(parents=True)
    os.symlink("/real/kernel", tmp_path / "proc/sys/kernel")  # absolute: from the root
    Host(tmp_path).write_text("/proc/sys/kernel/value", "2\n")
    assert (tmp_path / "real/kernel/value").read_text() == "2\n"


def test_write_text_to_a_fifo_fails_instead_of_hanging(tmp_path: Path) -> None:
    (tmp_path / "proc").mkdir()
    os.mkfifo(tmp_path / "proc/fifo")
    with pytest.raises(WriteError):
        Host(tmp_path).write_text("/proc/fifo", "1\n")


def test_write_text_to_a_directory_is_a_write_error(tmp_path: Path) -> None:
    (tmp_path / "proc/sys/vm").mkdir(parents=True)
    with pytest.raises(WriteError):
        Host(tmp_path).write_text("/proc/sys/vm", "1\n")


def test_write_file_atomic_creates_parents_with_the_mode_asked(tmp_path: Path) -> None:
    old = os.umask(0o077)
    try:
        Host(tmp_path).write_file_atomic("/etc/sysctl.d/90-x.conf", b"a = 1\n", mode=0o644)
    finally:
        os.umask(old)
    conf = tmp_path / "etc/sysctl.d/90-x.conf"
    assert conf.read_bytes() == b"a = 1\n"
    assert conf.stat().st_mode & 0o777 == 0o644
    assert sorted(os.listdir(conf.parent)) == ["90-x.conf"]  # no temporary left


def test_write_file_atomic_replaces_a_link_not_its_target(tmp_path: Path) -> None:
    target = put(tmp_path, "etc/passwd", "root:x:0:0\n")
    (tmp_path / "var/lib/mcpnode").mkdir(parents=True)
    os.symlink("../../../etc/passwd", tmp_path / "var/lib/mcpnode/j.json")
    Host(tmp_path).write_file_atomic("/var/lib/mcpnode/j.json", b"{}\n")
    assert target.read_text() == "root:x:0:0\n"
    assert not (tmp_path / "var/lib/mcpnode/j.json").is_symlink()


def test_makedirs_follows_links_inside_the_root_only(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "var").mkdir()
    os.symlink("/data", tmp_path / "var/lib")  # absolute target: inside the root
    Host(tmp_path).write_file_atomic("/var/lib/mcpnode/j.json", b"{}\n")
    assert (tmp_path / "data/mcpnode/j.json").read_bytes() == b"{}\n"
    assert not Path("/data/mcpnode").exists()


def test_makedirs_over_a_file_is_an_error(tmp_path: Path) -> None:
    put(tmp_path, "var/lib", "a file\n")
    with pytest.raises(WriteError):
        Host(tmp_path).write_file_atomic("/var/lib/mcpnode/j.json", b"{}\n")


def test_remove(tmp_path: Path) -> None:
    target = put(tmp_path, "etc/keep", "x\n")
    os.symlink("keep", tmp_path / "etc/link")
    host = Host(tmp_path)
    assert host.remove("/etc/link") is True
    assert target.exists()
    assert host.remove("/etc/link") is False
    assert host.remove("/nowhere/at/all") is False


def test_load_module_is_refused_on_a_recorded_root(tmp_path: Path) -> None:
    with pytest.raises(NotSupported, match="live host"):
        Host(tmp_path).load_module("tcp_bbr")
    with pytest.raises(CommandFailed, match="not a module name"):
        Host("/").load_module("../../evil")


def _writes_then_count(tmp_path: Path, kill_after: str) -> subprocess.CompletedProcess[str]:
    put(tmp_path, "proc/sys/a", "0\n")
    code = (
        "import sys; from mcpnode.host import Host\n"
        "h = Host(sys.argv[1])\n"
        "for i in range(1, 4):\n"
        "    h.write_text('/proc/sys/a', f'{i}\\n')\n"
        "    print(i, flush=True)\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)],
        capture_output=True,
        text=True,
        env={**os.environ, FAULT_ENV: kill_after},
        check=False,
    )


def test_fault_hook_kills_right_after_the_nth_write(tmp_path: Path) -> None:
    proc = _writes_then_count(tmp_path, "2")
    assert proc.returncode == -signal.SIGKILL
    assert proc.stdout.split() == ["1"]  # killed right after write 2, before its print
    assert (tmp_path / "proc/sys/a").read_text() == "2\n"


def test_fault_hook_ignores_garbage(tmp_path: Path) -> None:
    proc = _writes_then_count(tmp_path, "soon")
    assert proc.returncode == 0 and proc.stdout.split() == ["1", "2", "3"]
