"""Privileges: predicted from /proc/self/status (a fake root can say CapEff 0), and met for real
when a write is refused (a child dropped to uid 65534 writing a root-owned file)."""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import mcpnode.cli.render_tuning

# The child that drops to nobody cannot read this interpreter's standard library (it lives under
# /root here), so everything `apply` imports lazily is imported now, by the parent.
import mcpnode.logs
import mcpnode.tuning.apply  # noqa: F401
from mcpnode.host import Host
from mcpnode.tuning import privilege
from mcpnode.tuning.plan import plan
from mcpnode.tuning.privilege import Privileges, denied_hint, missing
from mcpnode.tuning.profile import load_profile
from mcpnode.tuning.state import parse_status, read_state
from tests.support.tuningcli import run_cli
from tests.support.tuningroot import NO_CAPS, build, get_sysctl, write_profiles

NOBODY = 65534
NET_ADMIN_ONLY = f"{1 << privilege.CAP_NET_ADMIN:016x}"


def _plan_for(tmp: Path, cap_eff: str, euid: int = 0) -> dict[str, tuple[str, str]]:
    root = build(tmp / "root", cap_eff=cap_eff, euid=euid)
    host = Host(root)
    profile = load_profile("latency", host, write_profiles(tmp / "profiles"))
    return {i.key: (i.action, i.reason) for i in plan(profile, read_state(host, profile)).items}


def test_capeff_zero_names_cap_sys_admin_for_numa_balancing(tmp_path: Path) -> None:
    items = _plan_for(tmp_path, NO_CAPS)
    action, reason = items["kernel.numa_balancing"]
    assert action == "needs-privilege"
    assert "CAP_SYS_ADMIN" in reason and "CapEff" in reason
    assert items["vm.swappiness"][0] == "set"  # euid 0 is all the rest needs
    assert items["net.core.somaxconn"][0] == "set"


def test_non_root_with_net_admin_may_only_write_net(tmp_path: Path) -> None:
    items = _plan_for(tmp_path, NET_ADMIN_ONLY, euid=NOBODY)
    assert items["net.core.somaxconn"][0] == "set"
    action, reason = items["vm.swappiness"]
    assert action == "needs-privilege" and "root (euid 0)" in reason
    assert "CAP_DAC_OVERRIDE does not help" in reason
    assert items["vm:transparent_hugepage"][0] == "needs-privilege"


def test_cli_reports_needs_privilege_and_verify_counts_it_as_drift(
    tmp_path: Path, tuning_profiles: Path
) -> None:
    root = build(tmp_path / "root", cap_eff=NO_CAPS)
    profiles = tuning_profiles
    args = ("--root", str(root), "--profiles-dir", str(profiles), "--profile", "latency")
    code, out, _ = run_cli("apply", *args)
    assert code == 0
    line = next(x for x in out.splitlines() if x.startswith("kernel.numa_balancing"))
    assert "needs-privilege" in line and "CAP_SYS_ADMIN" in line
    assert get_sysctl(root, "kernel.numa_balancing") == "1"
    code, out, _ = run_cli("verify", *args)
    assert code == 1 and "kernel.numa_balancing" in out


@pytest.mark.parametrize(
    ("key", "privileges", "needle"),
    [
        ("kernel.numa_balancing", Privileges(0, 0), "CAP_SYS_ADMIN"),
        ("kernel.numa_balancing", Privileges(0, 1 << privilege.CAP_SYS_ADMIN), None),
        ("net.core.bpf_jit_harden", Privileges(0, 0), "CAP_SYS_ADMIN"),
        ("net.core.somaxconn", Privileges(NOBODY, 1 << privilege.CAP_NET_ADMIN), None),
        ("net.core.somaxconn", Privileges(NOBODY, 0), "CAP_NET_ADMIN"),
        ("vm.swappiness", Privileges(NOBODY, (1 << 40) - 1), "root (euid 0)"),
        ("vm:transparent_hugepage", Privileges(NOBODY, 1 << privilege.CAP_DAC_OVERRIDE), None),
        ("module:tcp_bbr", Privileges(0, 0), "CAP_SYS_MODULE"),
        ("vm.swappiness", Privileges(None, None), None),  # unknown: let the write decide
    ],
)
def test_missing(key: str, privileges: Privileges, needle: str | None) -> None:
    why = missing(key, privileges)
    if needle is None:
        assert why is None
    else:
        assert why is not None and needle in why


def test_parse_status() -> None:
    text = "Name:\tx\nUid:\t1000\t0\t0\t0\nCapEff:\t000001ffffffffff\n"
    assert parse_status(text) == Privileges(0, 0x1FFFFFFFFFF)
    assert parse_status(None) == Privileges(None, None)
    assert parse_status("Uid:\tx\nCapEff:\tzz\n") == Privileges(None, None)


def test_denied_hints_name_the_capability() -> None:
    assert "CAP_SYS_ADMIN" in denied_hint("kernel.numa_balancing", errno.EPERM)
    assert "root (euid 0)" in denied_hint("vm.swappiness", errno.EACCES)
    assert "tcp_allowed_congestion_control" in denied_hint(
        "net.ipv4.tcp_congestion_control", errno.EPERM
    )
    assert "read-only" in denied_hint("vm.swappiness", errno.EROFS)


# -- a real EACCES ---------------------------------------------------------------------------


def as_nobody(argv: list[str]) -> tuple[int, str, str]:
    """`mcpnode ARGV` in a forked child that dropped to uid/gid 65534 with no groups (the venv's
    interpreter is not executable by nobody here, so no exec: the child calls main())."""
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child; never returns into pytest
        try:
            os.close(rfd)
            os.setgroups([])
            os.setresgid(NOBODY, NOBODY, NOBODY)
            os.setresuid(NOBODY, NOBODY, NOBODY)
            try:
                result = run_cli(*argv)
            except BaseException as exc:
                result = (99, "", f"child raised {exc!r}")
            with os.fdopen(wfd, "w") as w:
                json.dump(result, w)
        finally:
            os._exit(0)
    os.close(wfd)
    with os.fdopen(rfd) as r:
        data = r.read()
    os.waitpid(pid, 0)
    code, out, err = json.loads(data)
    return int(code), str(out), str(err)


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A directory uid 65534 can traverse (pytest's tmp_path is 0700)."""
    path = Path(tempfile.mkdtemp(prefix="mcpnode-priv-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


@pytest.mark.skipif(os.geteuid() != 0, reason="dropping to uid 65534 needs root")
def test_real_eacces_is_reported_naming_root_and_undone(shared_tmp: Path) -> None:
    root = build(shared_tmp / "root")  # status says root with every capability
    profiles = write_profiles(shared_tmp / "profiles")
    state = root / "var/lib/mcpnode"
    state.mkdir(parents=True)
    os.chown(state, NOBODY, NOBODY)  # the state directory is the runner's own (a trusted owner)
    (root / "proc/sys/vm/swappiness").chmod(0o666)  # the first write succeeds...
    max_map = root / "proc/sys/vm/max_map_count"  # ...the second is refused: EACCES
    assert stat.S_IMODE(max_map.stat().st_mode) == 0o644
    for p in [shared_tmp, *(p for p in shared_tmp.rglob("*") if p.is_dir())]:
        p.chmod(p.stat().st_mode | 0o555)
    argv = ["apply", "--profile", "base", "--root", str(root), "--profiles-dir", str(profiles)]
    code, _, stderr = as_nobody(argv)
    assert code == 2, stderr
    assert "vm.max_map_count" in stderr
    assert "Permission denied" in stderr
    assert "needs root (euid 0)" in stderr
    assert "rolled back 1 earlier write(s)" in stderr
    assert get_sysctl(root, "vm.swappiness") == "60"  # undone
    assert get_sysctl(root, "vm.max_map_count") == "65530"
    assert not (state / "tuning-journal.json").exists()
