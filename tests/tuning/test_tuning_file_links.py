"""Whole files mcpnode replaces (irqbalance's environment file, the GRUB drop-in, the persisted
sysctl.d file) keep the type, mode and owner they had, on apply, rollback and a failed apply,
with real symlinks, modes and owners in temporary roots (the GRUB drop-in on the live root in a
throwaway mount namespace, tests/support/bootchild.py):

- a regular file keeps its mode and owner through apply and comes back exactly on rollback and
  after a failed apply; a group- or world-writable one is never written back writable;
- a symbolic link (to a file, outside the root, dangling, to a directory) is neither written
  through nor replaced: apply stops before the journal and the first write, in one line that
  says so, and the link and whatever it points to stay as they were.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from tests.support import irqroot
from tests.support.tuningcli import run_cli
from tests.support.tuningroot import BASE_PROFILE, build, put, write_profiles
from tests.tuning.test_bootloader import in_namespace, needs_ns

PROFILE = "inference-throughput"
JOURNAL = "var/lib/mcpnode/tuning-journal.json"
SITE = "# site settings\nIRQBALANCE_ARGS=--hintpolicy=exact\n"
ENV_FILES = {"debian": "etc/default/irqbalance", "redhat": "etc/sysconfig/irqbalance"}
NO_ENV_FILE = "/etc/default/irqbalance or /etc/sysconfig/irqbalance"
# Included profile first: its [irq] items are written before this file's sysctl, which fails.
FAILING = """\
[profile]
name = "failing"
summary = "irq placement, then a sysctl whose write fails"
include = ["inference-throughput"]

[sysctl]
"vm.stat_interval" = 10
"""


def describe(path: Path) -> dict[str, Any] | None:
    """Type, mode, owner and text (or link target) of `path` itself; None when absent."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode):
        return {"type": "symlink", "target": os.readlink(path)}
    doc: dict[str, Any] = {
        "type": "regular" if stat.S_ISREG(st.st_mode) else "other",
        "mode": stat.S_IMODE(st.st_mode),
        "uid": st.st_uid,
        "gid": st.st_gid,
    }
    if stat.S_ISREG(st.st_mode):
        doc["text"] = path.read_text()
    return doc


def irq_root(tmp_path: Path, layout: str) -> Path:
    root = irqroot.build(tmp_path / "root", irqbalance=layout).root
    (root / "etc/mcpnode/profiles").mkdir(parents=True, exist_ok=True)
    (root / "etc/mcpnode/profiles/failing.toml").write_text(FAILING)
    # vm.stat_interval reads in-root but its write fails (a symlink: O_NOFOLLOW, ELOOP).
    put(root, "proc/sys/vm/stat_interval_real", "1\n")
    (root / "proc/sys/vm/stat_interval").symlink_to("stat_interval_real")
    assert run_cli("manifest", "publish", "--root", str(root))[0] == 0
    return root


def env_file(root: Path, layout: str, *, mode: int, owner: tuple[int, int] = (0, 0)) -> Path:
    path = root / ENV_FILES[layout]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(SITE)
    os.chown(path, *owner)
    path.chmod(mode)
    return path


# -- irqbalance's environment file, Debian and Red Hat layouts ----------------------------------


@pytest.mark.parametrize("layout", ["debian", "redhat"])
def test_irqbalance_file_keeps_mode_and_owner_and_rollback_restores_them(
    tmp_path: Path, layout: str
) -> None:
    root = irq_root(tmp_path, layout)
    path = env_file(root, layout, mode=0o640, owner=(1234, 5678))
    before = describe(path)
    assert run_cli("apply", "--profile", PROFILE, "--root", str(root))[0] == 0
    after = describe(path)
    assert after is not None and "IRQBALANCE_BANNED_CPULIST=" in after["text"]
    assert (after["type"], after["mode"], after["uid"], after["gid"]) == (
        "regular",
        0o640,
        1234,
        5678,
    )
    code, _, err = run_cli("rollback", "--root", str(root))
    assert code == 0, err
    assert describe(path) == before


@pytest.mark.parametrize("layout", ["debian", "redhat"])
def test_a_world_writable_irqbalance_file_is_never_written_writable(
    tmp_path: Path, layout: str
) -> None:
    root = irq_root(tmp_path, layout)
    path = env_file(root, layout, mode=0o666)
    assert run_cli("apply", "--profile", PROFILE, "--root", str(root))[0] == 0
    assert describe(path) is not None and describe(path)["mode"] == 0o644  # type: ignore[index]
    assert run_cli("rollback", "--root", str(root))[0] == 0
    assert describe(path) == {"type": "regular", "mode": 0o644, "uid": 0, "gid": 0, "text": SITE}


@pytest.mark.parametrize("layout", ["debian", "redhat"])
def test_a_failed_apply_puts_the_irqbalance_file_back_exactly(tmp_path: Path, layout: str) -> None:
    root = irq_root(tmp_path, layout)
    path = env_file(root, layout, mode=0o600, owner=(1234, 5678))
    before = describe(path)
    code, _, err = run_cli("apply", "--profile", "failing", "--root", str(root))
    assert code == 2 and "vm.stat_interval" in err, err
    assert f"irqbalance:{layout} = " in err  # it was written, then undone
    assert describe(path) == before
    assert not (root / JOURNAL).exists()


def _link_cases(root: Path, tmp_path: Path) -> dict[str, tuple[str, Path | None]]:
    """name -> (link target as stored, what it points to that must not change)."""
    inside = put(root, "etc/irqbalance.site", SITE, 0o644)
    outside = put(tmp_path, "outside/irqbalance", SITE, 0o600)
    (root / "etc/irqbalance.d").mkdir()
    return {
        "in-root": ("/etc/irqbalance.site", inside),
        "relative": ("../irqbalance.site", inside),
        "outside-root": (str(outside), outside),
        "climbing": ("../../../../../../../../" + str(outside).lstrip("/"), outside),
        "dangling": ("/etc/nowhere", None),
        "directory": ("/etc/irqbalance.d", root / "etc/irqbalance.d"),
    }


@pytest.mark.parametrize("layout", ["debian", "redhat"])
@pytest.mark.parametrize(
    "case", ["in-root", "relative", "outside-root", "climbing", "dangling", "directory"]
)
@pytest.mark.parametrize("profile", [PROFILE, "failing"])
def test_a_symlinked_irqbalance_file_is_never_written_through_or_replaced(
    tmp_path: Path, layout: str, case: str, profile: str
) -> None:
    root = irq_root(tmp_path, layout)
    stored, pointed = _link_cases(root, tmp_path)[case]
    path = root / ENV_FILES[layout]
    path.unlink()  # the package's regular file, replaced by the site's link
    path.symlink_to(stored)
    target_before = describe(pointed) if pointed is not None else None
    code, out, err = run_cli("apply", "--profile", profile, "--root", str(root))
    if case in ("in-root", "relative"):
        # Read through the link in-root, planned, then refused before the journal and the first
        # write, in one line naming the file and the link.
        assert code == 2, out + err
        assert [line for line in err.splitlines() if line.startswith("mcpnode: /")] == [
            f"mcpnode: /{ENV_FILES[layout]}: is a symbolic link (to {stored}): mcpnode replaces "
            "this file only when it is a regular file or absent; make it a regular file (or "
            "leave this setting out) and apply again"
        ]
        assert not (root / JOURNAL).exists()
    else:
        # Nothing readable there (links resolve inside the root: the file outside is never
        # reached): not planned, or skipped saying why; the file is not written either way.
        dry = run_cli(
            "apply", "--profile", PROFILE, "--root", str(root), "--dry-run", "--format", "json"
        )[1]
        (item,) = [i for i in json.loads(dry)["items"] if "irqbalance" in i["key"]]
        assert (item["action"], item["reason"]) in (
            ("unsupported", f"irqbalance is not installed here (no {NO_ENV_FILE})"),
            ("skipped", f"cannot read /{ENV_FILES[layout]}: is a directory, not a regular file"),
        ), item
    assert describe(path) == {"type": "symlink", "target": stored}
    if pointed is not None:
        assert describe(pointed) == target_before
    assert run_cli("rollback", "--root", str(root))[0] == 0
    assert describe(path) == {"type": "symlink", "target": stored}
    if pointed is not None:
        assert describe(pointed) == target_before


# -- the GRUB drop-in, on the live root in a mount namespace -------------------------------------


SITE_DROPIN = 'GRUB_CMDLINE_LINUX="$GRUB_CMDLINE_LINUX site=1"\n'
REGULAR = {"type": "regular", "mode": 0o640, "uid": 1234, "gid": 5678, "text": SITE_DROPIN}


@needs_ns
def test_grub_dropin_keeps_mode_and_owner_and_rollback_restores_them(tmp_path: Path) -> None:
    got = in_namespace("grub", tmp_path, dropin="regular")
    files = got["files"]
    assert files["before"] == REGULAR
    assert got["apply"]["rc"] == 0, got["apply"]["err"]
    assert {k: files["apply"][k] for k in ("type", "mode", "uid", "gid")} == {
        "type": "regular", "mode": 0o640, "uid": 1234, "gid": 5678
    }  # fmt: skip
    assert "iommu=pt hugepages=64" in files["apply"]["text"]
    assert got["rollback"]["rc"] == 0, got["rollback"]["err"]
    assert files["rollback"] == REGULAR


@needs_ns
def test_a_loose_grub_dropin_is_never_written_writable(tmp_path: Path) -> None:
    got = in_namespace("grub", tmp_path, dropin="loose")
    files = got["files"]
    assert got["apply"]["rc"] == 0, got["apply"]["err"]
    assert files["apply"]["mode"] == 0o644
    assert files["rollback"] == {**REGULAR, "mode": 0o644}


@needs_ns
@pytest.mark.parametrize("dropin", ["regular", "loose", "absent"])
def test_a_failed_update_grub_puts_the_dropin_back_exactly(tmp_path: Path, dropin: str) -> None:
    got = in_namespace("grub", tmp_path, dropin=dropin, fail=True)
    files = got["files"]
    assert got["apply"]["rc"] == 2, got["apply"]
    assert "the host is unchanged" in got["apply"]["err"]
    # As it was; a world-writable one comes back 0644 (mcpnode never writes one writable).
    expected = {**files["before"], "mode": 0o644} if dropin == "loose" else files["before"]
    assert files["apply"] == expected
    assert got["journal_after_apply"] is False


@needs_ns
@pytest.mark.parametrize("dropin", ["symlink", "dangling", "dir"])
@pytest.mark.parametrize("fail", [False, True])
def test_a_symlinked_grub_dropin_is_refused_before_any_write(
    tmp_path: Path, dropin: str, fail: bool
) -> None:
    got = in_namespace("grub", tmp_path, dropin=dropin, fail=fail)
    files = got["files"]
    assert files["before"]["type"] == "symlink"
    assert files["apply"] == files["before"] and files["rollback"] == files["before"]
    assert files["real"] == files["real_after_rollback"]
    if dropin == "symlink":
        assert files["real"] == {"type": "regular", "mode": 0o644, "uid": 0, "gid": 0,
                                 "text": SITE_DROPIN}  # fmt: skip
    if dropin == "dir":
        # A link to a directory cannot be read as the drop-in: the item is skipped, saying why.
        assert got["apply"]["rc"] == 0, got["apply"]
        assert "skipped  /etc/default/grub.d/90-mcpnode.cfg: is a directory" in got["apply"]["out"]
    else:
        assert got["journal_after_apply"] is False
        assert got["apply"]["rc"] == 2
        err = got["apply"]["err"]
        assert "/etc/default/grub.d/90-mcpnode.cfg: is a symbolic link (to /etc/default/" in err
        assert "the host is unchanged" not in err  # nothing was written: no undo to report
    # The generator never ran: the refusal comes before the first write.
    assert [c for c in got["calls"] if not c.endswith("--version")] == []


# -- the persisted sysctl.d file -----------------------------------------------------------------

PERSISTED = "etc/sysctl.d/90-mcpnode.conf"
SITE_CONF = "# a site's own file of this name\nvm.swappiness = 30\n"


def persist_root(tmp_path: Path) -> tuple[Path, Path]:
    root = build(tmp_path / "root")
    profiles = write_profiles(tmp_path / "profiles", {"base": BASE_PROFILE})
    return root, profiles


def cli(root: Path, profiles: Path, *args: str) -> tuple[int, str, str]:
    extra = ("--profiles-dir", str(profiles)) if args[0] == "apply" else ()
    return run_cli(*args, "--root", str(root), *extra)


def test_a_symlinked_persisted_file_is_refused(tmp_path: Path) -> None:
    root, profiles = persist_root(tmp_path)
    real = put(root, "etc/sysctl.site.conf", SITE_CONF, 0o600)
    link = root / PERSISTED
    link.symlink_to("../sysctl.site.conf")
    before = describe(real)
    code, out, err = cli(root, profiles, "apply", "--profile", "base", "--persist")
    assert (code, out) == (2, "")
    assert err.splitlines() == [
        "mcpnode: /etc/sysctl.d/90-mcpnode.conf: is a symbolic link (to ../sysctl.site.conf): "
        "mcpnode replaces this file only when it is a regular file or absent; make it a regular "
        "file (or leave this setting out) and apply again"
    ]
    assert describe(link) == {"type": "symlink", "target": "../sysctl.site.conf"}
    assert describe(real) == before
    assert not (root / JOURNAL).exists()
    assert (root / "proc/sys/vm/swappiness").read_text() == "60\n"  # nothing written


def test_a_failed_apply_leaves_the_persisted_file_as_it_was(tmp_path: Path) -> None:
    root, profiles = persist_root(tmp_path)
    conf = put(root, PERSISTED, SITE_CONF, 0o640)
    os.chown(conf, 1234, 5678)
    before = describe(conf)
    swappiness = root / "proc/sys/vm/swappiness"
    swappiness.rename(swappiness.with_name("swappiness_real"))
    swappiness.symlink_to("swappiness_real")  # readable, its write fails (ELOOP)
    code, _, err = cli(root, profiles, "apply", "--profile", "base", "--persist")
    assert code == 2 and "vm.swappiness" in err
    assert describe(conf) == before


def test_rollback_replaces_a_link_planted_after_apply_without_following_it(
    tmp_path: Path,
) -> None:
    root, profiles = persist_root(tmp_path)
    conf = put(root, PERSISTED, SITE_CONF, 0o600)
    os.chown(conf, 1234, 5678)
    before = describe(conf)
    assert cli(root, profiles, "apply", "--profile", "base", "--persist")[0] == 0
    other = put(root, "etc/other.conf", "kernel.x = 1\n", 0o644)
    conf.unlink()
    conf.symlink_to("../other.conf")
    assert cli(root, profiles, "rollback")[0] == 0
    assert describe(conf) == before
    assert describe(other) == {
        "type": "regular", "mode": 0o644, "uid": 0, "gid": 0, "text": "kernel.x = 1\n"
    }  # fmt: skip


def test_a_journal_that_recorded_a_links_mode_restores_0644(tmp_path: Path) -> None:
    """An earlier version journaled a symlinked 90-mcpnode.conf's lstat(): mode 0777. Rollback
    writes the original text 0644, never 0777."""
    root, profiles = persist_root(tmp_path)
    conf = put(root, PERSISTED, SITE_CONF, 0o644)
    assert cli(root, profiles, "apply", "--profile", "base", "--persist")[0] == 0
    journal = root / JOURNAL
    doc = json.loads(journal.read_text())
    doc["persist"].update(mode=0o777, uid=0, gid=0)
    journal.write_text(json.dumps(doc))
    assert cli(root, profiles, "rollback")[0] == 0
    assert describe(conf) == {"type": "regular", "mode": 0o644, "uid": 0, "gid": 0,
                              "text": SITE_CONF}  # fmt: skip


# -- the journal's record of a file --------------------------------------------------------------


def test_the_journal_keeps_each_files_type_mode_and_owner() -> None:
    from mcpnode.tuning.journal import ABSENT, FileMeta, Journal, JournalEntry, from_json, to_json

    journal = Journal(
        "applied",
        "p",
        (
            JournalEntry("irqbalance:debian", "/etc/default/irqbalance", SITE,
                         FileMeta("regular", 0o640, 1234, 5678)),
            JournalEntry("bootloader:grub", "/etc/default/grub.d/90-mcpnode.cfg", "", ABSENT),
            JournalEntry("vm.swappiness", "/proc/sys/vm/swappiness", "60"),
        ),
    )  # fmt: skip
    assert from_json(to_json(journal), "j").entries == journal.entries
    doc = json.loads(to_json(journal))
    assert doc["entries"][0]["file"] == {"type": "regular", "mode": 0o640, "uid": 1234, "gid": 5678}
    assert doc["entries"][1]["file"] == {"type": "absent"}
    assert "file" not in doc["entries"][2]


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ({"key": "vm.swappiness", "path": "/proc/sys/vm/swappiness", "original": "1",
          "file": {"type": "absent"}}, "not a file key"),
        ({"key": "irqbalance:debian", "path": "/etc/default/irqbalance", "original": "x",
          "file": {"type": "absent"}}, "an absent file has no original text"),
        ({"key": "irqbalance:debian", "path": "/etc/default/irqbalance", "original": "x",
          "file": {"type": "symlink", "target": "/etc/shadow"}}, "regular | absent"),
        ({"key": "irqbalance:debian", "path": "/etc/default/irqbalance", "original": "x",
          "file": {"type": "regular", "mode": 0o17777, "uid": 0, "gid": 0}}, "file mode"),
        ({"key": "irqbalance:debian", "path": "/etc/default/irqbalance", "original": "x",
          "file": {"type": "regular", "mode": 0o644}}, "{type, mode, uid, gid}"),
    ],
)  # fmt: skip
def test_a_tampered_file_record_is_refused(entry: dict[str, Any], problem: str) -> None:
    from mcpnode.tuning.errors import JournalError
    from mcpnode.tuning.journal import SCHEMA, from_json

    doc = {"schema": SCHEMA, "state": "applied", "profile": "p", "entries": [entry],
           "persist": None, "modules": []}  # fmt: skip
    with pytest.raises(JournalError, match=problem.replace("|", r"\|").replace("{", r"\{")):
        from_json(json.dumps(doc), "j")
