"""`[bootloader]`: the kernel command line through the tuning engine.

- On the live root inside a throwaway mount namespace, with fake `update-grub` / `grubby` first
  on PATH recording every call (tests/support/bootchild.py): apply writes the GRUB drop-in and
  regenerates, or calls grubby; verify is compliant (configured) and says a reboot is required;
  rollback removes the drop-in and regenerates again, or gives grubby the original arguments.
- On a copy of the HGX fixture: the slices' isolation arguments computed from the published
  manifest; a recorded root refuses to run the generator (nothing changes); kernelstub and
  systemd-boot detected and reported, never assumed; the audit's wanted-but-not-active finding.
- Profile validation: shell characters refused, sensitive arguments need allow_sensitive.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mcpnode.tuning.errors import ProfileError
from mcpnode.tuning.plugins import bootloader as bl
from mcpnode.tuning.profile import parse_profile
from tests.support import irqroot
from tests.support.tuningcli import run_cli

REPO = Path(__file__).resolve().parents[2]
SLICES = "1-47,49-95,97-143,145-191"  # the HGX fixture's GPU slices, all eight


def _ns_reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root: unshare --mount"
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return "unshare or mount is missing"
    for tool in ("grubby", "update-grub", "grub2-mkconfig", "grub-mkconfig"):
        if shutil.which(tool, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin"):
            return f"a real {tool} is installed: the fakes would not be the ones found"
    probe = subprocess.run(["unshare", "--mount", "--", "true"], capture_output=True, check=False)
    return None if probe.returncode == 0 else "unshare --mount failed"


needs_ns = pytest.mark.skipif(_ns_reason() is not None, reason=_ns_reason() or "")


def in_namespace(method: str, work: Path, **extra: object) -> dict[str, Any]:
    """tests/support/bootchild.py's steps; `extra`: its optional parameters (dropin, fail)."""
    params = json.dumps({"method": method, "work": str(work), "repo": str(REPO), **extra})
    child = str(REPO / "tests" / "support" / "bootchild.py")
    proc = subprocess.run(
        ["unshare", "--mount", "--", sys.executable, child, params],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert isinstance(doc, dict)
    return doc


@needs_ns
def test_grub_dropin_and_update_grub(tmp_path: Path) -> None:
    got = in_namespace("grub", tmp_path)
    assert got["apply"]["rc"] == 0, got["apply"]["err"]
    assert got["dropin"] == (
        "# Written by mcpnode ([bootloader]); `mcpnode rollback` removes it.\n"
        'GRUB_CMDLINE_LINUX="$GRUB_CMDLINE_LINUX iommu=pt hugepages=64"\n'
    )
    assert "reboot required" in got["apply"]["out"]
    assert got["verify"]["rc"] == 0, got["verify"]["out"]
    item = next(i for i in json.loads(got["verify"]["out"])["items"])
    assert item["key"] == "bootloader:grub" and item["action"] == "ok"
    assert "reboot required: iommu=pt hugepages=64 not in /proc/cmdline" in item["reason"]
    assert got["rollback"]["rc"] == 0, got["rollback"]["err"]
    assert got["dropin_after_rollback"] is False
    # Regenerated after the write and after the removal; nothing else was run.
    assert [c for c in got["calls"] if not c.endswith("--version")] == [
        "update-grub ",
        "update-grub ",
    ]


@needs_ns
def test_grubby_args_and_their_rollback(tmp_path: Path) -> None:
    got = in_namespace("grubby", tmp_path)
    assert got["apply"]["rc"] == 0, got["apply"]["err"]
    after = bl.last_values(got["args_after_apply"].split())
    assert after["iommu"] == "pt" and after["hugepages"] == "64" and after["quiet"] is None
    assert got["verify"]["rc"] == 0, got["verify"]["out"]
    assert got["rollback"]["rc"] == 0, got["rollback"]["err"]
    assert bl.last_values(got["args_after_rollback"].split()) == bl.last_values(
        ["ro", "root=/dev/vda1", "quiet", "iommu=on"]
    )
    changes = [c for c in got["calls"] if "--update-kernel=ALL" in c]
    assert changes == [
        "grubby --update-kernel=ALL --args=iommu=pt hugepages=64",
        "grubby --update-kernel=ALL --remove-args=hugepages --args=iommu=on",
    ]


# -- on the HGX fixture -------------------------------------------------------------------------

ISOLATING = """\
[profile]
name = "isolating"
summary = "isolate the GPU slices"

[bootloader]
cmdline = ["iommu=pt"]
isolate = ["nohz_full", "rcu_nocbs", "isolcpus"]
"""


@pytest.fixture
def hgx(irq_root: irqroot.IrqRoot) -> Path:
    root = irq_root.root
    (root / "etc/mcpnode/profiles").mkdir(parents=True, exist_ok=True)
    (root / "etc/mcpnode/profiles/isolating.toml").write_text(ISOLATING)
    (root / "etc/default/grub").write_text('GRUB_CMDLINE_LINUX="quiet"\n')
    (root / "proc/cmdline").write_text("BOOT_IMAGE=/vmlinuz root=/dev/sda1 quiet iommu=pt\n")
    # A snapshot of a Debian host records its update-grub answering --version.
    meta_path = root / "mcpnode-snapshot.json"
    meta = json.loads(meta_path.read_text())
    meta["commands"] = {
        "update-grub --version": {"found": True, "returncode": 0, "stdout": "grub 2.06\n"}
    }
    meta_path.write_text(json.dumps(meta))
    assert run_cli("manifest", "publish", "--root", str(root))[0] == 0
    return root


def plan_item(root: Path) -> dict[str, Any]:
    code, out, err = run_cli(
        "apply", "--profile", "isolating", "--root", str(root), "--dry-run", "--format", "json"
    )
    assert code == 0, err
    (item,) = [i for i in json.loads(out)["items"] if i["key"].startswith("bootloader:")]
    assert isinstance(item, dict)
    return item


def test_isolation_arguments_come_from_the_published_slices(hgx: Path) -> None:
    item = plan_item(hgx)
    assert item["key"] == "bootloader:grub" and item["action"] == "set"
    assert item["desired"] == (
        "# Written by mcpnode ([bootloader]); `mcpnode rollback` removes it.\n"
        f'GRUB_CMDLINE_LINUX="$GRUB_CMDLINE_LINUX iommu=pt nohz_full={SLICES} '
        f'rcu_nocbs={SLICES} isolcpus=managed_irq,{SLICES}"\n'
    )
    assert "update-grub" in item["reason"] and "reboot required" in item["reason"]


def test_a_recorded_root_never_runs_the_generator(hgx: Path) -> None:
    code, _, err = run_cli("apply", "--profile", "isolating", "--root", str(hgx))
    assert code == 2
    assert "update-grub" in err and "needs the live host" in err
    assert not (hgx / "etc/default/grub.d/90-mcpnode.cfg").exists()  # undone
    assert not (hgx / "var/lib/mcpnode/tuning-journal.json").exists()


@pytest.mark.parametrize(
    ("layout", "method", "hint"),
    [
        ("etc/kernelstub/configuration", "bootloader:kernelstub", "kernelstub -a ARG"),
        ("etc/kernel/cmdline", "bootloader:kernel-cmdline", "kernel-install add"),
        (None, "bootloader:none", "no boot loader configuration found"),
    ],
)
def test_other_boot_loaders_are_detected_and_reported(
    hgx: Path, layout: str | None, method: str, hint: str
) -> None:
    (hgx / "etc/default/grub").unlink()
    if layout is not None:
        (hgx / layout).parent.mkdir(parents=True, exist_ok=True)
        (hgx / layout).write_text("{}\n")
    item = plan_item(hgx)
    assert (item["key"], item["action"]) == (method, "unsupported")
    assert hint in item["reason"]


def test_audit_reports_wanted_but_not_active(irq_root: irqroot.IrqRoot) -> None:
    """A GRUB host whose drop-in already holds the arguments (configured) while the running
    kernel lacks nohz_full: verify is compliant, the audit WARNs that a reboot is due."""
    root = irq_root.root
    (root / "etc/mcpnode/profiles").mkdir(parents=True, exist_ok=True)
    (root / "etc/mcpnode/profiles/isolating.toml").write_text(
        ISOLATING.replace(', "rcu_nocbs", "isolcpus"', "")
    )
    (root / "etc/default/grub").write_text('GRUB_CMDLINE_LINUX="quiet"\n')
    (root / "etc/default/grub.d").mkdir()
    (root / "etc/default/grub.d/90-mcpnode.cfg").write_text(
        bl.grub_dropin_text(["iommu=pt", f"nohz_full={SLICES}"])
    )
    (root / "proc/cmdline").write_text("BOOT_IMAGE=/vmlinuz quiet iommu=pt\n")
    assert run_cli("manifest", "publish", "--root", str(root))[0] == 0
    _, out, _ = run_cli(
        "audit", "--root", str(root), "--profile", "isolating", "--only", "tuning.bootloader",
        "--format", "json",
    )  # fmt: skip
    findings = json.loads(out)["findings"]
    assert [(f["id"], f["status"]) for f in findings] == [("tuning.bootloader", "WARN")]
    assert f"nohz_full={SLICES}" in findings[0]["summary"]


# -- pure parts ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "arg",
    ["iommu=pt $(reboot)", 'x="y"', "a b", "hugepages=1;id", "`x`", "=x", "x=", "x=a\nb"],
)
def test_arguments_that_could_reach_a_shell_are_refused(arg: str) -> None:
    with pytest.raises(ProfileError, match="not NAME or NAME=VALUE"):
        parse_profile(
            f'[profile]\nname = "b"\n[bootloader]\ncmdline = [{json.dumps(arg)}]\n', "b", "b"
        )


def test_sensitive_arguments_need_allow_sensitive() -> None:
    text = '[profile]\nname = "b"\n{allow}[bootloader]\ncmdline = ["mitigations=off"]\n'
    with pytest.raises(ProfileError, match=r"allow_sensitive = \['cmdline:mitigations'\]"):
        parse_profile(text.format(allow=""), "b", "b")
    allowed = parse_profile(
        text.format(allow='allow_sensitive = ["cmdline:mitigations"]\n'), "b", "b"
    )
    assert allowed.settings[0].key == "bootloader:cmdline"
    assert bl.sensitive_arg("mitigations=auto") is None  # only "off" switches them off
    assert bl.sensitive_arg("iommu=pt") is None and bl.sensitive_arg("iommu=off") is not None


def test_missing_compares_the_last_occurrence() -> None:
    have = ["quiet", "iommu=on", "hugepages=8", "iommu=pt"]
    assert bl.missing(["iommu=pt", "quiet", "hugepages=64", "nosmt"], have) == [
        "hugepages=64",
        "nosmt",
    ]
    assert bl.dropin_args(bl.grub_dropin_text(["a=1", "b"])) == ["a=1", "b"]
    assert bl.split_cmdline('root=/dev/x dyndbg="file x +p" quiet') == [
        "root=/dev/x",
        "dyndbg=file x +p",
        "quiet",
    ]
