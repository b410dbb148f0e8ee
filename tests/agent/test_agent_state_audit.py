"""The agent's state file (/run/mcpnode/agent.json) as the audit reads it: the profile a running
agent enforces, and each key it stopped remediating as a `tuning.contested` WARN."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mcpnode.audit.model import Finding, Status
from mcpnode.audit.run import run_audit
from mcpnode.host import Host
from mcpnode.state.agentstate import (
    AGENT_STATE_PATH,
    SCHEMA,
    AgentState,
    ContestedKey,
    parse_agent_state,
    read_agent_state,
    write_agent_state,
)
from mcpnode.tuning.active import active_profile
from tests.support import auditroot
from tests.support.fixtures import RootFactory

CONTESTED = ContestedKey("vm.swappiness", 3, 600.0, "2025-03-01T12:00:05+00:00", "60")
STATE = AgentState(
    pid=4242,
    profile="inference-latency",
    config="/etc/mcpnode/agent.toml",
    drift_mode="remediate",
    started_at="2025-03-01T11:00:00+00:00",
    updated_at="2025-03-01T12:00:05+00:00",
    contested=(CONTESTED,),
    pinned=2,
)


def state_file(root: Path) -> Path:
    return root / AGENT_STATE_PATH.lstrip("/")


def contested(findings: tuple[Finding, ...]) -> list[Finding]:
    return [f for f in findings if f.id == "tuning.contested"]


@pytest.fixture
def root(audit_root: RootFactory) -> Path:
    return audit_root(auditroot.HGX)


def test_contested_key_is_a_warn_finding(root: Path) -> None:
    with Host(root) as h:
        write_agent_state(h, STATE)
        report = run_audit(h, skip=["container"])
    assert report.problems == ()
    assert report.profile == "inference-latency"  # the agent's, not the default
    (f,) = contested(report.findings)
    assert (f.status, f.subject) == (Status.WARN, "vm.swappiness")
    assert "4242" in f.summary and "3 times within 600 s" in f.summary
    assert f.evidence[0].source == AGENT_STATE_PATH == "/run/mcpnode/agent.json"
    assert "2025-03-01T12:00:05+00:00" in f.evidence[0].value and "60" in f.evidence[0].value
    assert f.evidence[1].source == "profile inference-latency"
    assert "remediate" in f.evidence[1].value
    assert f.remedy is not None and "systemctl reload mcpnode" in f.remedy


def test_state_file_is_written_atomically_and_readable(root: Path) -> None:
    with Host(root) as h:
        write_agent_state(h, STATE)
        assert read_agent_state(h) == STATE
    path = state_file(root)
    assert path.stat().st_mode & 0o777 == 0o644
    assert [p.name for p in path.parent.iterdir()] == ["agent.json"]  # no temp file left
    assert json.loads(path.read_text())["schema"] == SCHEMA


def test_one_finding_per_contested_key(root: Path) -> None:
    two = ContestedKey("net.core.somaxconn", 4, 60.0, "2025-03-01T12:01:00+00:00", None)
    state = AgentState(**{**STATE.__dict__, "contested": (CONTESTED, two)})
    with Host(root) as h:
        write_agent_state(h, state)
        report = run_audit(h, only=["tuning"])
    got = {f.subject: f.status for f in contested(report.findings)}
    assert got == {"vm.swappiness": Status.WARN, "net.core.somaxconn": Status.WARN}


def test_no_contested_keys_no_finding(root: Path) -> None:
    with Host(root) as h:
        write_agent_state(h, AgentState(**{**STATE.__dict__, "contested": ()}))
        report = run_audit(h, only=["tuning"])
        assert active_profile(h).name == "inference-latency"
    assert contested(report.findings) == []


def test_only_contested_can_be_selected(root: Path) -> None:
    with Host(root) as h:
        write_agent_state(h, STATE)
        report = run_audit(h, only=["tuning.contested"])
    assert [f.id for f in report.findings] == ["tuning.contested"]


def test_active_profile_prefers_the_agent(audit_root: RootFactory) -> None:
    root = audit_root(
        auditroot.NO_GPU,
        files={"etc/sysctl.d/90-mcpnode.conf": "# profile: inference-throughput (x)\n"},
    )
    with Host(root) as h:
        assert active_profile(h).name == "inference-throughput"
        write_agent_state(h, STATE)
        assert active_profile(h).name == "inference-latency"
        # an explicit --profile still wins over both
        assert run_audit(h, only=["tuning"], profile="base").profile == "base"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "not json {",
        "[]",
        '"mcpnode.agent-state/v1"',
        json.dumps({**json.loads(STATE.to_json()), "schema": "mcpnode.agent-state/v2"}),
        json.dumps({k: v for k, v in json.loads(STATE.to_json()).items() if k != "profile"}),
        json.dumps({**json.loads(STATE.to_json()), "pid": "four"}),
        json.dumps({**json.loads(STATE.to_json()), "contested": [{"key": "vm.swappiness"}]}),
        json.dumps({**json.loads(STATE.to_json()), "contested": ["vm.swappiness"]}),
        json.dumps({**json.loads(STATE.to_json()), "contested": None}),
        json.dumps({**json.loads(STATE.to_json()), "contested": 3}),
    ],
    ids=[
        "empty",
        "not-json",
        "list",
        "string",
        "schema-v2",
        "no-profile",
        "pid-not-int",
        "contested-incomplete",
        "contested-strings",
        "contested-null",
        "contested-int",
    ],
)
def test_garbage_state_file_is_ignored(audit_root: RootFactory, text: str) -> None:
    assert parse_agent_state(text) is None
    root = audit_root(auditroot.HGX)
    path = state_file(root)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    with Host(root) as h:
        assert read_agent_state(h) is None
        assert active_profile(h).source == "persisted"  # the garbage state is not believed
        assert active_profile(h).name == "base"
        report = run_audit(h, only=["tuning"])
    assert report.problems == ()
    assert contested(report.findings) == []
    assert report.profile == "base"


def test_unreadable_state_is_absent(root: Path) -> None:
    path = state_file(root)
    path.mkdir(parents=True)  # EISDIR: not a file the audit can read
    with Host(root) as h:
        assert read_agent_state(h) is None
        report = run_audit(h, only=["tuning"])
    assert report.problems == () and contested(report.findings) == []


def test_no_state_file(root: Path) -> None:
    with Host(root) as h:
        assert read_agent_state(h) is None
        assert contested(run_audit(h, only=["tuning"]).findings) == []


@pytest.mark.parametrize(
    "state",
    [
        STATE,
        AgentState(1, "base", "", "report", "t0", "t1"),
        AgentState(
            7,
            "base",
            "/etc/mcpnode/agent.toml",
            "remediate",
            "t0",
            "t1",
            (
                ContestedKey("b.key", 5, 0.5, "s", None),
                ContestedKey("a.key", 1, 3600.0, "s", "4096 131072 6291456"),
            ),
            0,
        ),
    ],
    ids=["contested", "minimal", "value-none"],
)
def test_parse_round_trips_to_json(state: AgentState) -> None:
    text = state.to_json()
    assert text.endswith("\n")
    assert parse_agent_state(text) == state
    assert json.loads(text)["contested"] == [c.__dict__ for c in state.contested]


def test_pinned_defaults_to_zero() -> None:
    doc = json.loads(STATE.to_json())
    del doc["pinned"]
    parsed = parse_agent_state(json.dumps(doc))
    assert parsed is not None and parsed.pinned == 0


STALE_CHILD = r"""
import json, os, subprocess, sys
sys.path.insert(0, sys.argv[1])
subprocess.run(["mount", "--make-rprivate", "/"], check=True)
subprocess.run(["mount", "-t", "tmpfs", "tmpfs", "/run"], check=True)
from mcpnode.state.agentstate import AgentState, read_agent_state, write_agent_state
from mcpnode.host import Host

dead = subprocess.Popen(["true"]); dead.wait()  # a pid that existed and is gone
out = {}
with Host("/") as host:
    for name, pid in (("alive", os.getpid()), ("dead", dead.pid)):
        write_agent_state(host, AgentState(pid, "net-test", "/etc/mcpnode/mcpnode.toml",
                                           "remediate", "t0", "t1"))
        state = read_agent_state(host)
        out[name] = None if state is None else state.profile
print(json.dumps(out))
"""


def test_stale_state_of_a_dead_agent_is_ignored_on_the_live_root() -> None:
    """On the live root the state file counts only while its pid lives (a SIGKILLed agent
    leaves it behind). Run in a private mount namespace with a tmpfs /run."""
    import os
    import shutil
    import subprocess
    import sys

    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare --mount for a private /run")
    repo = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [
            *("unshare", "--mount", "--propagation", "private", "--"),
            *(sys.executable, "-c", STALE_CHILD, str(repo)),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if proc.returncode != 0 and "unshare" in proc.stderr:
        pytest.skip(f"cannot create a mount namespace here: {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"alive": "net-test", "dead": None}
