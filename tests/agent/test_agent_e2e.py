"""`mcpnode agent` end to end on a temporary root: a copy of the HGX H100 fixture (8 GPUs, 8
ConnectX-7, NVML answers replayed) with the base profile's `vm.*`/`kernel.*`/`net.*` files as
plain files, so nothing of this machine is written. The `net.*` keys against a real kernel,
real veth events and a hostile writer live in test_agent_netns.py.

One agent runs through the whole lifecycle per module (starting one costs ~0.5 s):
READY/STATUS/WATCHDOG -> drift restored -> device hot-unplug/replug (GPU, NIC) through
injected udev events -> SIGHUP with a changed profile -> SIGHUP with a broken config ->
SIGTERM with rollback. Each test asserts one step on the shared record.
"""

from __future__ import annotations

import itertools
import json
import shutil
import signal
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from tests.support import auditroot
from tests.support.agentproc import AgentProc
from tests.support.fixtures import RootFactory

GPU = "0000:18:00.0"  # GPU 0
NIC = "0000:19:00.0"  # mlx5_0, beside GPU 0
INTERVAL = 0.3

CONFIG = f"""
[tuning]
profile = "base"
rollback = "on-stop"
[drift]
interval = {INTERVAL}
[metrics]
listen = "127.0.0.1:0"
[export]
kinds = ["prom", "nfd"]
[log]
level = "debug"
"""

LATENCY_PROFILE = """
[profile]
name = "switch-test"
summary = "base plus a larger max_map_count: a profile switch on reload"
include = ["base"]
[sysctl]
# Test: a key base does not set, so a switch has something to apply.
"vm.max_map_count" = 1048576
"""


FEATURES = "etc/kubernetes/node-feature-discovery/features.d/mcpnode"
TEXTFILE = "var/lib/node_exporter/textfile_collector/mcpnode.prom"


def sysctl(root: Path, key: str) -> Path:
    return root / "proc/sys" / key.replace(".", "/")


def manifest(root: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((root / "run/mcpnode/manifest.json").read_text())
    return doc


@dataclass
class Unplugged:
    moved: list[tuple[Path, Path]] = field(default_factory=list)
    links: list[tuple[Path, str]] = field(default_factory=list)


def unplug(root: Path, address: str, parking: Path) -> Unplugged:
    """What the kernel does on a surprise removal, as far as sysfs shows it: the device's
    directory goes, and with it the bus and class links that pointed into it."""
    device = auditroot.device_dir(root, address)
    out = Unplugged()
    parking.mkdir(parents=True, exist_ok=True)
    dest = parking / address
    shutil.move(str(device), dest)
    out.moved.append((device, dest))
    for top in ("sys/bus/pci/devices", "sys/class/net", "sys/class/infiniband"):
        d = root / top
        if not d.is_dir():
            continue
        for link in d.iterdir():
            if link.is_symlink() and not link.exists():
                out.links.append((link, str(link.readlink())))
                link.unlink()
    return out


def replug(u: Unplugged) -> None:
    for device, dest in u.moved:
        shutil.move(str(dest), device)
    for link, target in u.links:
        link.symlink_to(target)


@dataclass
class Run:
    root: Path
    agent: AgentProc
    steps: dict[str, Any]
    rc: int | None = None


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    tmp = tmp_path_factory.mktemp("agent")
    root = auditroot.build(tmp, auditroot.HGX)
    (root / "etc/mcpnode").mkdir(parents=True, exist_ok=True)
    (root / "etc/mcpnode/mcpnode.toml").write_text(CONFIG)
    (root / "etc/mcpnode/profiles").mkdir(parents=True, exist_ok=True)
    (root / "etc/mcpnode/profiles/switch-test.toml").write_text(LATENCY_PROFILE)
    agent = AgentProc(["--root", str(root)], tmp, watchdog_usec=400_000)
    steps: dict[str, Any] = {}
    r = Run(root, agent, steps)
    try:
        steps["ready"] = agent.wait_message("READY=1")
        steps["listening"] = agent.wait_event("metrics.listening")
        steps["manifest0"] = manifest(root)
        steps["features"] = (root / FEATURES).read_text()
        steps["features_read_at"] = datetime.now(timezone.utc)
        steps["textfile_at_ready"] = (root / TEXTFILE).is_file()

        # drift: a key changed behind the agent's back is restored within one interval
        t = agent.now()
        sysctl(root, "vm.swappiness").write_text("60\n")
        steps["drift_written_at"] = t
        steps["remediated"] = agent.wait_event("drift.remediated", t, key="vm.swappiness")
        steps["swappiness_after"] = sysctl(root, "vm.swappiness").read_text().strip()

        # metrics, scraped for real
        port = int(steps["listening"]["address"].rsplit(":", 1)[1])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            steps["metrics"] = resp.read().decode()

        # GPU unplugged, then back; then a NIC
        parking = tmp / "parking"
        for name, address in (("gpu", GPU), ("nic", NIC)):
            t = agent.now()
            u = unplug(root, address, parking / name)
            agent.inject(source="udev", action="remove", subsystem="pci", name=address)
            steps[f"{name}_removed"] = agent.wait_event("rediscover", t)
            steps[f"{name}_removed_published"] = agent.event("manifest.published", t)
            steps[f"{name}_manifest_removed"] = manifest(root)
            t = agent.now()
            replug(u)
            agent.inject(source="udev", action="add", subsystem="pci", name=address)
            steps[f"{name}_added"] = agent.wait_event("rediscover", t)
            steps[f"{name}_manifest_added"] = manifest(root)

        # SIGHUP with a changed profile
        t = agent.now()
        (root / "etc/mcpnode/mcpnode.toml").write_text(
            CONFIG.replace('profile = "base"', 'profile = "switch-test"')
        )
        agent.signal(signal.SIGHUP)
        steps["reloaded"] = agent.wait_event("config.reloaded", t)
        steps["reload_ready"] = agent.wait_message("READY=1", t)
        steps["reload_reloading"] = agent.message("RELOADING=1", t)
        steps["max_map_count"] = sysctl(root, "vm.max_map_count").read_text().strip()

        # SIGHUP with a broken config: rejected, the old one kept
        t = agent.now()
        (root / "etc/mcpnode/mcpnode.toml").write_text(
            CONFIG.replace('profile = "base"', 'profile = "switch-test"').replace(
                "interval =", "intervall ="
            )
        )
        agent.signal(signal.SIGHUP)
        steps["rejected"] = agent.wait_event("config.rejected", t)
        steps["rejected_ready"] = agent.wait_message("READY=1", t)
        t = agent.now()
        sysctl(root, "vm.swappiness").write_text("61\n")
        steps["remediated_after_reject"] = agent.wait_event(
            "drift.remediated", t, key="vm.swappiness"
        )

        # SIGTERM: STOPPING=1, rollback, exit 0
        t = agent.now()
        steps["stop_at"] = t
        r.rc = agent.stop()
        steps["stopping"] = agent.message("STOPPING=1", t)
        steps["rollback"] = agent.event("rollback", t)
        steps["swappiness_final"] = sysctl(root, "vm.swappiness").read_text().strip()
        steps["max_map_count_final"] = sysctl(root, "vm.max_map_count").read_text().strip()
        steps["left_at_stop"] = {p: (root / p).exists() for p in (FEATURES, TEXTFILE)}
        yield r
    finally:
        agent.close()


def test_ready_status_and_watchdog(run: Run) -> None:
    _t, ready = run.steps["ready"]
    fields = ready.split("\n")
    assert fields[0] == "READY=1"
    status = fields[1]
    assert status.startswith("STATUS=profile base: in profile; 8 GPU(s), 9 NIC(s); pinned 0")
    # WatchdogSec=0.4 s: pinged every 0.2 s from the loop
    pings = [t for t, m in run.agent.messages if m == "WATCHDOG=1"]
    assert len(pings) >= 5, run.agent.messages
    gaps = [b - a for a, b in itertools.pairwise(pings)]
    assert max(gaps) < 0.4, gaps


def test_first_publish_before_ready(run: Run) -> None:
    m = run.steps["manifest0"]
    assert len(m["gpus"]) == 8
    published = run.agent.event("manifest.published", reason="start")
    assert published is not None and published["_t"] <= run.steps["ready"][0]
    assert run.steps["textfile_at_ready"]
    assert (run.root / "etc/kubernetes/node-feature-discovery/features.d").is_dir()


def test_drift_restored_within_one_interval(run: Run) -> None:
    assert run.steps["swappiness_after"] == "10"
    e = run.steps["remediated"]
    assert e["old"] == "60" and e["new"] == "10"
    assert e["_t"] - run.steps["drift_written_at"] < INTERVAL + 0.5
    drift = run.agent.event("drift", key="vm.swappiness")
    assert drift is not None and drift["actual"] == "60" and drift["mode"] == "remediate"


def test_metrics_scraped(run: Run) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(run.steps["metrics"])
        for s in fam.samples
    }
    assert samples[("mcpnode_gpus", ())] == 8
    assert samples[("mcpnode_nics", ())] == 9
    assert samples[("mcpnode_drift_remediated_total", (("key", "vm.swappiness"),))] >= 1
    assert samples[("mcpnode_ready", ())] == 1
    assert samples[("mcpnode_apply_last_result", (("result", "ok"),))] == 1


@pytest.mark.parametrize("name", ["gpu", "nic"])
def test_device_unplug_and_replug_republish(run: Run, name: str) -> None:
    removed = run.steps[f"{name}_removed"]
    added = run.steps[f"{name}_added"]
    address = GPU if name == "gpu" else NIC
    key = "gpus" if name == "gpu" else "nics"
    assert removed[f"{key}_removed"] == [address]
    assert added[f"{key}_added"] == [address]
    before = run.steps["manifest0"]
    after_remove = run.steps[f"{name}_manifest_removed"]
    after_add = run.steps[f"{name}_manifest_added"]
    assert len(after_remove[key]) == len(before[key]) - 1
    assert len(after_add[key]) == len(before[key])
    assert after_remove["content_hash"] != before["content_hash"]
    assert run.steps[f"{name}_removed_published"] is not None


def test_sighup_switches_profile(run: Run) -> None:
    assert run.steps["reload_reloading"] is not None
    assert run.steps["reload_reloading"][0] <= run.steps["reload_ready"][0]
    e = run.steps["reloaded"]
    assert e["profile"] == "switch-test" and e["previous_profile"] == "base"
    assert run.steps["max_map_count"] == "1048576"
    assert "STATUS=profile switch-test" in run.steps["reload_ready"][1]


def test_sighup_with_broken_config_keeps_the_old_one(run: Run) -> None:
    e = run.steps["rejected"]
    assert "drift.intervall" in e["error"] and "unknown key" in e["error"]
    assert e["profile"] == "switch-test"
    # READY=1 follows even a rejected reload (systemd waits for it after RELOADING=1)
    assert "STATUS=profile switch-test" in run.steps["rejected_ready"][1]
    assert run.steps["remediated_after_reject"]["new"] == "10"


def test_sigterm_rolls_back_and_exits_zero(run: Run) -> None:
    assert run.rc == 0, run.agent.stderr_tail()
    assert run.steps["stopping"] is not None
    assert run.steps["rollback"] is not None
    # originals: 61 was journaled when the agent remediated it; max_map_count from the fixture
    assert run.steps["swappiness_final"] in ("60", "61")
    assert run.steps["max_map_count_final"] == auditroot.BASE_SYSCTLS.get(
        "vm.max_map_count", run.steps["max_map_count_final"]
    )
    assert not (run.root / "run/mcpnode/agent.json").exists()


def test_bad_config_at_start_exits_78_with_the_reason(
    tmp_path: Path, audit_root: RootFactory
) -> None:
    root = audit_root(auditroot.HGX)
    (root / "etc/mcpnode").mkdir(parents=True, exist_ok=True)
    (root / "etc/mcpnode/mcpnode.toml").write_text('[drift]\nmode = "fix"\n')
    agent = AgentProc(["--root", str(root)], tmp_path)
    try:
        rc = agent.stop(timeout=30) if agent.proc.wait(30) is None else agent.proc.returncode
        agent.stop()
    finally:
        agent.close()
    assert rc == 78
    failed = agent.event("agent.start-failed")
    assert failed is not None and "drift.mode" in failed["error"]
    assert agent.message("READY=1") is None
    # nothing was applied: the journal was never written
    assert not (root / "var/lib/mcpnode/tuning-journal.json").exists()


def test_missing_profile_at_start_exits_78(tmp_path: Path, audit_root: RootFactory) -> None:
    root = audit_root(auditroot.HGX)
    (root / "etc/mcpnode").mkdir(parents=True, exist_ok=True)
    (root / "etc/mcpnode/mcpnode.toml").write_text('[tuning]\nprofile = "no-such"\n')
    agent = AgentProc(["--root", str(root)], tmp_path, abstract=True)
    try:
        agent.proc.wait(30)
        agent.stop()
    finally:
        agent.close()
    assert agent.proc.returncode == 78
    failed = agent.event("agent.start-failed")
    assert failed is not None and "tuning.profile" in failed["error"]
    # the abstract NOTIFY_SOCKET got the reason as STATUS
    assert any(m.startswith("STATUS=start failed") for _t, m in agent.messages)


def test_abstract_notify_socket(tmp_path: Path, audit_root: RootFactory) -> None:
    root = audit_root(auditroot.HGX)
    (root / "etc/mcpnode").mkdir(parents=True, exist_ok=True)
    (root / "etc/mcpnode/mcpnode.toml").write_text('[metrics]\nlisten = ""\n')
    agent = AgentProc(["--root", str(root)], tmp_path, abstract=True, watchdog_usec=None)
    try:
        agent.wait_message("READY=1")
        t = agent.now()
        rc = agent.stop()
        time.sleep(0.05)
    finally:
        agent.close()
    assert rc == 0
    assert agent.message("STOPPING=1", t) is not None
    assert not any(m == "WATCHDOG=1" for _t, m in agent.messages)


def test_agent_autopins_a_gpu_process(tmp_path: Path, placed_root: Path) -> None:
    """The running agent pins a real process NVML lists on GPU 0 (replayed: the recording's
    compute-process answer names the child), all threads, to GPU 0's slice; a second one that
    narrowed its own affinity is left alone. The root is shaped like this 2-CPU machine."""
    import os
    import subprocess
    import sys

    from tests.support import placeroot

    reason = placeroot.skip_reason()
    if reason:
        pytest.skip(reason)
    child_code = (
        "import os, sys, threading, time\n"
        "if sys.argv[1] == 'narrow': os.sched_setaffinity(0, {0})\n"
        "threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
        "print('ready', flush=True); time.sleep(60)\n"
    )
    kids = [
        subprocess.Popen(
            [sys.executable, "-c", child_code, mode, "--mcpnode-autopin-worker"],
            stdout=subprocess.PIPE,
            text=True,
        )
        for mode in ("free", "narrow")
    ]
    try:
        for k in kids:
            assert k.stdout is not None and k.stdout.readline() == "ready\n"
        root = placed_root
        meta_path = root / "mcpnode-snapshot.json"
        meta = json.loads(meta_path.read_text())
        for call in meta["nvml"]["calls"]:
            if call["fn"] == "nvmlDeviceGetComputeRunningProcesses" and call["args"] == [0]:
                call.pop("error", None)
                call["value"] = [{"pid": k.pid, "usedGpuMemory": 1 << 30} for k in kids]
        meta_path.write_text(json.dumps(meta))
        (root / "etc/mcpnode").mkdir(parents=True)
        (root / "etc/mcpnode/mcpnode.toml").write_text(
            '[tuning]\nprofile = "base"\n[metrics]\nlisten = ""\n'
            "[autopin]\nenabled = true\ninterval = 0.2\n"
            '[[autopin.rule]]\nname = "worker"\ncmdline = "--mcpnode-autopin-worker"\n'
        )
        agent = AgentProc(["--root", str(root)], tmp_path, watchdog_usec=None)
        try:
            pin = agent.wait_event("pin", pid=kids[0].pid)
            left = agent.wait_event("pin.left-alone", pid=kids[1].pid)
            status = agent.wait_for(
                "STATUS with the pin", lambda: any("pinned 1;" in m for _t, m in agent.messages)
            )
            time.sleep(0.5)  # two more scans: nothing is pinned or logged twice
            pins = [e for e in agent.events if e.get("event") == "pin"]
            lefts = [e for e in agent.events if e.get("event") == "pin.left-alone"]
            rc = agent.stop()
        finally:
            agent.close()
        assert rc == 0
        assert pin["rule"] == "worker" and pin["threads"] >= 2
        assert left["rule"] == "worker"
        assert len(pins) == 1 and len(lefts) == 1
        assert status is not None
        for tid in os.listdir(f"/proc/{kids[0].pid}/task"):
            assert os.sched_getaffinity(int(tid)) == placeroot.SLICE
        assert os.sched_getaffinity(kids[1].pid) == {0}
    finally:
        for k in kids:
            k.kill()
            k.wait()


def test_closed_injection_pipe_does_not_spin(tmp_path: Path, audit_root: RootFactory) -> None:
    """EOF on the --inject-fd pipe stays readable forever; the agent must stop watching it
    (it spun at 100 % of a core before) and go on idling."""
    import os

    root = audit_root(auditroot.HGX)
    (root / "etc/mcpnode").mkdir(parents=True, exist_ok=True)
    (root / "etc/mcpnode/mcpnode.toml").write_text('[metrics]\nlisten = ""\n')
    agent = AgentProc(["--root", str(root)], tmp_path, watchdog_usec=None)
    try:
        agent.wait_message("READY=1")
        os.close(agent.inject_fd)
        agent.wait_event("inject.closed")
        ticks = os.sysconf("SC_CLK_TCK")

        def cpu_s() -> float:
            fields = Path(f"/proc/{agent.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / ticks

        before = cpu_s()
        time.sleep(1.0)
        used = cpu_s() - before
        rc = agent.stop()
    finally:
        agent.close()
    assert used < 0.2, f"{used:.2f} s of CPU in 1 s after the pipe closed"
    assert rc == 0


def test_report_mode_reports_and_republishes(tmp_path: Path, audit_root: RootFactory) -> None:
    """drift.mode = "report": the key is logged and counted, never written back, and the
    manifest and the node_exporter textfile say it is in drift (they are republished when
    the set of drifted keys changes)."""
    root = audit_root(auditroot.HGX)
    (root / "etc/mcpnode").mkdir(parents=True, exist_ok=True)
    (root / "etc/mcpnode/mcpnode.toml").write_text(
        f'[drift]\nmode = "report"\ninterval = {INTERVAL}\n[metrics]\nlisten = ""\n'
    )
    agent = AgentProc(["--root", str(root)], tmp_path, watchdog_usec=None)
    try:
        agent.wait_message("READY=1")
        t = agent.now()
        sysctl(root, "vm.swappiness").write_text("60\n")
        drift = agent.wait_event("drift", t, key="vm.swappiness")
        published = agent.wait_event("manifest.published", t, reason="drift")
        time.sleep(3 * INTERVAL)
        remediated = agent.event("drift.remediated", t)
        status = agent.message(
            "STATUS=profile base: 1 key(s) drifted; 8 GPU(s), 9 NIC(s); "
            f"pinned 0; drift report every {INTERVAL:g}s",
            t,
        )
        prom = (root / TEXTFILE).read_text()  # before the stop removes it
        rc = agent.stop()
    finally:
        agent.close()
    assert rc == 0
    assert drift["mode"] == "report" and drift["actual"] == "60"
    assert remediated is None
    assert sysctl(root, "vm.swappiness").read_text().strip() == "60"
    assert published is not None and status is not None
    doc = manifest(root)
    assert doc["tuning"]["compliant"] is False
    assert [d["key"] for d in doc["tuning"]["drift"]] == ["vm.swappiness"]
    assert 'mcpnode_tuning_compliant{profile="base"} 0.0' in prom
    assert "mcpnode_tuning_drift_keys 1.0" in prom


def test_unreadable_journal_stops_writes_not_the_agent(
    tmp_path: Path, audit_root: RootFactory
) -> None:
    """A journal that cannot be trusted stops every apply (STYLE: never treated as empty):
    mid-run the drift is reported and not written, the agent keeps running and says so in
    STATUS; at start it refuses to run (exit 1), before anything is written."""
    root = audit_root(auditroot.HGX)
    (root / "etc/mcpnode").mkdir(parents=True, exist_ok=True)
    (root / "etc/mcpnode/mcpnode.toml").write_text(
        f'[drift]\ninterval = {INTERVAL}\n[metrics]\nlisten = ""\n'
    )
    journal = root / "var/lib/mcpnode/tuning-journal.json"
    agent = AgentProc(["--root", str(root)], tmp_path, watchdog_usec=None)
    try:
        agent.wait_message("READY=1")
        journal.parent.mkdir(parents=True, exist_ok=True)
        journal.write_text("{ not json")
        t = agent.now()
        sysctl(root, "vm.swappiness").write_text("60\n")
        failed = agent.wait_event("apply.failed", t, reason="drift")
        status = agent.wait_for(
            "STATUS apply FAILED",
            lambda: any(
                "STATUS=profile base: apply FAILED;" in m for at, m in agent.messages if at >= t
            ),
        )
        time.sleep(3 * INTERVAL)  # retried every interval, but said once
        errors = [e for e in agent.events if e.get("event") == "apply.failed"]
        rc = agent.stop()
    finally:
        agent.close()
    assert rc == 0 and status is not None
    assert "tuning-journal.json" in failed["error"]
    assert [e["level"] for e in errors] == ["error"]  # retried at debug, which info hides
    assert sysctl(root, "vm.swappiness").read_text().strip() == "60"

    again = AgentProc(["--root", str(root)], tmp_path, watchdog_usec=None)
    try:
        again.proc.wait(30)
        again.stop()
    finally:
        again.close()
    assert again.proc.returncode == 1
    start = again.event("agent.start-failed")
    assert start is not None and "recovering the tuning journal" in start["error"]


def test_an_exporter_that_cannot_be_written_does_not_stop_the_agent(
    tmp_path: Path, audit_root: RootFactory
) -> None:
    """node_exporter's directory is a file here: the textfile cannot be written. The agent
    says so (export.failed, with the path) and still publishes the manifest and gets READY."""
    root = audit_root(auditroot.HGX)
    (root / "etc/mcpnode").mkdir(parents=True, exist_ok=True)
    (root / "etc/mcpnode/mcpnode.toml").write_text('[metrics]\nlisten = ""\n')
    (root / "var/lib").mkdir(parents=True, exist_ok=True)
    (root / "var/lib/node_exporter").write_text("not a directory\n")
    agent = AgentProc(["--root", str(root)], tmp_path, watchdog_usec=None)
    try:
        agent.wait_message("READY=1")
        failed = agent.event("export.failed", kind="prom")
        rc = agent.stop()
    finally:
        agent.close()
    assert rc == 0
    assert failed is not None and "node_exporter" in failed["path"]
    assert manifest(root)["schema"] == "mcpnode.manifest/v1"


def test_feature_file_expires_unless_refreshed(run: Run) -> None:
    """The NFD labels carry `# +expiry-time=` 300 s ahead (the default nfd_expiry), so an agent
    that dies without stopping does not leave them for ever."""
    from mcpnode.placement.exporters import nfd

    expires = nfd.expiry_of(run.steps["features"])
    assert expires is not None
    left = expires - run.steps["features_read_at"]
    assert timedelta(seconds=280) < left <= timedelta(seconds=300)
    assert "mcpnode.io/tuning-compliant=" in run.steps["features"]


def test_sigterm_removes_the_labels_and_the_textfile(run: Run) -> None:
    """A stopped agent vouches for nothing: its NFD labels and textfile series go with it."""
    assert run.rc == 0
    assert run.steps["left_at_stop"] == {FEATURES: False, TEXTFILE: False}
    removed = {e["kind"] for e in run.agent.events if e.get("event") == "export.removed"}
    assert removed == {"nfd", "prom"}
