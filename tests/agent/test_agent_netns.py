"""`mcpnode agent --root /` against the real kernel, harmlessly: inside `unshare --net --mount`.

The fresh network namespace has its own copy of every per-netns `net.*` sysctl, and the
private mount namespace puts tmpfs over /var/lib, /etc/sysctl.d and /run (the journal, the
persisted file, the manifest, the state file), as in test_tuning_netns.py. The profiles come
from a temporary `--profiles-dir` holding only `net.*` keys, so no `vm.*`/`kernel.*` key of
this machine is ever written.

One agent, one child, the whole story:
- READY=1 after the first apply; the `net.*` keys really changed in the namespace;
- a key changed behind the agent's back is restored within one interval (real /proc/sys);
- a real veth pair created and deleted: RTM_NEWLINK/RTM_DELLINK on the agent's rtnetlink
  socket and kernel uevents on its udev monitor (since Linux 4.18 a netdev's uevents go to
  the netns that owns it), seen in its log and its metrics;
- a hostile writer resetting `net.core.somaxconn` every 50 ms: after max_remediations the
  agent stops, names the key, and `mcpnode audit` shows `tuning.contested`;
- SIGHUP with a changed profile: the contested state is cleared, the new key applied;
- SIGHUP with a broken config: rejected, old config kept;
- SIGTERM with rollback = "on-stop": every original back, exit 0.
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

from tests.tuning.test_tuning_netns import read_sysctl, skip_reason

REPO = Path(__file__).resolve().parents[2]
KEYS = (
    "net.core.somaxconn",
    "net.ipv4.tcp_congestion_control",
    "net.ipv4.tcp_notsent_lowat",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.tcp_fin_timeout",
)
INTERVAL = 0.3
MAX_REMEDIATIONS = 3

SWITCHED_PROFILE = """\
[profile]
name = "net-test-2"
summary = "net-test plus a shorter FIN timeout: the profile a reload switches to"
include = ["net-test"]

[sysctl]
# Test only: a per-netns key net-test does not set (kernel default 60).
"net.ipv4.tcp_fin_timeout" = 15
"""

CHILD = r"""
import json, os, signal, subprocess, sys, time
from pathlib import Path

params = json.loads(sys.argv[1])
sys.path.insert(0, params["repo"])
from tests.support.agentproc import AgentProc
from tests.support.nschild import private_tmpfs, set_sysctl, sysctl

keys = params["keys"]
report = {"steps": {}, "errors": []}
steps = report["steps"]

def values():
    return {k: sysctl(k) for k in keys}

KEY = "net.core.somaxconn"

def device_event(t, source, action, device):
    return agent.wait_event("device.event", t, source=source, action=action, device=device)

def remediations(key, after):
    return [e for e in agent.events
            if e.get("event") == "drift.remediated" and e["_t"] >= after and e.get("key") == key]

def scrape(port):
    import urllib.request
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return r.read().decode()

agent = None
hostile = None
try:
    private_tmpfs(["/var/lib", "/etc/sysctl.d", "/run"])
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    set_sysctl("net.ipv4.tcp_congestion_control", "reno")
    report["originals"] = values()
    work = Path("/run/agent-test")
    work.mkdir()
    (work / "mcpnode.toml").write_text(params["config"])
    agent = AgentProc(
        ["--root", "/", "--config", str(work / "mcpnode.toml"),
         "--profiles-dir", params["profiles_dir"]],
        work, watchdog_usec=1_000_000,
    )
    steps["ready"] = agent.wait_message("READY=1", timeout=60)
    steps["applied"] = values()
    port = int(agent.wait_event("metrics.listening")["address"].rsplit(":", 1)[1])

    # drift behind the agent's back
    t = agent.now()
    set_sysctl("net.core.somaxconn", "1024")
    steps["drift_at"] = t
    steps["remediated"] = agent.wait_event("drift.remediated", t, key="net.core.somaxconn")
    steps["after_drift"] = sysctl("net.core.somaxconn")

    # a real veth pair, created and deleted in this namespace
    t = agent.now()
    subprocess.run(["ip", "link", "add", "vt0", "type", "veth", "peer", "name", "vt1"], check=True)
    subprocess.run(["ip", "link", "set", "vt0", "up"], check=True)
    steps["newlink"] = device_event(t, "netlink", "newlink", "vt0")
    steps["udev_add"] = device_event(t, "udev", "add", "vt0")
    t = agent.now()
    subprocess.run(["ip", "link", "del", "vt0"], check=True)
    steps["dellink"] = device_event(t, "netlink", "dellink", "vt1")
    steps["udev_remove"] = device_event(t, "udev", "remove", "vt0")
    steps["metrics_events"] = scrape(port)

    # a hostile writer owning net.core.somaxconn
    t = agent.now()
    hostile = subprocess.Popen([sys.executable, "-c",
        "import time\n"
        "from pathlib import Path\n"
        "p = Path('/proc/sys/net/core/somaxconn')\n"
        "while True:\n"
        "    p.write_text('1024\\n'); time.sleep(0.05)\n"])
    steps["contested"] = agent.wait_event("drift.contested", t, key=KEY, timeout=30)
    steps["remediations_during_fight"] = remediations(KEY, t)
    time.sleep(4 * params["interval"])
    steps["remediations_after_giving_up"] = remediations(KEY, steps["contested"]["_t"] + 1e-6)
    steps["status_contested"] = agent.message("STATUS=" + "", 0)
    audit = subprocess.run(
        [sys.executable, "-m", "mcpnode", "audit", "--root", "/", "--format", "json",
         "--profiles-dir", params["profiles_dir"], "--only", "tuning.*"],
        cwd=params["repo"], capture_output=True, text=True, timeout=120)
    steps["audit"] = {
        "rc": audit.returncode, "stdout": audit.stdout, "stderr": audit.stderr[-3000:]
    }
    steps["metrics_contested"] = scrape(port)
    hostile.kill(); hostile.wait(); hostile = None

    # SIGHUP with a changed profile: the operator fixed the other owner and reloads
    t = agent.now()
    (work / "mcpnode.toml").write_text(params["config"].replace('"net-test"', '"net-test-2"'))
    agent.signal(signal.SIGHUP)
    steps["reloaded"] = agent.wait_event("config.reloaded", t)
    steps["reload_ready"] = agent.wait_message("READY=1", t)
    steps["reload_reloading"] = agent.message("RELOADING=1", t)
    steps["after_reload"] = values()

    # SIGHUP with a broken config: rejected, the old one kept
    t = agent.now()
    (work / "mcpnode.toml").write_text("[drift]\nmode = 'sometimes'\n")
    agent.signal(signal.SIGHUP)
    steps["rejected"] = agent.wait_event("config.rejected", t)
    steps["rejected_ready"] = agent.wait_message("READY=1", t)
    t = agent.now()
    set_sysctl("net.ipv4.tcp_fin_timeout", "60")
    steps["remediated_after_reject"] = agent.wait_event(
        "drift.remediated", t, key="net.ipv4.tcp_fin_timeout"
    )

    # SIGTERM: STOPPING=1, rollback, exit 0
    t = agent.now()
    steps["rc"] = agent.stop()
    steps["stopping"] = agent.message("STOPPING=1", t)
    steps["rollback"] = agent.event("rollback", t)
    steps["final"] = values()
    steps["watchdogs"] = sum(1 for _t, m in agent.messages if m == "WATCHDOG=1")
except Exception as err:
    report["errors"].append(f"{type(err).__name__}: {err}")
finally:
    if hostile is not None:
        hostile.kill()
    if agent is not None:
        report["log_tail"] = agent.stderr_tail(60)
        agent.close()
print(json.dumps(report))
"""

CONFIG = f"""
[tuning]
profile = "net-test"
rollback = "on-stop"
[drift]
interval = {INTERVAL}
max_remediations = {MAX_REMEDIATIONS}
window = 60
[devices]
udev_source = "kernel"
[metrics]
listen = "127.0.0.1:0"
[log]
level = "debug"
"""

pytestmark = pytest.mark.live


@pytest.fixture(scope="module")
def story(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    if shutil.which("ip") is None:
        pytest.skip("`ip` (iproute2) is not installed: cannot create a veth pair")
    profiles = tmp_path_factory.mktemp("profiles")
    shutil.copy(REPO / "tests" / "profiles" / "net-test.toml", profiles / "net-test.toml")
    (profiles / "net-test-2.toml").write_text(SWITCHED_PROFILE)
    host_before = {k: read_sysctl(k) for k in KEYS}
    params = {
        "repo": str(REPO),
        "keys": list(KEYS),
        "config": CONFIG,
        "profiles_dir": str(profiles),
        "interval": INTERVAL,
    }
    proc = subprocess.run(
        [
            *("unshare", "--net", "--mount", "--propagation", "private", "--"),
            *(sys.executable, "-c", CHILD, json.dumps(params)),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    host_after = {k: read_sysctl(k) for k in KEYS}
    assert proc.returncode == 0, proc.stderr[-5000:]
    report: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    report["host_before"], report["host_after"] = host_before, host_after
    assert not report["errors"], f"{report['errors']}\n{report.get('log_tail', '')}"
    return report


def steps(story: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = story["steps"]
    return result


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    from prometheus_client.parser import text_string_to_metric_families

    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def test_this_machine_is_untouched(story: dict[str, Any]) -> None:
    assert story["host_after"] == story["host_before"]


def test_ready_after_the_profile_is_applied(story: dict[str, Any]) -> None:
    s = steps(story)
    assert s["ready"][1].startswith("READY=1\nSTATUS=profile net-test: in profile")
    assert s["applied"]["net.core.somaxconn"] == "65535"
    assert s["applied"]["net.ipv4.tcp_congestion_control"] != "reno"
    assert s["watchdogs"] >= 2


def test_drift_restored_on_the_real_kernel(story: dict[str, Any]) -> None:
    s = steps(story)
    assert s["after_drift"] == "65535"
    assert s["remediated"]["old"] == "1024"
    assert s["remediated"]["_t"] - s["drift_at"] < INTERVAL + 0.5


def test_real_veth_events_are_seen(story: dict[str, Any]) -> None:
    s = steps(story)
    assert s["newlink"]["subsystem"] == "net"
    assert "/virtual/net/vt0" in s["udev_add"]["detail"]
    assert s["udev_remove"]["action"] == "remove"
    got = samples(s["metrics_events"])
    assert got[("mcpnode_events_total", (("source", "netlink"),))] >= 3
    assert got[("mcpnode_events_total", (("source", "udev"),))] >= 2


def test_hostile_writer_is_not_fought_forever(story: dict[str, Any]) -> None:
    s = steps(story)
    contested = s["contested"]
    assert contested["remediations"] == MAX_REMEDIATIONS
    assert contested["value"] == "1024"
    assert len(s["remediations_during_fight"]) <= MAX_REMEDIATIONS
    assert s["remediations_after_giving_up"] == []
    got = samples(s["metrics_contested"])
    assert got[("mcpnode_drift_given_up", (("key", "net.core.somaxconn"),))] == 1


def test_contested_key_is_an_audit_finding(story: dict[str, Any]) -> None:
    audit = steps(story)["audit"]
    assert audit["rc"] in (0, 1), audit["stderr"]
    doc = json.loads(audit["stdout"])
    found = [f for f in doc["findings"] if f["id"] == "tuning.contested"]
    assert len(found) == 1, doc["findings"]
    assert found[0]["status"] == "WARN"
    assert found[0]["subject"] == "net.core.somaxconn"
    assert "systemctl reload mcpnode" in found[0]["remedy"]
    assert doc["profile"] == "net-test"


def test_sighup_switches_profile_and_clears_contested(story: dict[str, Any]) -> None:
    s = steps(story)
    assert s["reload_reloading"] is not None
    assert s["reloaded"]["profile"] == "net-test-2"
    assert s["after_reload"]["net.ipv4.tcp_fin_timeout"] == "15"
    assert s["after_reload"]["net.core.somaxconn"] == "65535"  # remediated again after reload


def test_sighup_with_broken_config_is_rejected(story: dict[str, Any]) -> None:
    s = steps(story)
    assert "drift.mode" in s["rejected"]["error"]
    assert "STATUS=profile net-test-2" in s["rejected_ready"][1]
    assert s["remediated_after_reject"]["new"] == "15"


def test_sigterm_rolls_back_every_original(story: dict[str, Any]) -> None:
    s = steps(story)
    assert s["rc"] == 0, story.get("log_tail")
    assert s["stopping"] is not None and s["rollback"] is not None
    assert s["final"] == story["originals"]


REFUSED_PROFILE = """\
[profile]
name = "net-refused"
summary = "one key the kernel refuses, one it takes"

[sysctl]
# Test only: no such congestion control exists, so the kernel answers ENOENT on the write.
"net.ipv4.tcp_congestion_control" = "nosuchcc"
# Test only: the key that must still be applied.
"net.core.somaxconn" = 65535
"""

REFUSED_CHILD = r"""
import json, subprocess, sys, time
from pathlib import Path

params = json.loads(sys.argv[1])
sys.path.insert(0, params["repo"])
from tests.support.agentproc import AgentProc
from tests.support.nschild import private_tmpfs

report = {"errors": []}
agent = None
try:
    private_tmpfs(["/var/lib", "/etc/sysctl.d", "/run"])
    work = Path("/run/agent-test")
    work.mkdir()
    (work / "mcpnode.toml").write_text(params["config"])
    somaxconn = Path("/proc/sys/net/core/somaxconn")
    report["original"] = somaxconn.read_text().strip()
    agent = AgentProc(
        ["--root", "/", "--config", str(work / "mcpnode.toml"),
         "--profiles-dir", params["profiles_dir"]],
        work, watchdog_usec=None,
    )
    report["ready"] = agent.wait_message("READY=1", timeout=60)
    report["applied"] = somaxconn.read_text().strip()
    t = agent.now()
    time.sleep(6 * params["interval"])
    report["writes_after_ready"] = [
        e for e in agent.events if e.get("event") in ("write", "undo") and e["_t"] >= t
    ]
    report["unappliable"] = agent.event("apply.key-unappliable")
    report["rc"] = agent.stop()
    report["final"] = somaxconn.read_text().strip()
except Exception as err:
    report["errors"].append(f"{type(err).__name__}: {err}")
finally:
    if agent is not None:
        report["log_tail"] = agent.stderr_tail(40)
        agent.close()
print(json.dumps(report))
"""


def test_a_key_the_kernel_refuses_is_set_aside_not_retried(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Seen on a real H200 guest: `net.core.default_qdisc = fq` without sch_fq fails with
    ENOENT, apply undid the whole profile, and the agent retried every interval. Now the key
    is set aside, the rest applied once, and nothing is rewritten afterwards."""
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    profiles = tmp_path_factory.mktemp("refused")
    (profiles / "net-refused.toml").write_text(REFUSED_PROFILE)
    config = CONFIG.replace('"net-test"', '"net-refused"')
    params = {
        "repo": str(REPO),
        "config": config,
        "profiles_dir": str(profiles),
        "interval": INTERVAL,
    }
    host_before = read_sysctl("net.core.somaxconn")
    proc = subprocess.run(
        [
            *("unshare", "--net", "--mount", "--propagation", "private", "--"),
            *(sys.executable, "-c", REFUSED_CHILD, json.dumps(params)),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert read_sysctl("net.core.somaxconn") == host_before
    assert proc.returncode == 0, proc.stderr[-3000:]
    report: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    assert not report["errors"], f"{report['errors']}\n{report.get('log_tail', '')}"
    assert "1 key(s) cannot be applied" in report["ready"][1]
    assert report["applied"] == "65535"
    bad = report["unappliable"]
    assert bad is not None and bad["key"] == "net.ipv4.tcp_congestion_control"
    assert report["writes_after_ready"] == []  # no write storm
    assert report["rc"] == 0
    assert report["final"] == report["original"], report.get("log_tail")
