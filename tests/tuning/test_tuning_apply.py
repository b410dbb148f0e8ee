"""apply / verify / rollback against a fake root whose proc/sys is a plain directory tree."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from mcpnode.host import Host
from mcpnode.state.places import JOURNAL_PATH
from mcpnode.tuning import paths
from mcpnode.tuning.apply import apply_profile, recover, rollback
from mcpnode.tuning.errors import ApplyFailed, JournalError
from mcpnode.tuning.journal import Journal, JournalEntry, JournalStore, to_json
from mcpnode.tuning.profile import Profile, load_profile
from mcpnode.tuning.verify import verify
from tests.support.tuningcli import run_cli
from tests.support.tuningroot import (
    build,
    get_sysctl,
    kernel_view,
    put,
    set_sysctl,
    sysctl_file,
    tree,
    write_profiles,
)


class Env:
    def __init__(self, tmp: Path) -> None:
        self.root = build(tmp / "root")
        self.profiles = write_profiles(tmp / "profiles")
        self.host = Host(self.root)
        self.store = JournalStore(self.host)

    def profile(self, name: str = "latency") -> Profile:
        return load_profile(name, self.host, self.profiles)

    def journal(self) -> dict[str, Any]:
        data = json.loads((self.root / JOURNAL_PATH.lstrip("/")).read_text())
        assert isinstance(data, dict)
        return data

    def journal_exists(self) -> bool:
        return (self.root / JOURNAL_PATH.lstrip("/")).exists()

    def cli(self, *args: str) -> tuple[int, str, str]:
        return run_cli(*args, "--root", str(self.root), *self._dirs(args))

    def _dirs(self, args: tuple[str, ...]) -> tuple[str, ...]:
        return () if args[0] == "rollback" else ("--profiles-dir", str(self.profiles))


@pytest.fixture
def env(tmp_path: Path) -> Env:
    return Env(tmp_path)


def test_apply_verify_rollback_round_trip(env: Env) -> None:
    original = kernel_view(env.root)
    result = apply_profile(env.host, env.profile(), env.store, persist=True)
    assert [o.key for o in result.writes] == [i.key for i in result.plan.writes]
    assert get_sysctl(env.root, "net.core.somaxconn") == "8192"
    assert get_sysctl(env.root, "vm.max_map_count") == "1048576"
    assert get_sysctl(env.root, "net.ipv4.tcp_rmem") == "4096 131072 16777216"
    assert (env.root / "sys/kernel/mm/transparent_hugepage/enabled").read_text() == "never\n"
    conf = (env.root / "etc/sysctl.d/90-mcpnode.conf").read_text()
    assert "# profile: latency (merged: base -> latency)" in conf
    assert "net.core.somaxconn = 8192" in conf
    assert env.journal()["state"] == "applied"

    report = verify(env.host, env.profile())
    assert report.ok and report.drift == ()

    rolled = rollback(env.host, env.store)
    assert rolled.profile == "latency"
    assert [o.key for o in rolled.outcomes][:3] == [
        "cpu:governor:policy1",
        "cpu:governor:policy0",
        "vm:transparent_hugepage",
    ]  # reverse order of the writes
    assert kernel_view(env.root) == original | {
        # directories mcpnode created stay (empty): var/lib/mcpnode
        k: v
        for k, v in kernel_view(env.root).items()
        if k.startswith("var")
    }
    assert not env.journal_exists()
    assert not (env.root / "etc/sysctl.d/90-mcpnode.conf").exists()


def test_journal_is_written_before_the_first_write(env: Env) -> None:
    order: list[str] = []

    class Watched(Host):
        def write_text(self, logical: str, text: str) -> None:
            order.append(logical)
            super().write_text(logical, text)

        def write_file_atomic(
            self,
            logical: str,
            data: bytes,
            mode: int = 0o644,
            owner: tuple[int, int] | None = None,
        ) -> None:
            if logical == JOURNAL_PATH and JOURNAL_PATH not in order:
                journal = json.loads(data)
                assert journal["state"] == "applying"
                planned = {i.path for i in apply_plan.writes}
                assert {e["path"] for e in journal["entries"]} == planned
            order.append(logical)
            super().write_file_atomic(logical, data, mode, owner)

    host = Watched(env.root)
    from mcpnode.tuning.plan import plan
    from mcpnode.tuning.state import read_state

    apply_plan = plan(env.profile(), read_state(host, env.profile()))
    apply_profile(host, env.profile(), JournalStore(host), persist=True)
    assert order[0] == JOURNAL_PATH
    assert order[-2:] == [paths.PERSIST_PATH, JOURNAL_PATH]
    assert all(p.startswith(("/proc/sys/", "/sys/")) for p in order[1:-2])


def test_nothing_to_do_writes_nothing(env: Env) -> None:
    apply_profile(env.host, env.profile("base"), env.store)
    before = tree(env.root)
    result = apply_profile(env.host, env.profile("base"), env.store)
    assert result.writes == ()
    assert tree(env.root) == before


def test_first_original_is_kept_across_applies(env: Env) -> None:
    apply_profile(env.host, env.profile("base"), env.store)
    set_sysctl(env.root, "net.core.somaxconn", "7777")  # someone else changed it meanwhile
    apply_profile(env.host, env.profile("latency"), env.store)
    entries = {e["key"]: e["original"] for e in env.journal()["entries"]}
    assert entries["net.core.somaxconn"] == "4096"
    assert entries["net.ipv4.tcp_rmem"] == "4096 131072 6291456"
    rollback(env.host, env.store)
    assert get_sysctl(env.root, "net.core.somaxconn") == "4096"


def test_switching_profile_restores_what_the_new_one_does_not_set(env: Env) -> None:
    apply_profile(env.host, env.profile("latency"), env.store)
    result = apply_profile(env.host, env.profile("base"), env.store)
    restored = {i.key for i in result.restores if i.action == "set"}
    assert "net.ipv4.tcp_rmem" in restored and "kernel.numa_balancing" in restored
    assert get_sysctl(env.root, "net.ipv4.tcp_rmem") == "4096 131072 6291456"
    assert get_sysctl(env.root, "net.core.somaxconn") == "65535"
    keys = [e["key"] for e in env.journal()["entries"]]
    assert keys == ["vm.swappiness", "vm.max_map_count", "net.core.somaxconn"]


def test_at_least_never_lowers(env: Env) -> None:
    set_sysctl(env.root, "vm.max_map_count", "2147483642")
    result = apply_profile(env.host, env.profile("base"), env.store)
    item = next(i for i in result.plan.items if i.key == "vm.max_map_count")
    assert item.action == "ok"
    assert get_sysctl(env.root, "vm.max_map_count") == "2147483642"


def test_unknown_key_is_reported_not_written(env: Env) -> None:
    (env.profiles / "uring.toml").write_text('[sysctl]\n"kernel.io_uring_enable" = 1\n')
    before = tree(env.root)
    result = apply_profile(env.host, env.profile("uring"), env.store)
    (item,) = result.plan.items
    assert item.action == "unsupported" and "io_uring_enable" in item.reason
    # Nothing written but the journal, which records that "uring" is applied (no entries).
    after = tree(env.root)
    journal = json.loads(after.pop("var/lib/mcpnode/tuning-journal.json")[1])
    assert (journal["entries"], journal["applied"]["profile"]) == ([], "uring")
    assert {k: v for k, v in after.items() if not k.startswith("var")} == before
    code, out, _ = env.cli("verify", "--profile", "uring")
    # No key of it exists here: nothing could be checked, so compliance is unknown (exit 3).
    assert code == 3 and "not present: kernel.io_uring_enable (no /proc/sys/" in out
    assert f"in the root {env.root}" in out  # the root lacks it, not a kernel
    assert "UNKNOWN" in out


def test_verify_reports_drift_and_exits_1(env: Env) -> None:
    apply_profile(env.host, env.profile(), env.store)
    set_sysctl(env.root, "net.core.somaxconn", "128")
    set_sysctl(env.root, "vm.max_map_count", "5000000")  # higher than the minimum: fine
    report = verify(env.host, env.profile())
    assert [(d.key, d.expected, d.actual) for d in report.drift] == [
        ("net.core.somaxconn", "8192", "128")
    ]
    code, out, _ = env.cli("verify", "--profile", "latency")
    assert code == 1 and "net.core.somaxconn" in out and "1 of" in out
    code, out, _ = env.cli("verify", "--profile", "latency", "--format", "json")
    doc = json.loads(out)
    assert code == 1 and doc["schema"] == "mcpnode.tuning-verify/v1"
    assert doc["drift"] == [
        {
            "key": "net.core.somaxconn",
            "expected": "8192",
            "wanted": "8192",
            "actual": "128",
            "reason": "128 -> 8192",
        }
    ]


def test_dry_run_changes_nothing(env: Env) -> None:
    before = tree(env.root)
    code, out, _ = env.cli("apply", "--profile", "latency", "--dry-run", "--persist")
    assert code == 0
    assert out.startswith("plan: profile latency")
    assert "would write" in out and "net.core.somaxconn = 8192" in out
    assert tree(env.root) == before
    code, out, _ = env.cli("apply", "--profile", "latency", "--dry-run", "--format", "json")
    doc = json.loads(out)
    assert doc["schema"] == "mcpnode.tuning-apply/v1" and doc["dry_run"] is True
    assert doc["writes"] == []
    assert {i["action"] for i in doc["items"]} <= {"set", "ok", "skipped", "unsupported"}
    assert tree(env.root) == before


def test_every_write_logs_key_old_new_result(env: Env) -> None:
    with capture_logs() as logs:
        result = apply_profile(env.host, env.profile(), env.store)
    writes = [e for e in logs if e["event"] == "write"]
    assert len(writes) == len(result.writes)
    first = writes[0]
    assert {k: first[k] for k in ("key", "old", "new", "result")} == {
        "key": "vm.swappiness",
        "old": "60",
        "new": "10",
        "result": "ok",
    }
    with capture_logs() as logs:
        rollback(env.host, env.store)
    assert all({"key", "old", "new", "result"} <= set(e) for e in logs if e["event"] == "restore")


def test_cli_logs_json_lines_to_stderr(env: Env) -> None:
    code, out, err = env.cli("apply", "--profile", "base")
    assert code == 0 and out.startswith("applied: profile base")
    lines = [json.loads(line) for line in err.splitlines()]
    assert [line["key"] for line in lines] == [
        "vm.swappiness",
        "vm.max_map_count",
        "net.core.somaxconn",
    ]
    assert all(line["event"] == "write" and line["result"] == "ok" for line in lines)


# -- failures ---------------------------------------------------------------------------------


def _unwritable(root: Path, key: str) -> None:
    """Make `key` readable but not writable: its file becomes a symlink (to a real file under
    proc/sys). Reads resolve it inside the root; writes refuse a symlink (O_NOFOLLOW: ELOOP)."""
    path = sysctl_file(root, key)
    target = path.with_name(path.name + "_target")
    path.rename(target)
    path.symlink_to(target.name)


def test_failed_write_undoes_earlier_writes_in_reverse(env: Env) -> None:
    _unwritable(env.root, "net.ipv4.tcp_notsent_lowat")  # opening it for writing: ELOOP
    before = kernel_view(env.root)
    with capture_logs() as logs, pytest.raises(ApplyFailed) as err:
        apply_profile(env.host, env.profile(), env.store)
    failure = err.value.failure
    assert failure.key == "net.ipv4.tcp_notsent_lowat" and failure.result == "failed"
    assert [u.key for u in err.value.undone] == [
        "net.ipv4.tcp_rmem",
        "net.core.somaxconn",
        "vm.max_map_count",
        "vm.swappiness",
    ]
    assert all(u.result == "restored" for u in err.value.undone)
    message = str(err.value)
    assert "net.ipv4.tcp_notsent_lowat" in message and "rolled back 4 earlier" in message
    assert kernel_view(env.root) == before | {
        k: v for k, v in kernel_view(env.root).items() if k.startswith("var")
    }
    assert not env.journal_exists()
    assert [e["event"] for e in logs].count("undo") == 4


def test_failed_write_puts_the_previous_journal_back(env: Env) -> None:
    apply_profile(env.host, env.profile("base"), env.store)
    journal_before = env.journal()
    _unwritable(env.root, "kernel.numa_balancing")
    with pytest.raises(ApplyFailed):
        apply_profile(env.host, env.profile(), env.store)
    assert env.journal() == journal_before
    assert get_sysctl(env.root, "net.core.somaxconn") == "65535"  # base's value, as before


def test_symlinked_sysctl_is_never_written_through(env: Env) -> None:
    target = sysctl_file(env.root, "net.core.rmem_max")
    link = sysctl_file(env.root, "net.core.somaxconn")
    link.unlink()
    link.symlink_to(target.name)  # inside proc/sys: readable, but never written through
    with pytest.raises(ApplyFailed, match=r"net\.core\.somaxconn"):
        apply_profile(env.host, env.profile("base"), env.store)
    assert target.read_text() == "212992\n"


def test_sysctl_resolving_outside_proc_sys_is_skipped(env: Env) -> None:
    put(env.root, "etc/secret", "1\n")
    link = sysctl_file(env.root, "vm.swappiness")
    link.unlink()
    link.symlink_to("../../../etc/secret")
    result = apply_profile(env.host, env.profile("base"), env.store)
    item = next(i for i in result.plan.items if i.key == "vm.swappiness")
    assert item.action == "skipped" and "outside /proc/sys" in item.reason
    assert (env.root / "etc/secret").read_text() == "1\n"


@pytest.mark.parametrize(
    "garbage",
    [
        b"not json",
        b"",
        b'{"schema": "something-else"}',
        b"\xff\xfe",
        json.dumps(
            {
                "schema": "mcpnode.tuning-journal/v1",
                "state": "applied",
                "profile": "base",
                "entries": [{"key": "vm.swappiness", "path": "/etc/passwd", "original": "x"}],
                "persist": None,
                "modules": [],
            }
        ).encode(),
    ],
    ids=["text", "empty", "schema", "binary", "foreign-path"],
)
def test_untrusted_journal_stops_apply_and_rollback(env: Env, garbage: bytes) -> None:
    put(env.root, JOURNAL_PATH.lstrip("/"), "")
    (env.root / JOURNAL_PATH.lstrip("/")).write_bytes(garbage)
    before = tree(env.root)
    with pytest.raises(JournalError):
        apply_profile(env.host, env.profile(), env.store)
    with pytest.raises(JournalError):
        rollback(env.host, env.store)
    code, _, err = env.cli("apply", "--profile", "latency")
    assert code == 2 and "JournalError" in err and "refusing to continue" in err
    code, _, err = env.cli("rollback")
    assert code == 2 and "JournalError" in err
    assert tree(env.root) == before


def test_journal_that_cannot_be_read_is_an_error(env: Env) -> None:
    (env.root / JOURNAL_PATH.lstrip("/")).mkdir(parents=True)
    with pytest.raises(JournalError, match="cannot be used: is a directory"):
        apply_profile(env.host, env.profile(), env.store)


def test_interrupted_run_is_recovered_before_applying(env: Env) -> None:
    # As a crash leaves it: originals journaled, some values already written.
    interrupted = Journal(
        "applying",
        "base",
        (
            JournalEntry("vm.swappiness", "/proc/sys/vm/swappiness", "60"),
            JournalEntry("net.core.somaxconn", "/proc/sys/net/core/somaxconn", "4096"),
        ),
    )
    put(env.root, JOURNAL_PATH.lstrip("/"), to_json(interrupted))
    set_sysctl(env.root, "vm.swappiness", "10")
    result = apply_profile(env.host, env.profile("latency"), env.store)
    assert {o.key: o.result for o in result.recovered} == {
        "net.core.somaxconn": "unchanged",
        "vm.swappiness": "restored",
    }
    assert env.journal()["state"] == "applied"
    originals = {e["key"]: e["original"] for e in env.journal()["entries"]}
    assert originals["vm.swappiness"] == "60"
    rollback(env.host, env.store)
    assert get_sysctl(env.root, "vm.swappiness") == "60"


def test_recover_is_a_no_op_after_a_complete_apply(env: Env) -> None:
    apply_profile(env.host, env.profile(), env.store)
    assert recover(env.host, env.store) == ()
    assert env.journal()["state"] == "applied"


def test_rollback_without_journal(env: Env) -> None:
    code, out, _ = env.cli("rollback")
    assert code == 0 and out.startswith("nothing to roll back")


def test_persist_restores_a_file_that_was_there_before(env: Env) -> None:
    put(env.root, "etc/sysctl.d/90-mcpnode.conf", "# hand-written\nvm.swappiness = 1\n")
    apply_profile(env.host, env.profile("base"), env.store, persist=True)
    assert "Generated by mcpnode" in (env.root / "etc/sysctl.d/90-mcpnode.conf").read_text()
    rollback(env.host, env.store)
    assert (env.root / "etc/sysctl.d/90-mcpnode.conf").read_text() == (
        "# hand-written\nvm.swappiness = 1\n"
    )


def test_state_dir_keeps_the_journal_outside_the_root(env: Env, tmp_path: Path) -> None:
    state = tmp_path / "state"
    code, _, _ = env.cli("apply", "--profile", "base", "--state-dir", str(state))
    assert code == 0 and (state / "tuning-journal.json").exists()
    assert not env.journal_exists()
    code, _, _ = run_cli("rollback", "--root", str(env.root), "--state-dir", str(state))
    assert code == 0 and get_sysctl(env.root, "net.core.somaxconn") == "4096"
