"""One answer to "which profile is this host tuned with" (tuning/active.py), and every consumer
agreeing with it: `mcpnode profiles active`, verify, the audit, the manifest, the NFD and
Prometheus exporters and the fleet report. And compliance three-valued everywhere: a host whose
keys could not be read is unknown, never compliant.

Roots are copies of the HGX fixture with the audit's healthy overlay (auditroot.build: base's
sysctls at base's values) minus its persisted sysctl.d file, so that each test sets up exactly
the state it describes.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from mcpnode.fleet.load import load_fleet
from mcpnode.fleet.report import compare
from mcpnode.host import Host
from mcpnode.placement.manifest import dumps
from tests.support import auditroot
from tests.support.tuningcli import run_cli

PERSISTED = "etc/sysctl.d/90-mcpnode.conf"
JOURNAL = "var/lib/mcpnode/tuning-journal.json"
CONFIG = "etc/mcpnode/mcpnode.toml"
UNKNOWN = 3


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return auditroot.build(tmp_path_factory.mktemp("tpl"), files={PERSISTED: None})


@pytest.fixture
def root(template: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "root"
    shutil.copytree(template, dest, symlinks=True)
    return dest


def cli(root: Path, *args: str) -> tuple[int, str, str]:
    return run_cli(*args, "--root", str(root))


def active(root: Path) -> dict[str, Any]:
    code, out, err = cli(root, "profiles", "active", "--format", "json")
    assert code == 0, err
    doc: dict[str, Any] = json.loads(out)
    return doc


def views(root: Path) -> dict[str, Any]:
    """What every consumer says of the root's tuning."""
    code_v, out_v, _ = cli(root, "verify", "--format", "json")
    _code_a, out_a, _ = cli(root, "audit", "--format", "json", "--only", "tuning")
    _, out_m, _ = cli(root, "manifest", "show", "--format", "json")
    _, out_n, _ = cli(root, "export", "nfd", "--stdout")
    _, out_p, _ = cli(root, "export", "prom", "--stdout")
    labels = dict(line.split("=", 1) for line in out_n.splitlines() if "=" in line)
    prom = {
        line.split(" ")[0]: line.split(" ")[1]
        for line in out_p.splitlines()
        if line.startswith("mcpnode_tuning_")
    }
    audit = json.loads(out_a)
    return {
        "active": active(root),
        "verify": (code_v, json.loads(out_v) if out_v.lstrip().startswith("{") else out_v),
        "audit": {(f["id"], f["subject"]): f for f in audit["findings"]},
        "audit_profile": audit["profile"],
        "manifest": json.loads(out_m)["tuning"],
        "nfd": (labels.get("mcpnode.io/tuning-profile"), labels.get("mcpnode.io/tuning-compliant")),
        "prom": prom,
    }


def test_nobody_tuned_it(root: Path) -> None:
    v = views(root)
    assert (v["active"]["name"], v["active"]["source"]) == (None, "none")
    # --format json is JSON in every outcome, this one included (exit 3)
    assert v["verify"][0] == UNKNOWN and "no active profile" in v["verify"][1]["unknown_reason"]
    assert v["verify"][1]["schema"] == "mcpnode.tuning-verify/v1"
    assert v["verify"][1]["compliant"] is None and v["verify"][1]["profile"] is None
    assert [k for k in v["audit"]] == [("tuning.profile", None)]
    assert v["audit"][("tuning.profile", None)]["status"] == "INFO"
    assert v["audit_profile"] is None
    assert v["manifest"]["profile"] is None and v["manifest"]["compliant"] is None
    assert v["manifest"]["source"] == "none"
    assert v["nfd"] == (None, "unknown")
    assert v["prom"] == {"mcpnode_tuning_compliance_known": "0.0"}


def test_applied_without_persist_is_the_active_profile(root: Path, tmp_path: Path) -> None:
    """The false drift of old: after `apply --profile inference-latency` (no --persist, no
    agent) verify and the audit checked base and the audit's remedy undid the choice."""
    code, _out, err = cli(root, "apply", "--profile", "inference-latency")
    assert code == 0, err
    v = views(root)
    a = v["active"]
    assert (a["name"], a["source"], a["applied"], a["by"]) == (
        "inference-latency",
        "journal",
        True,
        "cli",
    )
    assert a["hash"].startswith("sha256:") and a["at"]
    assert v["verify"][0] == 0 and v["verify"][1]["compliant"] is True
    assert v["verify"][1]["active"]["name"] == "inference-latency"
    assert v["audit_profile"] == "inference-latency"
    assert v["audit"][("tuning.drift", None)]["status"] == "PASS"
    assert v["manifest"]["profile"] == "inference-latency"
    assert (v["manifest"]["compliant"], v["manifest"]["source"]) == (True, "journal")
    assert v["nfd"] == ("inference-latency", "true")
    assert v["prom"]["mcpnode_tuning_compliance_known"] == "1.0"
    assert v["prom"]['mcpnode_tuning_compliant{profile="inference-latency"}'] == "1.0"
    # rollback: not tuned again
    assert cli(root, "rollback")[0] == 0
    assert active(root)["source"] == "none"


def test_drift_has_one_command_for_a_remedy(root: Path) -> None:
    cli(root, "apply", "--profile", "inference-latency")
    for key, value in (("vm.swappiness", "60"), ("net.core.somaxconn", "128")):
        (root / auditroot.sysctl_rel(key)).write_text(value + "\n")
    v = views(root)
    assert v["verify"][0] == 1
    drift = [f for (fid, _), f in v["audit"].items() if fid == "tuning.drift"]
    assert len(drift) == 2 and {f["status"] for f in drift} == {"FAIL"}
    assert {f["remedy"] for f in drift} == {"mcpnode apply --profile inference-latency"}
    _code, out, _ = cli(root, "audit")
    # The text report's Remedies: the one command, once, for both keys.
    remedies = out.split("== Remedies ==")[1].split("==")[0]
    assert remedies.count("mcpnode apply --profile inference-latency") == 1
    assert "vm.swappiness" in remedies and "net.core.somaxconn" in remedies
    assert v["manifest"]["compliant"] is False and v["nfd"][1] == "false"


def test_persisted_then_journal_lost(root: Path) -> None:
    assert cli(root, "apply", "--profile", "base", "--persist")[0] == 0
    (root / JOURNAL).unlink()  # /var/lib wiped; the boot file remains
    a = active(root)
    assert (a["name"], a["source"], a["applied"]) == ("base", "persisted", True)
    assert views(root)["audit_profile"] == "base"


def test_configured_but_not_applied(root: Path) -> None:
    (root / CONFIG).parent.mkdir(parents=True)
    (root / CONFIG).write_text('[tuning]\nprofile = "inference-throughput"\n')
    v = views(root)
    a = v["active"]
    assert (a["name"], a["source"], a["applied"]) == ("inference-throughput", "configured", False)
    assert "configured, not applied" in a["detail"]
    # Checked against it: what applying it would change is drift, with the command to do it.
    assert v["audit_profile"] == "inference-throughput"
    _code, out, _ = cli(root, "profiles", "active")
    assert out.splitlines()[:3] == [
        "inference-throughput",
        f"source: configured ([tuning] profile in /{CONFIG}; configured, not applied)",
        "applied: no (configured, not applied)",
    ]


def test_the_agent_wins(root: Path) -> None:
    from mcpnode.state.agentstate import AgentState, write_agent_state

    cli(root, "apply", "--profile", "base")
    state = AgentState(1, "inference-latency", "/etc/mcpnode/mcpnode.toml", "remediate", "t", "t")
    write_agent_state(Host(root), state)  # a recorded root takes the state as recorded
    a = active(root)
    assert (a["name"], a["source"]) == ("inference-latency", "agent")
    assert views(root)["audit_profile"] == "inference-latency"


def test_an_untrusted_journal_makes_it_unknown_and_fails_the_audit(root: Path) -> None:
    cli(root, "apply", "--profile", "base")
    (root / JOURNAL).chmod(0o666)
    a = active(root)
    assert a["name"] is None and a["problem"] and "world-writable" in a["problem"]
    v = views(root)
    assert v["verify"][0] == UNKNOWN and "cannot be told" in v["verify"][1]["unknown_reason"]
    assert v["audit"][("tuning.state", None)]["status"] == "FAIL"
    assert v["manifest"]["compliant"] is None and "world-writable" in v["manifest"]["error"]


def test_unknown_is_never_compliant(root: Path, tmp_path: Path) -> None:
    """Base active, but none of its keys readable here (a dump without /proc/sys): verify
    exits 3, the manifest, NFD and Prometheus say unknown, and the fleet report counts the host
    apart from the compliant ones."""
    cli(root, "apply", "--profile", "base", "--persist")
    compliant_doc = json.loads(cli(root, "manifest", "show", "--format", "json")[1])
    shutil.rmtree(root / "proc/sys")
    (root / auditroot.THP).unlink()
    v = views(root)
    assert v["active"]["name"] == "base"
    assert v["verify"][0] == UNKNOWN
    assert v["verify"][1]["compliant"] is None and v["verify"][1]["unknown_reason"]
    assert v["audit"][("tuning.drift", None)]["status"] == "SKIP"
    assert v["manifest"]["compliant"] is None
    assert "could be read" in v["manifest"]["unknown_reason"]
    assert v["nfd"] == ("base", "unknown")
    assert v["prom"] == {"mcpnode_tuning_compliance_known": "0.0"}
    unknown_doc = json.loads(cli(root, "manifest", "show", "--format", "json")[1])
    fleet = tmp_path / "fleet"
    for i, doc in enumerate([compliant_doc] * 3 + [unknown_doc]):
        (fleet / f"h{i}").mkdir(parents=True)
        doc = {**doc, "host": {**doc["host"], "hostname": f"h{i}"}}
        from mcpnode.placement.manifest import content_hash

        doc["content_hash"] = content_hash(doc)
        (fleet / f"h{i}" / "manifest.json").write_text(dumps(doc))
    with Host(fleet) as host:
        report = compare(load_fleet(host))
    tuning = next(p for p in report.properties if p.name == "tuning")
    assert tuning.majority == "base: compliant"
    assert [(o.host, o.value) for o in tuning.outliers] == [("h3", "base: unknown")]


def test_a_key_that_cannot_be_read_is_not_compliant(root: Path) -> None:
    """Some keys match, one cannot be read: WARN in the audit, unknown everywhere else."""
    cli(root, "apply", "--profile", "base")
    key = root / auditroot.sysctl_rel("vm.swappiness")
    key.unlink()
    key.mkdir()  # EISDIR: there, but unreadable
    v = views(root)
    assert v["verify"][0] == UNKNOWN
    assert "vm.swappiness" in v["verify"][1]["unknown_reason"]
    assert v["audit"][("tuning.drift", None)]["status"] == "WARN"
    assert v["manifest"]["compliant"] is None and v["nfd"][1] == "unknown"
