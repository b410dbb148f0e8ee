"""Only files root controls are trusted (Host.read_trusted, Host.lock): journals, profiles,
configs and agent state planted where others can write are refused with one line naming the
file and why, before anything is written; sensitive sysctls need an explicit allow-list;
rollback restores the persisted file's mode and owner; what mcpnode creates has the unit's
modes whatever the umask; temporary files and unpacked tarballs of killed runs are removed by
the next run.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from mcpnode.errors import Untrusted
from mcpnode.host import Host
from mcpnode.tuning.errors import ProfileError
from mcpnode.tuning.profile import load_profile, parse_profile
from mcpnode.tuning.sensitive import SENSITIVE, sensitive_reason
from tests.support.tuningcli import run_cli
from tests.support.tuningroot import (
    BASE_PROFILE,
    build,
    get_sysctl,
    set_sysctl,
    tree,
    write_profiles,
)

REPO = Path(__file__).resolve().parents[2]
NOBODY = 65534
CORE = "kernel.core_pattern"
PLANTED = {
    "schema": "mcpnode.tuning-journal/v1",
    "state": "applying",  # "interrupted": apply and rollback would replay it at once
    "profile": "base",
    "entries": [{"key": CORE, "path": "/proc/sys/kernel/core_pattern", "original": "|/tmp/x %p"}],
    "persist": None,
    "modules": [],
}


@pytest.fixture
def root(tuning_root: Path) -> Path:
    r = tuning_root
    set_sysctl(r, CORE, "core")
    return r


def cli(root: Path, *args: str) -> tuple[int, str, str]:
    return run_cli(*args, "--root", str(root))


def plant(directory: Path, *, dir_mode: int = 0o755, owner: int = 0, file_owner: int = 0) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    journal = directory / "tuning-journal.json"
    journal.write_text(json.dumps(PLANTED))
    os.chown(journal, file_owner, file_owner)
    os.chown(directory, owner, owner)
    directory.chmod(dir_mode)
    return journal


@pytest.mark.parametrize(
    ("where", "dir_mode", "owner", "file_owner", "reason"),
    [
        ("state-dir", 0o777, 0, 0, "world-writable"),
        ("state-dir", 0o775, 0, 0, "group-writable"),
        ("state-dir", 0o755, NOBODY, 0, f"owned by uid {NOBODY}"),
        ("state-dir", 0o755, 0, NOBODY, f"owned by uid {NOBODY}"),
        ("root", 0o777, 0, 0, "world-writable"),
        ("root", 0o755, NOBODY, 0, f"owned by uid {NOBODY}"),
    ],
)
def test_a_planted_journal_is_never_replayed(
    root: Path, tmp_path: Path, where: str, dir_mode: int, owner: int, file_owner: int, reason: str
) -> None:
    """The attack: a journal anyone could write, replayed as root by apply and rollback
    (`kernel.core_pattern = |/tmp/x %p`: code execution). Refused, nothing written."""
    directory = tmp_path / "state" if where == "state-dir" else root / "var/lib/mcpnode"
    plant(directory, dir_mode=dir_mode, owner=owner, file_owner=file_owner)
    extra = ("--state-dir", str(directory)) if where == "state-dir" else ()
    before = tree(root)
    for argv in (("apply", "--profile", "base", *extra), ("rollback", *extra)):
        code, _out, err = cli(root, *argv)
        assert code == 2, err
        assert reason in err and err.count("\n") == 1, err
    assert get_sysctl(root, CORE) == "core"
    assert tree(root) == before


def test_a_symlinked_journal_is_refused(root: Path, tmp_path: Path) -> None:
    state = root / "var/lib/mcpnode"
    state.mkdir(parents=True)
    (tmp_path / "elsewhere.json").write_text(json.dumps(PLANTED))
    (state / "tuning-journal.json").symlink_to(tmp_path / "elsewhere.json")
    code, _out, err = cli(root, "rollback")
    assert code == 2 and "symbolic link" in err, err
    assert get_sysctl(root, CORE) == "core"


def test_a_planted_profile_does_not_shadow_the_shipped_one(root: Path, tmp_path: Path) -> None:
    """A nobody-owned base.toml in a 0777 /etc/mcpnode/profiles would silently replace the
    base every other profile includes."""
    profiles = write_profiles(tmp_path / "system")
    local = root / "etc/mcpnode/profiles"
    local.mkdir(parents=True)
    local.chmod(0o777)
    evil = local / "base.toml"
    evil.write_text('[sysctl]\n"vm.swappiness" = 100\n')
    os.chown(evil, NOBODY, NOBODY)
    before = tree(root)
    code, _out, err = cli(root, "apply", "--profile", "latency", "--profiles-dir", str(profiles))
    assert code == 2 and str(evil) in err and f"owned by uid {NOBODY}" in err, err
    assert tree(root) == before
    os.chown(evil, 0, 0)  # root's file, but in a directory anyone can write: still refused
    with pytest.raises(ProfileError, match="world-writable"):
        load_profile("latency", Host(root), profiles)
    local.chmod(0o755)
    evil.chmod(0o664)
    with pytest.raises(ProfileError, match="group-writable"):
        load_profile("latency", Host(root), profiles)
    evil.chmod(0o644)
    assert load_profile("latency", Host(root), profiles).setting("vm.swappiness") is not None


def test_an_untrusted_agent_config_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "mcpnode.toml"
    config.write_text('[tuning]\nprofile = "base"\n')
    os.chown(config, NOBODY, NOBODY)
    code, _out, err = run_cli("config", "check", str(config))
    assert code == 65 and f"owned by uid {NOBODY}" in err, err
    os.chown(config, 0, 0)
    assert run_cli("config", "check", str(config))[0] == 0


def test_an_untrusted_agent_state_is_not_believed(root: Path) -> None:
    from mcpnode.state.agentstate import AGENT_STATE_PATH, AgentState, write_agent_state

    write_agent_state(Host(root), AgentState(1, "evil", "c", "remediate", "t", "t"))
    path = root / AGENT_STATE_PATH.lstrip("/")
    assert json.loads(cli(root, "profiles", "active", "--format", "json")[1])["name"] == "evil"
    os.chown(path, NOBODY, NOBODY)
    assert json.loads(cli(root, "profiles", "active", "--format", "json")[1])["name"] is None


# -- sensitive sysctls ----------------------------------------------------------------------


def test_sensitive_keys_need_an_explicit_allow_list() -> None:
    text = '[sysctl]\n"kernel.core_pattern" = "|/usr/lib/systemd/systemd-coredump %P"\n'
    with pytest.raises(ProfileError) as err:
        parse_profile(text, "site.toml", "site")
    assert err.value.key == CORE and "code execution" in str(err.value)
    assert "allow_sensitive = ['kernel.core_pattern']" in str(err.value)
    allowed = '[profile]\nallow_sensitive = ["kernel.core_pattern"]\n' + text
    assert parse_profile(allowed, "site.toml", "site").settings[0].key == CORE
    unused = '[profile]\nallow_sensitive = ["kernel.sysrq"]\n[sysctl]\n"vm.swappiness" = 10\n'
    with pytest.raises(ProfileError, match="does not set"):
        parse_profile(unused, "site.toml", "site")


def test_an_include_cannot_smuggle_a_sensitive_key(tmp_path: Path, root: Path) -> None:
    """The file that sets the key must allow it: an allow-list in the including file does not
    cover a value in an included one."""
    profiles = write_profiles(
        tmp_path / "p",
        {
            "base": BASE_PROFILE,
            "inner": '[sysctl]\n"kernel.sysrq" = 1\n',
            "outer": '[profile]\ninclude = ["inner"]\n',
        },
    )
    with pytest.raises(ProfileError) as err:
        load_profile("outer", Host(root), profiles)
    assert err.value.file.endswith("inner.toml") and err.value.key == "kernel.sysrq"


@pytest.mark.parametrize("key", sorted(k for k in SENSITIVE if not k.endswith(".")))
def test_every_listed_key_is_refused_without_allow(key: str) -> None:
    with pytest.raises(ProfileError, match="sensitive"):
        parse_profile(f'[sysctl]\n"{key}" = 1\n', "x.toml", "x")


def test_prefixes_cover_their_keys() -> None:
    assert sensitive_reason("fs.binfmt_misc.register") is not None
    assert sensitive_reason("fs.binfmt_misc_x") is None
    assert sensitive_reason("vm.swappiness") is None


def test_shipped_profiles_need_no_sensitive_key() -> None:
    for name in ("base", "inference-latency", "inference-throughput"):
        load_profile(name, Host("/"))


def test_explain_says_why() -> None:
    code, out, _ = run_cli("profiles", "explain", CORE)
    assert code == 0 and "SENSITIVE: a value starting with '|'" in out
    assert 'allow_sensitive = ["kernel.core_pattern"]' in out


# -- modes and owners --------------------------------------------------------------------------


def test_rollback_restores_the_persisted_files_mode_and_owner(root: Path) -> None:
    persisted = root / "etc/sysctl.d/90-mcpnode.conf"
    persisted.write_text("# a site's own file of this name\nvm.swappiness = 30\n")
    os.chown(persisted, 1234, 5678)
    persisted.chmod(0o600)
    assert cli(root, "apply", "--profile", "base", "--persist")[0] == 0
    st = persisted.stat()
    assert (stat.S_IMODE(st.st_mode), st.st_uid) == (0o644, 0)  # mcpnode's file meanwhile
    assert cli(root, "rollback")[0] == 0
    st = persisted.stat()
    assert persisted.read_text() == "# a site's own file of this name\nvm.swappiness = 30\n"
    assert (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid) == (0o600, 1234, 5678)


@pytest.mark.parametrize("umask", [0o077, 0o000])
def test_modes_do_not_depend_on_the_umask(
    tuning_root: Path, tuning_profiles: Path, umask: int
) -> None:
    root = tuning_root
    profiles = tuning_profiles
    argv = ["--root", str(root), "--profiles-dir", str(profiles)]

    def mcpnode(*args: str) -> None:
        proc = subprocess.run(
            [sys.executable, "-m", "mcpnode", *args],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=False,
            preexec_fn=lambda: os.umask(umask),
        )
        assert proc.returncode == 0, proc.stderr

    mcpnode("apply", "--profile", "base", "--persist", *argv)
    mcpnode("manifest", "publish", "--root", str(root))

    def mode(rel: str) -> int:
        return stat.S_IMODE((root / rel).stat().st_mode)

    assert mode("var/lib/mcpnode") == 0o755
    assert mode("var/lib/mcpnode/tuning-journal.json") == 0o600
    assert mode("var/lib/mcpnode/mcpnode.lock") == 0o600
    assert mode("etc/sysctl.d/90-mcpnode.conf") == 0o644
    assert mode("run/mcpnode") == 0o755
    assert mode("run/mcpnode/manifest.json") == 0o644


# -- what killed runs leave ------------------------------------------------------------------


def dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_stale_temp_files_of_killed_writers_are_removed(root: Path) -> None:
    state = root / "var/lib/mcpnode"
    state.mkdir(parents=True)
    # A writer killed between creating its temp file and renaming it (a real process: a child
    # that creates it the way write_file_atomic names it, then SIGKILLs itself).
    pid = os.fork()
    if pid == 0:
        (state / f".tuning-journal.json.{os.getpid()}.deadbeef.tmp").write_text("half")
        os.kill(os.getpid(), signal.SIGKILL)
    os.waitpid(pid, 0)
    stale = state / f".tuning-journal.json.{pid}.deadbeef.tmp"
    live = state / f".tuning-journal.json.{os.getpid()}.cafebabe.tmp"  # a writer still running
    other = state / f".other.json.{dead_pid()}.01234567.tmp"  # another file's: not ours to judge
    live.write_text("in progress")
    other.write_text("x")
    assert stale.exists()
    assert cli(root, "apply", "--profile", "base")[0] == 0
    assert not stale.exists() and live.exists() and other.exists()


@pytest.mark.parametrize("command", [("rollback",), ("apply", "--profile", "base")])
def test_a_killed_writers_temporaries_are_removed_when_a_run_starts(
    root: Path, command: tuple[str, ...]
) -> None:
    """A crash between create and rename leaves `.90-mcpnode.conf.PID.RAND.tmp` in
    /etc/sysctl.d (and beside irqbalance's file): the next apply or rollback removes it at
    start, though it does not write that file. Only regular files of exactly that pattern whose
    writer is gone; a link named like one is not followed nor removed."""
    sysctl_d, default = root / "etc/sysctl.d", root / "etc/default"
    sysctl_d.mkdir(parents=True, exist_ok=True)
    default.mkdir(parents=True, exist_ok=True)
    dead, alive = dead_pid(), os.getpid()
    stale = [
        sysctl_d / f".90-mcpnode.conf.{dead}.deadbeef.tmp",
        default / f".irqbalance.{dead}.0123abcd.tmp",
    ]
    for path in stale:
        path.write_text("half")
    target = root / "etc/keep.conf"
    target.write_text("kept\n")
    kept = [
        sysctl_d / f".90-mcpnode.conf.{alive}.cafebabe.tmp",  # a writer still running
        sysctl_d / f".90-mcpnode.conf.{dead}.deadbee.tmp",  # 7 hex digits: not our name
        sysctl_d / f".90-mcpnode.conf.0{dead}.deadbeef.tmp",  # a pid is never 0-padded
        sysctl_d / f".99-site.conf.{dead}.deadbeef.tmp",  # another file's
        sysctl_d / f".90-mcpnode.conf.{dead}.deadbeef.tmp.bak",
    ]
    for path in kept:
        path.write_text("x")
    link = sysctl_d / f".90-mcpnode.conf.{dead}.0badf00d.tmp"
    link.symlink_to("../keep.conf")
    directory = sysctl_d / f".90-mcpnode.conf.{dead}.00000000.tmp"
    directory.mkdir()
    code, _, err = cli(root, *command)
    assert code == 0, err
    assert not any(p.exists() for p in stale)
    assert all(p.exists() for p in kept)
    assert link.is_symlink() and target.read_text() == "kept\n"
    assert directory.is_dir()


def test_a_killed_runs_unpacked_tarball_is_removed(tmp_path: Path) -> None:
    base = Path(tempfile.gettempdir())
    stale = base / f"mcpnode-root-{dead_pid()}-abcdefgh"
    (stale / "sys").mkdir(parents=True)
    alive = Path(tempfile.mkdtemp(prefix=f"mcpnode-root-{os.getpid()}-"))
    src = build(tmp_path / "src")
    tarball = tmp_path / "snap.tar.gz"
    with tarfile.open(tarball, "w:gz") as tf:
        tf.add(src, arcname="snap")
    try:
        with Host(tarball):
            assert not stale.exists()
            assert alive.exists()
    finally:
        alive.rmdir()


@pytest.mark.parametrize(
    "name",
    [
        "mcpnode-root-123-abc",
        "mcpnode-root-1-",
        "mcpnode-root-1234567890-x",
        "mcpnode-root-12345678901-x",  # 11 digits: not a pid this wrote
        "mcpnode-root--x",
        "mcpnode-root-12",
        "mcpnode-root-12x-",
        "mcpnode-root-\u0661\u0662-x",  # Arabic-Indic digits: [0-9] refuses them
        "mcpnode-root-\u00b2-x",  # superscript two: isdigit() alone takes it
        "mcpnode-root-+1-x",
        "mcpnode-root-1_0-x",
        "xmcpnode-root-1-",
        "mcpnode-root-007-x",
    ],
)
def test_unpacked_copy_names_as_the_pattern_read_them(name: str) -> None:
    import re

    from mcpnode.host.tarball import _unpack_pid

    m = re.match(r"mcpnode-root-(?P<pid>[0-9]{1,10})-", name)
    assert _unpack_pid(name) == (None if m is None else int(m.group("pid")))


def test_read_trusted_refuses_what_others_control(tmp_path: Path) -> None:
    d = tmp_path / "d"
    d.mkdir()
    f = d / "f"
    f.write_text("x")
    host = Host(tmp_path)
    assert host.read_trusted("/d/f", 10) == b"x"
    changes: tuple[tuple[Callable[[], None], str], ...] = (
        (lambda: f.chmod(0o646), "world-writable"),
        (lambda: f.chmod(0o664), "group-writable"),
        (lambda: os.chown(f, NOBODY, 0), f"owned by uid {NOBODY}"),
        (lambda: d.chmod(0o757), f"directory {d} is world-writable"),
    )
    for change, reason in changes:
        f.chmod(0o644)
        os.chown(f, 0, 0)
        d.chmod(0o755)
        change()
        with pytest.raises(Untrusted, match=reason):
            host.read_trusted("/d/f", 10)
    d.chmod(0o1777)  # sticky, like /tmp: the entry's own owner is what counts
    f.chmod(0o644)
    os.chown(f, 0, 0)
    assert host.read_trusted("/d/f", 10) == b"x"
