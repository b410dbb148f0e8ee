"""Bounded input, clear errors: every read has a cap refused *while reading*; only regular files
are read (a device node in a fake root is never opened); includes cost one parse per file
however they fan out; TOML bombs and numbers no sysctl takes are one clear line with the
documented exit code; `--gpu` takes ASCII digits only; `pin` refuses init and names a TID.
"""

from __future__ import annotations

import os
import resource
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from mcpnode.errors import NotRegularFile, TooLarge
from mcpnode.host import SYSFS_READ_LIMIT, Host
from mcpnode.topology.discover import discover
from mcpnode.tuning.errors import ProfileError
from mcpnode.tuning.profile import load_profile, parse_profile
from tests.support import placeroot
from tests.support.childrss import child_peak_rss_mib
from tests.support.minihost import GPU_DIR, build
from tests.support.pinchild import start_child, stop
from tests.support.tuningcli import run_cli
from tests.support.tuningroot import tree, write_profiles

REPO = Path(__file__).resolve().parents[2]


# -- reads --------------------------------------------------------------------------------------


def test_a_2gib_sparse_attribute_costs_one_page(tmp_path: Path) -> None:
    root = build(tmp_path / "root")
    attr = root / GPU_DIR / "numa_node"
    with attr.open("r+b") as f:
        f.truncate(2 << 30)  # 2 GiB, sparse: no disk, but read() would return it all
    with Host(root) as host:
        with pytest.raises(TooLarge, match=f"larger than {SYSFS_READ_LIMIT} bytes"):
            host.read_bytes(f"/{GPU_DIR}/numa_node")
        topo = discover(host)
    assert any(p.source == f"/{GPU_DIR}/numa_node" for p in topo.problems)
    code, rss, err = child_peak_rss_mib(["topo", "--format", "json", "--root", str(root)])
    assert code == 0, err
    assert rss < 200, f"peak RSS {rss:.0f} MiB"  # it was 4 GB: the attribute read twice over


def test_a_device_node_in_a_fake_root_is_never_opened(tmp_path: Path) -> None:
    """/dev/zero's numbers where an attribute should be: refused from lstat(), before open(2)
    (which would run the driver; read() would never end)."""
    root = build(tmp_path / "root")
    attr = root / GPU_DIR / "numa_node"
    attr.unlink()
    os.mknod(attr, stat.S_IFCHR | 0o644, os.makedev(1, 5))
    result: list[object] = []
    worker = threading.Thread(target=lambda: result.append(discover(Host(root))), daemon=True)
    worker.start()
    worker.join(60)
    assert result, "discovery did not finish"
    with pytest.raises(NotRegularFile, match="is a device node"):
        Host(root).read_bytes(f"/{GPU_DIR}/numa_node")


@pytest.mark.parametrize("kind", ["fifo", "dir", "device"])
def test_profiles_configs_and_journals_must_be_regular_files(
    tmp_path: Path, tuning_root: Path, tuning_profiles: Path, kind: str
) -> None:
    root = tuning_root
    profiles = tuning_profiles

    def make(path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
        if kind == "fifo":
            os.mkfifo(path)
        elif kind == "dir":
            path.mkdir()
        else:
            os.mknod(path, stat.S_IFCHR | 0o644, os.makedev(1, 5))

    make(profiles / "odd.toml")
    with pytest.raises(ProfileError, match="cannot be used: is a"):
        load_profile("odd", Host(root), profiles)
    config = tmp_path / "mcpnode.toml"
    make(config)
    code, _out, err = run_cli("config", "check", str(config))
    # A directory is nothing to read (66, EX_NOINPUT); a FIFO or device is refused (65).
    assert code == (66 if kind == "dir" else 65), err
    assert "is a" in err and err.count("\n") == 1, err
    make(root / "var/lib/mcpnode/tuning-journal.json")
    code, _out, err = run_cli("rollback", "--root", str(root))
    assert code == 2 and "JournalError" in err and "cannot be used: is a" in err, err


# -- includes ---------------------------------------------------------------------------------


def fan_out(directory: Path, width: int, depth: int) -> Path:
    """`top` includes level 1's `width` profiles, each of which includes all of level 2's,
    and so on for `depth` levels: width**depth include paths, width*depth files."""
    directory.mkdir(parents=True, exist_ok=True)
    for level in range(1, depth + 1):
        for i in range(width):
            includes = [f"l{level + 1}-{j}" for j in range(width)] if level < depth else []
            (directory / f"l{level}-{i}.toml").write_text(
                f"[profile]\ninclude = {includes!r}\n[sysctl]\n"
                f'"vm.swappiness" = {level}\n"net.core.somaxconn" = {i + 1}\n'
            )
    top = [f"l1-{j}" for j in range(width)]
    (directory / "top.toml").write_text(f"[profile]\ninclude = {top!r}\n")
    return directory


def test_a_fan_out_of_40_over_6_levels_is_one_parse_per_file(tmp_path: Path) -> None:
    """40**6 = 4.1e9 include paths: resolved once each (a profile is merged where first
    reached). Config check, which Ansible's validate: runs, answers at once."""
    profiles = fan_out(tmp_path / "profiles", 40, 6)
    profile = load_profile("top", Host(tmp_path), profiles)
    assert len(profile.chain) == 40 * 6 + 1 and len(set(profile.chain)) == len(profile.chain)
    assert profile.chain[0] == "l6-0" and profile.chain[-1] == "top"
    config = tmp_path / "mcpnode.toml"
    config.write_text('[tuning]\nprofile = "top"\n')
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mcpnode",
            "config",
            "check",
            str(config),
            "--profiles-dir",
            str(profiles),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,  # hung forever before; `make bench` measures it
        check=False,
    )
    assert proc.returncode == 0, proc.stderr


def test_a_diamond_is_merged_once_where_first_reached(tmp_path: Path) -> None:
    profiles = write_profiles(
        tmp_path / "p",
        {
            "common": '[sysctl]\n"vm.swappiness" = 1\n',
            "left": '[profile]\ninclude = ["common"]\n[sysctl]\n"vm.swappiness" = 2\n',
            "right": '[profile]\ninclude = ["common"]\n',
            "top": '[profile]\ninclude = ["left", "right", "common"]\n',
        },
    )
    p = load_profile("top", Host(tmp_path), profiles)
    assert p.chain == ("common", "left", "right", "top")
    setting = p.setting("vm.swappiness")
    assert setting is not None and setting.source.endswith("left.toml")  # not undone by common


# -- TOML bombs ----------------------------------------------------------------------------------

BOMBS = {
    "nested-arrays": "x = " + "[" * 5000 + "]" * 5000 + "\n",
    "nested-tables": "x = " + "{a = " * 3000 + "1" + "}" * 3000 + "\n",
    "dotted-key": ".".join(["a"] * 16000) + " = 1\n",
    "quoted-dotted-key": ".".join(['"a"'] * 8000) + " = 1\n",
    "long-integer": "x = " + "9" * 5000 + "\n",
}


@pytest.mark.parametrize("name", sorted(BOMBS))
def test_toml_bombs_are_one_clear_line(tmp_path: Path, tuning_root: Path, name: str) -> None:
    text = BOMBS[name]
    with pytest.raises(ProfileError) as err:
        parse_profile(text, "bomb.toml", "bomb")
    assert "not valid TOML" in str(err.value)
    config = tmp_path / "mcpnode.toml"
    config.write_text(text)
    code, _out, stderr = run_cli("config", "check", str(config))
    assert code == 65 and str(config) in stderr and stderr.count("\n") == 1, stderr
    root = tuning_root
    profiles = write_profiles(tmp_path / "profiles", {"bomb": text})
    before = tree(root)
    code, _out, stderr = run_cli(
        "apply", "--profile", "bomb", "--root", str(root), "--profiles-dir", str(profiles)
    )
    assert code == 2 and "bomb.toml" in stderr and stderr.count("\n") == 1, stderr
    assert "Traceback" not in stderr
    assert tree(root) == before


# -- numbers -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        ("net.ipv4.tcp_rmem", "{ min = 1000000000000000000000000000000 }", "outside"),
        ("net.ipv4.tcp_rmem", '"' + "1" * 4000 + '"', "4000 digits"),
        ("net.ipv4.tcp_mem", "18446744073709551616", "outside any sysctl integer"),
        ("net.ipv4.tcp_mem", '"4096 131072 99999999999999999999999"', "23 digits"),
    ],
)
def test_numbers_no_sysctl_takes_are_refused(key: str, value: str, reason: str) -> None:
    with pytest.raises(ProfileError, match=reason) as err:
        parse_profile(f'[sysctl]\n"{key}" = {value}\n', "n.toml", "n")
    assert err.value.key == key


def test_known_keys_are_held_to_their_handler_range() -> None:
    with pytest.raises(ProfileError, match=r"0\.\.200"):
        parse_profile('[sysctl]\n"vm.swappiness" = 201\n', "n.toml", "n")
    with pytest.raises(ProfileError, match="2147483647"):
        parse_profile('[sysctl]\n"vm.max_map_count" = { min = 2147483648 }\n', "n.toml", "n")
    assert parse_profile('[sysctl]\n"vm.swappiness" = 200\n', "n.toml", "n").settings


# -- --gpu and pin -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def placed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return placeroot.build(tmp_path_factory.mktemp("placed"))


@pytest.mark.parametrize("selector", ["²", "０", "٠", "0\n", " 0", "+0", "0x0", "-0"])
def test_gpu_index_is_ascii_digits_only(placed: Path, selector: str) -> None:
    code, _out, err = run_cli(
        "exec", "--gpu", selector, "--fresh", "--root", str(placed), "--dry-run", "--", "true"
    )
    assert code == 64, err
    assert err.count("\n") == 1 and "Traceback" not in err
    ok = run_cli("exec", "--gpu", "0", "--fresh", "--root", str(placed), "--dry-run", "--", "true")
    assert ok[0] == 0


@pytest.mark.skipif(placeroot.skip_reason() is not None, reason=placeroot.skip_reason() or "")
def test_pin_refuses_init_and_names_a_thread(placed: Path) -> None:
    code, _out, err = run_cli("pin", "1", "--gpu", "0", "--root", str(placed))
    assert code == 77 and "pid 1 is this host's init" in err and "--force" in err, err
    child = start_child()
    try:
        tids = sorted(int(t) for t in os.listdir(f"/proc/{child.pid}/task"))
        tid = next(t for t in tids if t != child.pid)
        code, _out, err = run_cli("pin", str(tid), "--gpu", "0", "--root", str(placed))
        assert code == 77, err
        assert f"{tid} is a thread id (TID) of process {child.pid}" in err
    finally:
        stop(child)


def test_resource_module_reports_children_in_kib() -> None:
    """The peak-RSS figure above reads ru_maxrss as KiB (Linux getrusage(2))."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    assert usage.ru_maxrss > 1000  # this Python uses more than 1 MiB


def test_the_peak_rss_figure_is_the_childs_not_the_test_runners() -> None:
    """Ballast in this process must not show up in the child's figure (it did: a full run's
    pytest at 287 MiB made `topo` "peak" at 287 MiB)."""
    ballast = bytearray(256 << 20)
    for i in range(0, len(ballast), 4096):
        ballast[i] = 1
    code, rss, err = child_peak_rss_mib(["--version"])
    assert code == 0, err
    assert rss < 128, f"peak RSS {rss:.0f} MiB"
    del ballast
