"""Host.read_directory: one listing and one open per attribute, with the per-file primitives'
answers for everything that is not a plain regular file.

Each case is compared with what read_optional()/readlink()/scandir() say of the same entries,
on real files: FIFOs and device nodes (refused before they are opened), symlinks standing in for
attributes (followed inside the root), directories, files over the cap, files that vanish, a
recording (which must hold what the per-file primitives record), and this machine's /sys.
"""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from mcpnode.errors import HostError, NotRegularFile, PathNotFound, TooLarge
from mcpnode.host import Host

DIR = "/sys/devices/pci0000:00/0000:00:01.0"


def put(root: Path, rel: str, text: str) -> Path:
    p = root / rel.lstrip("/")
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    return p


def sample(root: Path) -> Path:
    put(root, f"{DIR}/vendor", "0x10de\n")
    put(root, f"{DIR}/class", "0x030200\n")
    put(root, f"{DIR}/unwanted", "x\n")
    put(root, "etc/elsewhere", "0x8086\n")
    (root / DIR.lstrip("/") / "net" / "eth0").mkdir(parents=True)
    os.symlink("../../../bus/pci/drivers/nvidia", root / DIR.lstrip("/") / "driver")
    os.symlink("/etc/elsewhere", root / DIR.lstrip("/") / "device")  # absolute: inside root
    return root


def per_file(host: Host, names: frozenset[str]) -> dict[str, str | type[HostError]]:
    """What read_optional() says of each name: the text, or the error class it raises."""
    out: dict[str, str | type[HostError]] = {}
    for name in names:
        try:
            text = host.read_optional(f"{DIR}/{name}")
        except HostError as err:
            out[name] = type(err)
            continue
        if text is not None:
            out[name] = text
    return out


def shape(contents: dict[str, str | HostError]) -> dict[str, str | type[HostError]]:
    return {k: v if isinstance(v, str) else type(v) for k, v in contents.items()}


def test_contents_subdirectories_and_link_targets(tmp_path: Path) -> None:
    host = Host(sample(tmp_path))
    names = frozenset({"vendor", "class", "device", "absent"})
    contents, dirs, links = host.read_directory(DIR, names, frozenset({"driver"}))
    assert contents == {"vendor": "0x10de\n", "class": "0x030200\n", "device": "0x8086\n"}
    assert shape(contents) == per_file(host, names)
    assert dirs == ["net"]
    assert links == {"driver": "../../../bus/pci/drivers/nvidia", "device": None}
    assert links["driver"] == host.readlink(f"{DIR}/driver")


@pytest.mark.parametrize("kind", ["fifo", "device", "dir"])
def test_what_is_not_a_regular_file_is_refused_as_read_bytes_refuses_it(
    tmp_path: Path, kind: str
) -> None:
    """A FIFO (no writer: a blocking open or read would hang) or /dev/zero's numbers (read()
    never ends) where an attribute should be: refused from the listing's type, before any open,
    with read_bytes()'s error; the other attributes are still read."""
    root = sample(tmp_path)
    attr = root / DIR.lstrip("/") / "numa_node"
    if kind == "fifo":
        os.mkfifo(attr)
    elif kind == "device":
        os.mknod(attr, stat.S_IFCHR | 0o644, os.makedev(1, 5))
    else:
        attr.mkdir()
    host = Host(root)
    result: list[object] = []
    names = frozenset({"numa_node", "vendor"})
    worker = threading.Thread(
        target=lambda: result.append(host.read_directory(DIR, names)), daemon=True
    )
    worker.start()
    worker.join(30)
    assert result, "read_directory did not return"
    contents = result[0][0]  # type: ignore[index]
    assert contents["vendor"] == "0x10de\n"
    err = contents["numa_node"]
    assert isinstance(err, NotRegularFile)
    with pytest.raises(NotRegularFile) as want:
        host.read_bytes(f"{DIR}/numa_node")
    assert (err.errno, err.detail) == (want.value.errno, want.value.detail)


def test_over_the_cap_is_too_large_and_the_rest_is_read(tmp_path: Path) -> None:
    root = sample(tmp_path)
    put(root, f"{DIR}/big", "x" * 70_000)
    put(root, f"{DIR}/edge", "y" * 100)
    host = Host(root)
    contents = host.read_directory(DIR, frozenset({"big", "vendor"}))[0]
    assert isinstance(contents["big"], TooLarge) and contents["vendor"] == "0x10de\n"
    small = host.read_directory(DIR, frozenset({"edge", "vendor"}), limit=100)[0]
    assert small["edge"] == "y" * 100
    over = host.read_directory(DIR, frozenset({"edge"}), limit=99)[0]
    assert isinstance(over["edge"], TooLarge)


def test_symlink_attribute_loop_is_an_error_of_that_file_only(tmp_path: Path) -> None:
    root = sample(tmp_path)
    os.symlink("loop", root / DIR.lstrip("/") / "loop")
    host = Host(root)
    contents = host.read_directory(DIR, frozenset({"loop", "vendor"}))[0]
    assert contents["vendor"] == "0x10de\n"
    assert isinstance(contents["loop"], HostError)
    assert shape(contents) == per_file(host, frozenset({"loop", "vendor"}))


def test_directory_missing_or_not_a_directory_raises(tmp_path: Path) -> None:
    host = Host(sample(tmp_path))
    with pytest.raises(PathNotFound):
        host.read_directory("/sys/devices/nowhere", frozenset({"vendor"}))
    with pytest.raises(HostError):
        host.read_directory(f"{DIR}/vendor", frozenset({"x"}))


def test_a_symlinked_directory_is_resolved_inside_the_root(tmp_path: Path) -> None:
    root = sample(tmp_path)
    os.makedirs(root / "sys/bus/pci/devices")
    os.symlink("/" + DIR.lstrip("/"), root / "sys/bus/pci/devices/0000:00:01.0")  # absolute
    host = Host(root)
    via_link = host.read_directory("/sys/bus/pci/devices/0000:00:01.0", frozenset({"vendor"}))
    assert via_link == host.read_directory(DIR, frozenset({"vendor"}))
    with host.oneshot():
        assert host.read_directory(DIR, frozenset({"vendor"}))[1] == ["net"]
        # the subdirectory listed is remembered as resolved, as scandir() remembers it
        assert host.realpath(f"{DIR}/net") == f"{DIR}/net"
        assert host.read_directory(f"{DIR}/net", frozenset())[1] == ["eth0"]


def test_recording_holds_what_the_per_file_primitives_record(tmp_path: Path) -> None:
    host = Host(sample(tmp_path))
    names = frozenset({"vendor", "class", "device"})
    plain = host.read_directory(DIR, names, frozenset({"driver"}))
    with host.recording() as rec:
        recorded = host.read_directory(DIR, names, frozenset({"driver"}))
    with host.recording() as want:
        host.scandir(DIR)
        for name in sorted(names):
            host.read_bytes(f"{DIR}/{name}")
        host.readlink(f"{DIR}/driver")
    assert (shape(recorded[0]), recorded[1], recorded[2]) == (
        shape(plain[0]),
        plain[1],
        plain[2],
    )
    assert rec.files == want.files and rec.links == want.links and rec.dirs == want.dirs
    assert rec.files[f"{DIR}/vendor"] == b"0x10de\n"


def test_live_sys_matches_read_optional() -> None:
    if not os.path.isdir("/sys/devices/system/cpu"):
        pytest.skip("no /sys here")
    host = Host("/")
    names = frozenset({"online", "possible", "present", "kernel_max", "absent"})
    contents, dirs, _links = host.read_directory("/sys/devices/system/cpu", names)
    for name in names:
        assert contents.get(name) == host.read_optional(f"/sys/devices/system/cpu/{name}")
    assert "cpu0" in dirs
