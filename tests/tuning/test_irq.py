"""`[irq]` through the tuning engine, on temporary copies of the HGX H100 fixture with a real
node's interrupt layout (tests/support/irqroot.py): plan, apply, verify, drift, rollback, the
journal's key -> path check, irqbalance's environment file, and the agent remediating a moved
interrupt.

The acceptance case: after `mcpnode apply --profile inference-throughput` on the HGX copy, no
interrupt's affinity overlaps any GPU's slice in the published manifest, and `rollback`
restores every original."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from mcpnode.codec import cpus
from mcpnode.errors import McpnodeError
from mcpnode.host import Host
from mcpnode.placement.manifest import MANIFEST_PATH
from mcpnode.tuning.errors import JournalError, ProfileError
from mcpnode.tuning.journal import JournalStore, from_json
from mcpnode.tuning.plugins.irq import banned_of, parse_interrupts, with_banned
from mcpnode.tuning.profile import parse_profile
from tests.support import irqroot
from tests.support.agentproc import AgentProc
from tests.support.tuningcli import run_cli
from tests.support.tuningroot import kernel_view

PROFILE = "inference-throughput"


@pytest.fixture
def hgx(irq_root: irqroot.IrqRoot) -> irqroot.IrqRoot:
    r = irq_root
    code, _, err = run_cli("manifest", "publish", "--root", str(r.root))
    assert code == 0, err
    return r


def manifest(root: Path) -> dict[str, Any]:
    doc = json.loads((root / MANIFEST_PATH.lstrip("/")).read_text())
    assert isinstance(doc, dict)
    return doc


def slices_of(doc: dict[str, Any]) -> frozenset[int]:
    out: set[int] = set()
    for gpu in doc["placement"]["gpus"]:
        out |= cpus.parse_list(gpu["slice_cpus"])
    return frozenset(out)


def placed_state(root: Path) -> dict[str, object]:
    """What apply may change and rollback must restore: /proc/irq and /etc, as a kernel would
    report them."""
    return {k: v for k, v in kernel_view(root).items() if k.startswith(("proc/irq/", "etc/"))}


def test_apply_moves_every_interrupt_off_the_slices_and_rollback_restores(
    hgx: irqroot.IrqRoot,
) -> None:
    root = hgx.root
    doc = manifest(root)
    slices = slices_of(doc)
    housekeeping = cpus.parse_list(doc["placement"]["housekeeping_cpus"])
    node_cpus = {n["id"]: cpus.parse_list(n["cpus"]) for n in doc["numa_nodes"]}
    overlapping = [i for i in hgx.irqs if cpus.parse_list(i.affinity) & slices]
    assert len(overlapping) > 100  # the layout really puts mlx5 vectors and nvme queues there
    before = placed_state(root)

    code, out, err = run_cli("apply", "--profile", PROFILE, "--root", str(root))
    assert code == 0, err
    # The published manifest was current: no rediscovery notice among the write events.
    assert [line for line in err.splitlines() if line.startswith("mcpnode:")] == []
    for irq in hgx.irqs:
        now = cpus.parse_list(hgx.affinity(irq.number))
        assert now and not now & slices, (irq, now)
        want = housekeeping & node_cpus.get(irq.node, frozenset()) or housekeeping
        assert now <= want, (irq, now)
    env = (root / "etc/default/irqbalance").read_text()
    assert cpus.parse_list(banned_of(env) or "") == slices
    assert "restart irqbalance" in out

    code, out, err = run_cli("verify", "--profile", PROFILE, "--root", str(root))
    assert code == 0, out + err

    code, _, err = run_cli("rollback", "--root", str(root))
    assert code == 0, err
    assert placed_state(root) == before


def test_verify_reports_a_moved_interrupt_and_apply_puts_it_back(hgx: irqroot.IrqRoot) -> None:
    root = hgx.root
    assert run_cli("apply", "--profile", PROFILE, "--root", str(root))[0] == 0
    comp = next(i for i in hgx.irqs if i.name.startswith("mlx5_comp5"))
    path = root / f"proc/irq/{comp.number}/smp_affinity_list"
    path.write_text("5\n")  # irqbalance (or a script) moved it onto GPU 0's slice
    code, out, _ = run_cli("verify", "--profile", PROFILE, "--root", str(root), "--format", "json")
    assert code == 1
    drift = json.loads(out)["drift"]
    assert [d["key"] for d in drift] == [f"irq:{comp.number}"]
    assert drift[0]["actual"] == "5"
    assert run_cli("apply", "--profile", PROFILE, "--root", str(root))[0] == 0
    assert hgx.affinity(comp.number) == "0,96"
    # The journal kept the first original, not the drifted value: rollback restores the layout.
    assert run_cli("rollback", "--root", str(root))[0] == 0
    assert hgx.affinity(comp.number) == comp.affinity


def test_without_irqbalance_the_item_is_unsupported(tmp_path: Path) -> None:
    r = irqroot.build(tmp_path / "root", irqbalance=None)
    assert run_cli("manifest", "publish", "--root", str(r.root))[0] == 0
    code, out, _ = run_cli(
        "apply", "--profile", PROFILE, "--root", str(r.root), "--dry-run", "--format", "json"
    )
    assert code == 0
    items = {i["key"]: i for i in json.loads(out)["items"]}
    assert items["irq:irqbalance"]["action"] == "unsupported"
    assert "irqbalance is not installed" in items["irq:irqbalance"]["reason"]


def test_redhat_layout_writes_etc_sysconfig(tmp_path: Path) -> None:
    r = irqroot.build(tmp_path / "root", irqbalance="redhat")
    assert run_cli("manifest", "publish", "--root", str(r.root))[0] == 0
    assert run_cli("apply", "--profile", PROFILE, "--root", str(r.root))[0] == 0
    text = (r.root / "etc/sysconfig/irqbalance").read_text()
    assert banned_of(text) == "1-47,49-95,97-143,145-191"
    assert not (r.root / "etc/default/irqbalance").exists()


def test_without_a_current_manifest_apply_discovers_and_says_so(irq_root: irqroot.IrqRoot) -> None:
    r = irq_root  # nothing published
    code, _, err = run_cli("apply", "--profile", PROFILE, "--root", str(r.root))
    assert code == 0
    notices = [line for line in err.splitlines() if line.startswith("mcpnode:")]
    assert notices == ["mcpnode: no published manifest: discovering the topology instead"]
    assert r.affinity(next(i for i in r.irqs if i.name == "nvidia").number) == "0,96"


# -- pure parts ------------------------------------------------------------------------------


def test_parse_interrupts_takes_numbered_lines_only() -> None:
    text = (
        "           CPU0       CPU1\n"
        "  0:         45          0   IO-APIC   2-edge      timer\n"
        " 28:          0          0 PCI-MSIX-0000:00:01.0   0-edge      virtio0-config\n"
        "130:          3          1  PCI-MSIX-0000:19:00.0 1-edge mlx5_comp0@pci:0000:19:00.0\n"
        "NMI:          0          0   Non-maskable interrupts\n"
        "ERR:          0\n"
    )
    assert parse_interrupts(text) == (
        (0, "timer"),
        (28, "virtio0-config"),
        (130, "mlx5_comp0@pci:0000:19:00.0"),
    )


def test_irqbalance_file_edit_keeps_the_rest_and_drops_the_old_mask() -> None:
    text = "# comment\nIRQBALANCE_ARGS=--policyscript=/x\nIRQBALANCE_BANNED_CPUS=0000ff00\n"
    out = with_banned(text, "1-47")
    assert "IRQBALANCE_ARGS=--policyscript=/x" in out
    assert "IRQBALANCE_BANNED_CPUS" not in out
    assert banned_of(out) == "1-47"
    assert banned_of(with_banned(out, "2-3")) == "2-3"
    assert out.count("IRQBALANCE_BANNED_CPULIST=") == 1
    assert banned_of('IRQBALANCE_BANNED_CPULIST="4-5"\n') == "4-5"


@pytest.mark.parametrize(
    ("section", "problem"),
    [
        ('policy = "everywhere"', "must be one of housekeeping, off"),
        ('irqbalance = "stop"', "must be one of ban-slices, leave"),
        ("cpus = 3", "unknown key"),
    ],
)
def test_bad_irq_section_names_file_and_key(section: str, problem: str) -> None:
    with pytest.raises(ProfileError) as err:
        parse_profile(f'[profile]\nname = "x"\n[irq]\n{section}\n', "/etc/x.toml", "x")
    assert problem in str(err.value)
    assert "/etc/x.toml" in str(err.value)


def test_a_tampered_journal_cannot_aim_an_irq_restore_elsewhere() -> None:
    def journal(key: str, path: str) -> str:
        return json.dumps(
            {
                "schema": "mcpnode.tuning-journal/v1",
                "state": "applied",
                "profile": "x",
                "entries": [{"key": key, "path": path, "original": "0-3"}],
                "persist": None,
                "modules": [],
            }
        )

    ok = from_json(journal("irq:130", "/proc/irq/130/smp_affinity_list"), "j")
    assert ok.entries[0].path == "/proc/irq/130/smp_affinity_list"
    for key, path in (
        ("irq:130", "/etc/passwd"),
        ("irq:130", "/proc/irq/131/smp_affinity_list"),
        ("irq:1/../../etc", "/proc/irq/1/../../etc/smp_affinity_list"),
        ("irqbalance:debian", "/etc/sysconfig/irqbalance"),
    ):
        with pytest.raises(JournalError, match="is not the file of"):
            from_json(journal(key, path), "j")
    with pytest.raises(JournalError, match="managed_irqs"):
        from_json(
            journal("irq:1", "/proc/irq/1/smp_affinity_list")[:-1] + ', "managed_irqs": ["x"]}', "j"
        )


# -- the agent --------------------------------------------------------------------------------


def test_the_agent_remediates_a_moved_interrupt(tmp_path: Path, irq_root: irqroot.IrqRoot) -> None:
    r = irq_root
    root = r.root
    (root / "etc/mcpnode").mkdir(parents=True, exist_ok=True)
    (root / "etc/mcpnode/mcpnode.toml").write_text(
        f'[tuning]\nprofile = "{PROFILE}"\n[drift]\ninterval = 0.3\n[metrics]\nlisten = ""\n'
    )
    comp = next(i for i in r.irqs if i.name.startswith("mlx5_comp7@pci:0000:9b"))
    agent = AgentProc(["--root", str(root)], tmp_path, watchdog_usec=None)
    try:
        agent.wait_message("READY=1")
        assert r.affinity(comp.number) == "48,144"  # placed at start
        t = agent.now()
        (root / f"proc/irq/{comp.number}/smp_affinity_list").write_text("55\n")
        event = agent.wait_event("drift.remediated", t, key=f"irq:{comp.number}")
        after = r.affinity(comp.number)
        rc = agent.stop()
    finally:
        agent.close()
    assert rc == 0
    assert event["old"] == "55" and event["new"] == "48,144"
    assert after == "48,144"


def test_store_reports_no_managed_irqs_without_a_journal(tmp_path: Path) -> None:
    try:
        store = JournalStore(Host(tmp_path))
    except McpnodeError as err:  # pragma: no cover - a root that cannot be used
        pytest.fail(str(err))
    assert store.managed_irqs() == frozenset()


# -- managed interrupts: the kernel's EIO -----------------------------------------------------


def _unshare_reason() -> str | None:
    import shutil
    import subprocess

    if os.geteuid() != 0:
        return "needs root: unshare --mount and bind mounts"
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return "unshare or mount is missing"
    probe = subprocess.run(
        ["unshare", "--mount", "--", "true"], capture_output=True, text=True, check=False
    )
    return None if probe.returncode == 0 else f"unshare --mount failed: {probe.stderr.strip()}"


@pytest.mark.skipif(_unshare_reason() is not None, reason=_unshare_reason() or "")
def test_managed_interrupts_are_recorded_not_failed(hgx: irqroot.IrqRoot) -> None:
    """The NVMe I/O queues answer EIO on write, as the kernel does for managed vectors: apply
    succeeds, reports them as managed, journals them, moves everything else; verify is then
    compliant (they are skipped, not drift), and rollback restores the rest."""
    import subprocess
    import sys

    root = hgx.root
    managed = [i for i in hgx.irqs if i.managed]
    assert len(managed) == 8
    before = placed_state(root)
    script = str(Path(__file__).parents[1] / "support" / "irqmanagedchild.py")
    child = subprocess.run(
        ["unshare", "--mount", "--", sys.executable, script,
         str(root), PROFILE, *(str(i.number) for i in managed)],
        capture_output=True, text=True, timeout=180, check=False,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )  # fmt: skip
    assert child.returncode == 0, child.stderr
    result = json.loads(child.stdout)
    assert result.get("returncode") == 0, result
    doc = json.loads(result["stdout"])
    assert sorted(o["key"] for o in doc["managed"]) == sorted(f"irq:{i.number}" for i in managed)
    assert all(o["result"] == "managed" for o in doc["managed"])
    assert any("kernel-managed" in n for n in doc["notes"])
    journal = json.loads((root / "var/lib/mcpnode/tuning-journal.json").read_text())
    assert journal["managed_irqs"] == sorted(i.number for i in managed)
    assert not {e["key"] for e in journal["entries"]} & {f"irq:{i.number}" for i in managed}
    for irq in managed:  # never written: the kernel kept them
        assert hgx.affinity(irq.number) == irq.affinity
    slices = slices_of(manifest(root))
    for irq in hgx.irqs:
        if not irq.managed:
            assert not cpus.parse_list(hgx.affinity(irq.number)) & slices

    code, out, _ = run_cli("verify", "--profile", PROFILE, "--root", str(root), "--format", "json")
    assert code == 0, out
    skipped = {i["key"]: i for i in json.loads(out)["unverified"]}
    assert "kernel-managed" in skipped[f"irq:{managed[0].number}"]["reason"]
    assert run_cli("rollback", "--root", str(root))[0] == 0
    assert placed_state(root) == before


# -- RPS -------------------------------------------------------------------------------------

STEERED = """\
[profile]
name = "steered"
summary = "interrupts and receive packet steering on the housekeeping CPUs"
include = ["inference-throughput"]

[irq]
# Test: RPS too.
rps = "housekeeping"
"""


def test_rps_steers_every_nic_queue_to_its_nodes_housekeeping(hgx: irqroot.IrqRoot) -> None:
    root = hgx.root
    (root / "etc/mcpnode/profiles").mkdir(parents=True, exist_ok=True)
    (root / "etc/mcpnode/profiles/steered.toml").write_text(STEERED)
    queues = sorted(root.glob("sys/devices/**/net/*/queues/rx-*/rps_cpus"))
    assert len(queues) == 9 * 4  # eno1 and the eight ConnectX ports, four queues each
    before = {q: q.read_text() for q in queues}
    code, _, err = run_cli("apply", "--profile", "steered", "--root", str(root))
    assert code == 0, err
    nics = {n["netdevs"][0]["name"]: n["numa_node"] for n in manifest(root)["nics"]}
    for q in queues:
        dev = q.parent.parent.parent.name
        want = {0, 96} if nics[dev] == 0 else {48, 144}
        assert cpus.parse_mask(q.read_text()) == want, (dev, q.read_text())
    assert run_cli("verify", "--profile", "steered", "--root", str(root))[0] == 0
    assert run_cli("rollback", "--root", str(root))[0] == 0
    assert {q: q.read_text() for q in queues} == before


def test_cpu_masks_round_trip() -> None:
    for ids, groups, text in (
        ({0}, 1, "00000001"),
        ({0, 32, 33}, 1, "00000003,00000001"),
        ({0, 96, 48, 144}, 6, "00000000,00010000,00000001,00000000,00010000,00000001"),
        (set(), 2, "00000000,00000000"),
    ):
        assert cpus.format_mask(ids, groups) == text
        assert cpus.parse_mask(text) == frozenset(ids)
    for bad in ("", "x", "0x1", "1,,2", "123456789"):
        with pytest.raises(ValueError):
            cpus.parse_mask(bad)


def test_a_host_without_gpu_slices_keeps_its_interrupts(tmp_path: Path) -> None:
    """No GPU, no slice to protect: [irq] must not herd every interrupt onto one core."""
    r = irqroot.build(tmp_path / "root", "no-gpu-host")
    before = {i.number: r.affinity(i.number) for i in r.irqs}
    code, out, err = run_cli(
        "apply", "--profile", PROFILE, "--root", str(r.root), "--format", "json"
    )
    assert code == 0, err
    items = {i["key"]: i for i in json.loads(out)["items"]}
    assert items["irq:policy"]["action"] == "unsupported"
    assert "no GPU slices on this host" in items["irq:policy"]["reason"]
    assert {i.number: r.affinity(i.number) for i in r.irqs} == before


def test_a_running_irqbalance_is_named(hgx: irqroot.IrqRoot) -> None:
    irqroot.put(hgx.root, "proc/4242/comm", "irqbalance\n")
    irqroot.put(hgx.root, "proc/4243/comm", "sshd\n")
    code, out, err = run_cli("apply", "--profile", PROFILE, "--root", str(hgx.root))
    assert code == 0, err
    assert "irqbalance is running (pid 4242) with its old banned CPUs" in out
