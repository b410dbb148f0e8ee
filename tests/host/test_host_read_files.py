"""Host.read_files: many files by path in one call, each answered exactly as read_optional()
answers it (the text; the HostError it raises; left out when read_optional() says None), with
the per-file protocol kept: under a recorded root the entry is lstat()ed before it is opened, so
a FIFO or device node is never opened, and what is opened is checked to be the file lstat()ed.

Compared on real files with what read_optional() says of each path, on a directory root (with
and without a read pass), a tarball of the same tree, a recording, and this machine's /sys;
tuning's read_values() is compared with read_value() the same way.
"""

from __future__ import annotations

import os
import stat
import tarfile
from pathlib import Path

import pytest

from mcpnode.errors import HostError, NotRegularFile, TooLarge
from mcpnode.host import Host, backend
from mcpnode.tuning.read import read_value, read_values
from tests.host.test_host_read_directory import put

CPU = "/sys/devices/system/cpu"


def sample(root: Path) -> tuple[Path, list[str]]:
    """A cpufreq-like tree with every kind of entry a hostile or hand-made root can put where an
    attribute should be; the logical paths to read, in order."""
    wanted = []
    for n in range(4):
        put(root, f"{CPU}/cpu{n}/power/energy_perf_bias", f"{n}\n")
        wanted.append(f"{CPU}/cpu{n}/power/energy_perf_bias")
    put(root, "etc/elsewhere", "performance\n")
    put(root, f"{CPU}/cpufreq/policy9/scaling_governor", "powersave\n")
    pol = root / CPU.lstrip("/") / "cpufreq"
    os.symlink("/etc/elsewhere", pol / "policy9" / "absolute")  # inside the root, as chroot
    os.symlink("../../../../../../etc/elsewhere", pol / "policy9" / "relative")
    os.symlink("loop", pol / "policy9" / "loop")
    os.symlink("/" + CPU.lstrip("/") + "/cpufreq/policy9", pol / "policy10")  # a linked dir
    os.mkfifo(pol / "policy9" / "fifo")
    os.mknod(pol / "policy9" / "zero", stat.S_IFCHR | 0o644, os.makedev(1, 5))  # /dev/zero's
    (pol / "policy9" / "dir").mkdir()
    put(root, f"{CPU}/cpufreq/policy9/big", "x" * 70_000)
    put(root, f"{CPU}/cpufreq/policy9/empty", "")
    for name in (
        "scaling_governor",
        "absolute",
        "relative",
        "loop",
        "fifo",
        "zero",
        "dir",
        "big",
        "empty",
        "absent",
    ):
        wanted.append(f"{CPU}/cpufreq/policy9/{name}")
    wanted += [f"{CPU}/cpufreq/policy10/scaling_governor", f"{CPU}/cpu77/power/absent"]
    wanted += [f"{CPU}/cpu0/power/energy_perf_bias/below", f"{CPU}/../../../../etc/elsewhere"]
    wanted.append(f"{CPU}/cpufreq/policy9/loop/below")  # a directory on the way that loops
    return root, wanted


def per_file(host: Host, wanted: list[str]) -> dict[str, str | tuple[type[HostError], str]]:
    out: dict[str, str | tuple[type[HostError], str]] = {}
    for path in wanted:
        try:
            text = host.read_optional(path)
        except HostError as err:
            out[path] = (type(err), err.detail)
            continue
        if text is not None:
            out[path] = text
    return out


def shape(found: dict[str, str | HostError]) -> dict[str, str | tuple[type[HostError], str]]:
    return {k: v if isinstance(v, str) else (type(v), v.detail) for k, v in found.items()}


def test_each_path_is_answered_as_read_optional_answers_it(tmp_path: Path) -> None:
    root, wanted = sample(tmp_path)
    host = Host(root)
    want = per_file(host, wanted)
    assert shape(host.read_files(wanted)) == want
    with host.oneshot():
        host.scandir(CPU)  # as the tuning pass lists it: the cpuN directories known resolved
        assert shape(host.read_files(wanted)) == want
    # What the cases are, so that the comparison above cannot pass on an empty answer.
    assert want[f"{CPU}/cpu3/power/energy_perf_bias"] == "3\n"
    assert want[f"{CPU}/cpufreq/policy9/absolute"] == "performance\n"
    assert want[f"{CPU}/cpufreq/policy9/relative"] == "performance\n"
    assert want[f"{CPU}/cpufreq/policy10/scaling_governor"] == "powersave\n"
    assert want[f"{CPU}/cpufreq/policy9/empty"] == ""
    for name in ("fifo", "zero", "dir"):
        assert want[f"{CPU}/cpufreq/policy9/{name}"][0] is NotRegularFile
    assert want[f"{CPU}/cpufreq/policy9/big"][0] is TooLarge
    assert f"{CPU}/cpufreq/policy9/absent" not in want
    assert f"{CPU}/cpu77/power/absent" not in want


def test_a_fifo_or_device_node_is_never_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Opening a device runs its driver's open (a planted /dev/watchdog would arm the watchdog):
    the batch, like read_bytes(), refuses it from the lstat() and opens nothing of it."""
    root, wanted = sample(tmp_path)
    opened: list[str] = []
    real_open = os.open

    def spy(path: str, flags: int, *args: object, **kw: object) -> int:
        opened.append(path)
        return real_open(path, flags, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", spy)
    monkeypatch.setattr(backend._OsBackend, "open", staticmethod(spy))
    found = Host(root).read_files(wanted)
    assert isinstance(found[f"{CPU}/cpufreq/policy9/zero"], NotRegularFile)
    assert opened and f"{root}/{CPU.lstrip('/')}/cpu0/power/energy_perf_bias" in opened
    assert not [p for p in opened if p.endswith(("/fifo", "/zero"))]


def test_the_limit_applies_while_reading(tmp_path: Path) -> None:
    root, _ = sample(tmp_path)
    path = f"{CPU}/cpufreq/policy9/edge"
    put(root, path, "y" * 100)
    host = Host(root)
    assert host.read_files([path], limit=100) == {path: "y" * 100}
    over = host.read_files([path], limit=99)[path]
    assert isinstance(over, TooLarge)


def test_a_tarball_root_answers_as_the_directory(tmp_path: Path) -> None:
    root, wanted = sample(tmp_path / "tree")
    # A tarball holds no FIFO or device node worth keeping; compare what it can hold.
    wanted = [p for p in wanted if not p.endswith(("/fifo", "/zero"))]
    for name in ("fifo", "zero"):
        (root / CPU.lstrip("/") / "cpufreq" / "policy9" / name).unlink()
    archive = tmp_path / "root.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(root, arcname=".")
    with Host(archive) as packed:
        assert shape(packed.read_files(wanted)) == per_file(packed, wanted)
        assert shape(packed.read_files(wanted)) == per_file(Host(root), wanted)


def test_a_recording_holds_what_read_bytes_records(tmp_path: Path) -> None:
    root, wanted = sample(tmp_path)
    host = Host(root)
    with host.recording() as rec:
        batch = host.read_files(wanted)
    with host.recording() as want:
        alone = per_file(host, wanted)
    assert shape(batch) == alone
    assert rec.files == want.files and rec.links == want.links
    assert rec.files[f"{CPU}/cpu2/power/energy_perf_bias"] == b"2\n"


def test_read_values_is_read_value_of_each_path(tmp_path: Path) -> None:
    """The tuning reader's batch: every Reading read_value() gives, the sysctl check included (a
    /proc/sys key that resolves outside /proc/sys is unreadable, not read)."""
    root, wanted = sample(tmp_path)
    put(root, "proc/sys/vm/swappiness", "60\n")
    os.symlink("/etc/elsewhere", root / "proc/sys/vm/escape")
    wanted += ["/proc/sys/vm/swappiness", "/proc/sys/vm/escape", "/proc/sys/vm/absent"]
    host = Host(root)
    batch = read_values(host, wanted)
    assert list(batch) == wanted
    assert batch == {path: read_value(host, path) for path in wanted}
    assert batch["/proc/sys/vm/swappiness"] == "60"
    assert "outside /proc/sys" in str(batch["/proc/sys/vm/escape"])


def test_live_sys_matches_read_optional() -> None:
    if not os.path.isdir(f"{CPU}/cpu0"):
        pytest.skip("no /sys/devices/system/cpu here")
    host = Host("/")
    names = ("online", "possible", "present", "kernel_max", "absent", "cpu0/uevent", "cpu0")
    wanted = [f"{CPU}/{name}" for name in names]
    assert shape(host.read_files(wanted)) == per_file(host, wanted)
