"""PM QoS `force_latency`: the agent holds `/dev/cpu_dma_latency` open with the value while it
runs (tuned's way); verify reads the latency in force. On a fake root the device is a regular
file standing in for it (the agent writes its 4-byte request there and keeps it open); a device
node in a fake root is never opened; the live device is only read (reading adds a request with
the default value, which changes nothing)."""

from __future__ import annotations

import json
import os
import stat
import struct
from pathlib import Path

import pytest

from mcpnode.errors import NotSupported
from mcpnode.host import Host
from tests.support import auditroot
from tests.support.agentproc import AgentProc
from tests.support.fixtures import RootFactory
from tests.support.tuningcli import run_cli

PROFILE = """\
[profile]
name = "qos"
summary = "CPU latency only"

[cpu]
# Test: 2 us, tuned's latency-performance value.
force_latency = 2
"""
NONE = struct.pack("=i", 2000000000)


@pytest.fixture
def root(audit_root: RootFactory) -> Path:
    r = audit_root(auditroot.HGX)
    (r / "etc/mcpnode/profiles").mkdir(parents=True, exist_ok=True)
    (r / "etc/mcpnode/profiles/qos.toml").write_text(PROFILE)
    (r / "dev").mkdir(exist_ok=True)
    (r / "dev/cpu_dma_latency").write_bytes(NONE)
    return r


def held_by(pid: int, target: Path) -> bool:
    fd_dir = Path(f"/proc/{pid}/fd")
    return any(os.readlink(fd_dir / fd) == str(target) for fd in os.listdir(fd_dir))


def test_the_agent_holds_the_request_while_it_runs(root: Path, tmp_path: Path) -> None:
    (root / "etc/mcpnode/mcpnode.toml").write_text(
        '[tuning]\nprofile = "qos"\n[drift]\ninterval = 0.3\n[metrics]\nlisten = ""\n'
    )
    device = root / "dev/cpu_dma_latency"
    agent = AgentProc(["--root", str(root)], tmp_path, watchdog_usec=None)
    try:
        agent.wait_message("READY=1")
        held = held_by(agent.proc.pid, device)
        event = agent.event("pm-qos.held", 0.0)
        code, out, _ = run_cli(
            "verify", "--profile", "qos", "--root", str(root), "--format", "json"
        )
        pid = agent.proc.pid
        rc = agent.stop()
    finally:
        agent.close()
    assert rc == 0
    assert held and event is not None and event["microseconds"] == 2
    assert device.read_bytes() == struct.pack("=i", 2)
    assert code == 0, out
    item = json.loads(out)["items"][0]
    assert (item["key"], item["action"], item["current"]) == ("cpu:force_latency", "ok", "2")
    assert not Path(f"/proc/{pid}").exists() or not held_by(pid, device)


def test_verify_without_the_agent_reports_drift(root: Path) -> None:
    code, out, _ = run_cli("verify", "--profile", "qos", "--root", str(root), "--format", "json")
    assert code == 1
    (drift,) = json.loads(out)["drift"]
    assert drift["key"] == "cpu:force_latency" and drift["actual"] == "2000000000"
    assert "held only while `mcpnode agent` runs" in drift["reason"]
    # apply cannot hold it: nothing is written, the plan says why.
    code, out, _ = run_cli("apply", "--profile", "qos", "--root", str(root), "--format", "json")
    assert code == 0
    assert json.loads(out)["writes"] == []
    assert (root / "dev/cpu_dma_latency").read_bytes() == NONE


def test_a_device_node_in_a_fake_root_is_never_opened(root: Path) -> None:
    device = root / "dev/cpu_dma_latency"
    device.unlink()
    os.mknod(device, stat.S_IFCHR | 0o600, os.makedev(1, 3))  # /dev/null's numbers
    with pytest.raises(NotSupported):
        Host(root).hold_cpu_latency(2)
    with pytest.raises(NotSupported):
        Host(root).read_cpu_latency()


@pytest.mark.skipif(not Path("/dev/cpu_dma_latency").exists(), reason="no PM QoS device here")
def test_the_live_latency_reads_as_microseconds() -> None:
    value = Host("/").read_cpu_latency()
    assert 0 <= value <= 2000000000
