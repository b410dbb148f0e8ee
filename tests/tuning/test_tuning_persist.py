"""/etc/sysctl.d/90-mcpnode.conf and the boot-order report of what overrides it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mcpnode.host import Host
from mcpnode.tuning.apply import apply_profile
from mcpnode.tuning.journal import JournalStore
from mcpnode.tuning.persist import boot_order, find_overrides, normalise_key, parse_conf
from mcpnode.tuning.profile import load_profile
from tests.support.tuningcli import run_cli
from tests.support.tuningroot import build, put


def test_boot_order_sorts_by_name_and_etc_masks_the_rest() -> None:
    listing = {
        "/usr/lib/sysctl.d": ["10-arch.conf", "50-default.conf", "99-zz.conf", "README"],
        "/etc/sysctl.d": ["50-default.conf", "95-local.conf", "notes.txt"],
        "/run/sysctl.d": ["50-default.conf", "60-run.conf"],
        "/lib/sysctl.d": ["10-arch.conf"],
        "/usr/local/lib/sysctl.d": ["60-run.conf", "70-local.conf"],
    }
    assert boot_order(listing) == [
        "/usr/lib/sysctl.d/10-arch.conf",
        "/etc/sysctl.d/50-default.conf",
        "/run/sysctl.d/60-run.conf",
        "/usr/local/lib/sysctl.d/70-local.conf",
        "/etc/sysctl.d/95-local.conf",
        "/usr/lib/sysctl.d/99-zz.conf",
    ]


def test_parse_conf() -> None:
    text = "# c\n; c\n\nvm.swappiness=10\n -net.core.somaxconn = 1024 \nbogus line\nk.x =\n"
    assert parse_conf(text) == [
        (4, "vm.swappiness", "10"),
        (5, "net.core.somaxconn", "1024"),
        (7, "k.x", ""),
    ]


@pytest.mark.parametrize(
    ("written", "dotted"),
    [
        ("net.core.somaxconn", "net.core.somaxconn"),
        ("net/core/somaxconn", "net.core.somaxconn"),
        ("/net/core/somaxconn", "net.core.somaxconn"),
        ("net/ipv4/conf/eth0.100/rp_filter", "net/ipv4/conf/eth0.100/rp_filter"),
        ("net.ipv4.conf.eth0/100.rp_filter", "net.ipv4.conf.eth0/100.rp_filter"),
    ],
)
def test_normalise_key(written: str, dotted: str) -> None:
    assert normalise_key(written) == dotted


def _host(tmp_path: Path) -> Host:
    root = build(tmp_path / "root")
    put(root, "usr/lib/sysctl.d/10-arch.conf", "vm.max_map_count = 1048576\n")
    put(root, "usr/lib/sysctl.d/50-default.conf", "net.core.somaxconn = 1024\n")
    put(root, "etc/sysctl.d/50-default.conf", "# masks /usr/lib's\n")
    put(root, "run/sysctl.d/95-cni.conf", "net/core/somaxconn = 2048\n")
    put(root, "usr/lib/sysctl.d/99-glob.conf", "-vm.swap* = 30\nvm.swappiness = 10\n")
    put(root, "etc/sysctl.d/97-off.conf", "vm.swappiness = 99\n")
    put(root, "etc/sysctl.conf", "vm.swappiness = 5\n")
    os.symlink("/dev/null", root / "run/sysctl.d/97-off.conf")  # masks nothing: /etc wins
    return Host(root)


def test_overrides_in_systemd_sysctl_order(tmp_path: Path) -> None:
    host = _host(tmp_path)
    values = {"vm.swappiness": "10", "vm.max_map_count": "1048576", "net.core.somaxconn": "8192"}
    found = [
        (a.file, a.line, a.key, a.value, a.wins, a.same_value) for a in find_overrides(host, values)
    ]
    assert found == [
        ("/usr/lib/sysctl.d/10-arch.conf", 1, "vm.max_map_count", "1048576", False, True),
        ("/run/sysctl.d/95-cni.conf", 1, "net.core.somaxconn", "2048", True, False),
        ("/etc/sysctl.d/97-off.conf", 1, "vm.swappiness", "99", True, False),
        ("/usr/lib/sysctl.d/99-glob.conf", 1, "vm.swappiness", "30", True, False),
        ("/usr/lib/sysctl.d/99-glob.conf", 2, "vm.swappiness", "10", True, True),
        ("/etc/sysctl.conf", 1, "vm.swappiness", "5", True, False),
    ]


def test_sysctl_conf_linked_as_99_is_read_once_in_place(tmp_path: Path) -> None:
    host = _host(tmp_path)
    os.symlink("../sysctl.conf", Path(host.root) / "etc/sysctl.d/99-sysctl.conf")
    found = find_overrides(host, {"vm.swappiness": "10"})
    conf = [a for a in found if a.value == "5"]
    assert [a.file for a in conf] == ["/etc/sysctl.d/99-sysctl.conf"]
    assert "links to /etc/sysctl.conf" in conf[0].note
    assert found[-1].file == "/etc/sysctl.d/99-sysctl.conf"  # 99-glob < 99-sysctl


def test_a_dev_null_link_disables_a_file(tmp_path: Path) -> None:
    host = _host(tmp_path)
    os.symlink("/dev/null", Path(host.root) / "etc/sysctl.d/99-glob.conf")
    found = find_overrides(host, {"vm.swappiness": "10"})
    assert all(a.file != "/usr/lib/sysctl.d/99-glob.conf" for a in found)


def test_apply_persist_reports_overrides(tmp_path: Path, tuning_profiles: Path) -> None:
    host = _host(tmp_path)
    profiles = tuning_profiles
    profile = load_profile("latency", host, profiles)
    result = apply_profile(host, profile, JournalStore(host), persist=True)
    assert result.persist is not None and result.persist.written
    winners = {(a.file, a.key) for a in result.persist.overrides if a.wins and not a.same_value}
    assert ("/run/sysctl.d/95-cni.conf", "net.core.somaxconn") in winners
    assert ("/etc/sysctl.conf", "vm.swappiness") in winners
    conf = Path(host.root, "etc/sysctl.d/90-mcpnode.conf")
    assert conf.read_text().startswith("# Generated by mcpnode")
    assert oct(conf.stat().st_mode & 0o777) == "0o644"
    code, out, _ = run_cli(
        "apply", "--profile", "latency", "--persist", "--dry-run", "--root", host.root,
        "--profiles-dir", str(profiles),
    )  # fmt: skip
    assert code == 0
    assert "WARNING: these assignments override mcpnode's at boot" in out
    assert "/run/sysctl.d/95-cni.conf:1: net/core/somaxconn = 2048" in out


def test_persisted_min_is_the_applied_value_not_the_minimum(
    tuning_root: Path, tuning_profiles: Path
) -> None:
    root = tuning_root
    put(root, "proc/sys/vm/max_map_count", "2147483642\n")  # raised by a distro file at boot
    host = Host(root)
    profile = load_profile("base", host, tuning_profiles)
    apply_profile(host, profile, JournalStore(host), persist=True)
    conf = (root / "etc/sysctl.d/90-mcpnode.conf").read_text()
    assert "vm.max_map_count = 2147483642" in conf  # a boot never lowers it
