"""Launches from the published manifest: `exec`, `pin`, `systemd-dropin` take the placement the
agent advertises when it is current (placement/source.py's freshness rule), fall back to
discovery with one line on stderr otherwise, and never initialise NVML or walk sysfs on the
manifest path. The CPUs are clipped to what the caller may use.

The roots are copies of tests/support/placeroot.py's (shaped like this machine) with the freshness
facts a live kernel has: a boot id and a uevent sequence number."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mcpnode.host import Host
from mcpnode.placement.manifest import MANIFEST_PATH, content_hash
from mcpnode.placement.source import resolve, staleness
from tests.placement.test_exec import CHILD, UUID
from tests.support import placeroot
from tests.support.tuningcli import run_cli, run_process

NVML_FAILURES = Path(__file__).parents[1] / "fixtures" / "nvml"
BOOT = "3b5e6a4e-6c8a-4a43-9d3a-6f0f6d1b2c11"

needs_machine = placeroot.needs_machine


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = placeroot.build(tmp_path_factory.mktemp("placed-manifest"))
    stamp(root, BOOT, 4711)
    code, _, err = run_cli("manifest", "publish", "--root", str(root))
    assert code == 0, err
    return root


@pytest.fixture
def root(template: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "root"
    shutil.copytree(template, dest, symlinks=True)
    return dest


def stamp(root: Path, boot: str | None = None, seqnum: int | None = None) -> None:
    if boot is not None:
        p = root / "proc/sys/kernel/random/boot_id"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(boot + "\n")
    if seqnum is not None:
        p = root / "sys/kernel/uevent_seqnum"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(f"{seqnum}\n")


def published(root: Path) -> dict[str, object]:
    doc = json.loads((root / MANIFEST_PATH.lstrip("/")).read_text())
    assert isinstance(doc, dict)
    return doc


def break_discovery(root: Path) -> None:
    """A root where discovery finds no GPU at all and NVML fails to initialise: the PCI tree is
    gone and the recorded NVML answers are a driver that is not loaded."""
    for sub in ("sys/bus", "sys/devices/pci0000:00", "sys/class"):
        shutil.rmtree(root / sub)
    meta_path = root / "mcpnode-snapshot.json"
    meta = json.loads(meta_path.read_text())
    meta["nvml"] = json.loads((NVML_FAILURES / "driver-not-loaded.json").read_text())
    meta_path.write_text(json.dumps(meta))


def test_publish_stamps_the_manifest(template: Path) -> None:
    doc = published(template)
    pub = doc["publication"]
    assert isinstance(pub, dict)
    assert pub["boot_id"] == BOOT
    assert pub["uevent_seqnum"] == 4711
    assert pub["cpus_online"] == "0-1"
    assert isinstance(pub["publisher_pid"], int)
    # Not hashed: republishing an unchanged machine keeps its hash.
    assert doc["content_hash"] == content_hash(doc)
    without = {k: v for k, v in doc.items() if k != "publication"}
    assert content_hash(without) == doc["content_hash"]


def test_resolve_uses_the_manifest_without_discovery(root: Path) -> None:
    break_discovery(root)
    with Host(root) as host:
        got = resolve(host)
    assert (got.source, got.notice) == ("manifest", None)
    assert [g.uuid for g in got.placement.gpus] == [UUID]
    assert set(got.placement.gpus[0].slice_cpus) == placeroot.SLICE
    # The control: the same root, discovered, has no GPU (and NVML does not initialise).
    with Host(root) as host:
        fresh = resolve(host, fresh=True)
    assert (fresh.source, fresh.placement.gpus) == ("discovery", ())


@needs_machine
def test_exec_from_the_manifest_runs_placed_without_discovery(root: Path) -> None:
    break_discovery(root)
    proc = run_process("exec", "--root", str(root), "--gpu", "0", "--", sys.executable, "-c", CHILD)
    assert (proc.returncode, proc.stderr) == (0, ""), proc.stderr
    got = json.loads(proc.stdout)
    assert got["affinity"] == sorted(placeroot.SLICE)
    assert got["policies"] == ["prefer:0"]
    assert got["env"]["CUDA_VISIBLE_DEVICES"] == UUID
    # --fresh rediscovers: the broken root has no GPU 0.
    fresh = run_process("exec", "--fresh", "--root", str(root), "--gpu", "0", "--", "true")
    assert fresh.returncode == 64, fresh.stderr
    assert "no GPU with that index" in fresh.stderr


@pytest.mark.parametrize(
    ("change", "notice"),
    [
        ("seqnum", "devices changed since the manifest was published (uevent 4711 then, 4712"),
        ("boot", "the published manifest is from another boot"),
        ("online", "the online CPUs changed since the manifest was published (0-1 then, 0 now)"),
        ("hash", "/run/mcpnode/manifest.json: content_hash does not match the content (edited?)"),
        ("stampless", "the published manifest has no publication stamp"),
        ("absent", "no published manifest"),
        ("housekeeping", "--housekeeping none is not the published manifest's (first-core)"),
    ],
)
def test_a_manifest_that_is_not_current_falls_back_with_one_line(
    root: Path, change: str, notice: str
) -> None:
    manifest = root / MANIFEST_PATH.lstrip("/")
    extra: tuple[str, ...] = ()
    if change == "seqnum":
        stamp(root, seqnum=4712)
    elif change == "boot":
        stamp(root, boot="0f0f0f0f-0000-4000-8000-000000000000")
    elif change == "online":
        (root / "sys/devices/system/cpu/online").write_text("0\n")
    elif change == "hash":
        doc = published(root)
        doc["placement"]["gpus"][0]["slice_cpus"] = "0"  # type: ignore[index]
        manifest.write_text(json.dumps(doc))
    elif change == "stampless":
        doc = published(root)
        del doc["publication"]
        manifest.write_text(json.dumps(doc))
    elif change == "absent":
        manifest.unlink()
    else:
        extra = ("--housekeeping", "none")
    code, out, err = run_cli(
        "systemd-dropin", "--gpu", "0", "--unit", "vllm", "--root", str(root), *extra
    )
    assert code == 0, err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"mcpnode: {notice}"), err
    assert lines[0].endswith(": discovering the topology instead"), err
    assert f"CUDA_VISIBLE_DEVICES={UUID}" in out


def test_a_moved_seqnum_is_current_while_the_agent_that_published_it_runs(root: Path) -> None:
    """Rule 4's second half: the agent republishes on device events, so while the publisher is
    the running agent a moved seqnum does not make its manifest stale. (A recorded root takes
    the agent state file as recorded; on the live root its pid must also be alive.)"""
    stamp(root, seqnum=9000)
    pub = published(root)["publication"]
    assert isinstance(pub, dict)
    state = {
        "schema": "mcpnode.agent-state/v1",
        "pid": pub["publisher_pid"],
        "profile": "base",
        "config": "/etc/mcpnode/mcpnode.toml",
        "drift_mode": "remediate",
        "started_at": "2026-01-01T00:00:00+00:00",
        "updated_at": "2026-01-01T00:00:00+00:00",
        "contested": [],
        "pinned": 0,
    }
    path = root / "run/mcpnode/agent.json"
    path.write_text(json.dumps(state))
    with Host(root) as host:
        doc = published(root)
        assert staleness(doc, host) is None
        state["pid"] = int(str(pub["publisher_pid"])) + 1  # another process published it
        path.write_text(json.dumps(state))
        assert staleness(doc, host) is not None


@needs_machine
@pytest.mark.parametrize(
    ("scope", "expected"),
    [("node", {"code": 0, "affinity": [0]}), ("slice", {"code": 69})],
)
def test_exec_clips_to_the_callers_cpus(
    root: Path, scope: str, expected: dict[str, object]
) -> None:
    """A caller limited to CPU 0 (a Slurm job's cpuset, taskset) gets the GPU's CPUs inside it:
    the node's 0-1 clipped to 0, and for the slice (CPU 1) a clear error rather than a launch
    the kernel would refuse."""
    launcher = (
        "import os, sys; os.sched_setaffinity(0, {0}); "
        "os.execv(sys.executable, [sys.executable, '-m', 'mcpnode', *sys.argv[1:]])"
    )
    proc = subprocess.run(
        [sys.executable, "-c", launcher, "exec", "--root", str(root), "--gpu", "0",
         "--scope", scope, "--", sys.executable, "-c", CHILD],
        capture_output=True, text=True, timeout=60, check=False, env=dict(os.environ),
    )  # fmt: skip
    assert proc.returncode == expected["code"], proc.stderr
    if expected["code"] == 0:
        assert json.loads(proc.stdout)["affinity"] == expected["affinity"]
    else:
        assert "none of its slice CPUs 1 is among the CPUs this process may use (0" in proc.stderr
        assert "--scope node widens it" in proc.stderr
        assert proc.stdout == ""
