"""The agent puts back a `[nic]` key another party changed: `mcpnode agent --root /` applies a
profile's rings and channels through `ethtool`, someone runs `ethtool -G` behind its back, and
the next drift check writes the profile's rings again; at stop it rolls back to the originals.

`ethtool` is the recorded stand-in (tests/support/fake_ethtool.py) first on PATH, so no NIC is
touched: its reads are the agent's `Host.command`, its writes `Host.run_change`, both of which
run only on the live root. The agent runs inside `unshare --net --mount` with tmpfs over
/var/lib, /etc/sysctl.d and /run, as in test_agent_netns.py. The child refuses to start it
when auto-pin is on, when `ethtool` is not the stand-in, or when a place the agent writes on a
live root (the journal and its lock, the state file, the manifest, the exporters' files, the
persisted sysctl file, the directories where a run sweeps its dead temporaries, its
configuration) does not land on those mounts or in the test's temporary directory. The profile
holds `[nic]` keys only: no PM QoS request, no file of this machine to write.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mcpnode.tuning.profile import parse_profile
from tests.support.nschild import run_child
from tests.tuning.test_nic_queues import fake_path
from tests.tuning.test_tuning_netns import skip_reason

REPO = Path(__file__).resolve().parents[2]
INTERVAL = 0.3
KEY = "nic:rings:eth-a"
TMPFS = ["/var/lib", "/etc/sysctl.d", "/run"]

PROFILE = """\
[profile]
summary = "one NIC's rings and channels, for the agent's drift test"

[nic]
# Test only: the stand-in's NIC (rings 1024 of 8192, 32 of 63 combined channels).
devices = ["eth-a"]
# Test only: the driver's pre-set maximum, 8192.
rings = "max"
# Test only: more queues than the NIC has now, fewer than its maximum.
combined_channels = 48
"""

CONFIG = f"""
[tuning]
profile = "nic-test"
rollback = "on-stop"
[drift]
interval = {INTERVAL}
[devices]
udev_source = "off"
[metrics]
listen = ""
[health]
nvml_events = false
[export]
kinds = ["nfd", "prom"]
nfd_dir = "/run/agent-test/features.d"
"""

CHILD = r"""
import json, os, posixpath, shutil, subprocess, sys
from pathlib import Path

params = json.loads(sys.argv[1])
sys.path.insert(0, params["repo"])
from mcpnode.agent.config import parse_config
from mcpnode.published import MANIFEST_DIR
from mcpnode.state.agentstate import AGENT_STATE_PATH
from mcpnode.state.places import STATE_DIR
from mcpnode.tuning.apply import ATOMIC_FILES
from mcpnode.tuning.paths import PERSIST_PATH
from tests.support.agentproc import AgentProc
from tests.support.nschild import lands_on, private_tmpfs, refuse_unless_private

report = {"errors": []}
agent = None
nics = Path(os.environ["FAKE_ETHTOOL_STATE"])

def state():
    return json.loads(nics.read_text())

try:
    # Every apply and rollback sweeps a dead writer's temporaries beside each file the tuning
    # engine replaces atomically (tuning/apply.py): those directories get a tmpfs too.
    swept = sorted({posixpath.dirname(path) for path in ATOMIC_FILES})
    private_tmpfs(params["tmpfs"], swept)
    work = Path("/run/agent-test")
    work.mkdir()
    config = work / "mcpnode.toml"
    config.write_text(params["config"])
    parsed = parse_config(params["config"], str(config))
    if parsed.autopin:
        raise RuntimeError("[autopin] would pin this machine's processes: refusing to run")
    writes = [str(config), STATE_DIR, AGENT_STATE_PATH, MANIFEST_DIR, PERSIST_PATH]
    writes += [parsed.export_dir(kind) for kind in parsed.export_kinds]
    writes += [path for path in ATOMIC_FILES if os.path.isdir(posixpath.dirname(path))]
    refuse_unless_private(writes, params["tmpfs"] + swept, params["temp"])
    # Host.command's lookup: PATH, then the sbin directories
    ethtool = shutil.which("ethtool", path=os.environ["PATH"] + ":/usr/sbin:/sbin")
    if ethtool != params["ethtool"]:
        raise RuntimeError(f"ethtool is {ethtool}, not the stand-in: refusing to run")
    agent = AgentProc(
        ["--root", "/", "--config", str(config), "--profiles-dir", params["profiles_dir"]],
        work, watchdog_usec=None,
    )
    report["ready"] = agent.wait_message("READY=1", timeout=60)
    report["applied"] = state()

    # another party sets the rings behind the agent's back, as `ethtool -G` does
    t = agent.now()
    subprocess.run([ethtool, "-G", "eth-a", "rx", "512", "tx", "256"], check=True)
    report["remediated"] = agent.wait_event("drift.remediated", t, key=params["key"])
    report["after"] = state()

    t = agent.now()
    report["rc"] = agent.stop()
    report["rollback"] = agent.event("rollback", t)
    report["final"] = state()
    report["pm_qos"] = agent.event("pm-qos.held")
    written = [e["path"] for e in agent.events
               if e.get("event") in ("manifest.published", "export.written")]
    report["written"] = {p: lands_on(p) for p in written}
    report["remediations"] = [e for e in agent.events if e.get("event") == "drift.remediated"]
except Exception as err:
    report["errors"].append(f"{type(err).__name__}: {err}")
finally:
    if agent is not None:
        report["log_tail"] = agent.stderr_tail(40)
        agent.close()
print(json.dumps(report))
"""

pytestmark = pytest.mark.live


@pytest.fixture(scope="module")
def story(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    # Nothing but [nic]: the agent holds no PM QoS request and writes no file of this machine.
    profile = parse_profile(PROFILE, "nic-test.toml", "nic-test")
    assert all(s.key.startswith("nic:") for s in profile.settings)
    tmp = tmp_path_factory.mktemp("nicdrift")
    env = fake_path(tmp)
    profiles = tmp / "profiles"
    profiles.mkdir()
    (profiles / "nic-test.toml").write_text(PROFILE)
    params = {
        "repo": str(REPO),
        "config": CONFIG,
        "profiles_dir": str(profiles),
        "tmpfs": TMPFS,
        "temp": str(tmp),
        "ethtool": str(tmp / "bin" / "ethtool"),
        "key": KEY,
    }
    unshare = ["unshare", "--net", "--mount", "--propagation", "private", "--"]
    return run_child(unshare, CHILD, params, timeout=120, env=env)


def rings(state: dict[str, Any]) -> dict[str, int]:
    result: dict[str, int] = state["nics"]["eth-a"]["rings"]["cur"]
    return result


def test_the_profile_is_applied_through_ethtool(story: dict[str, Any]) -> None:
    assert "STATUS=profile nic-test: in profile" in story["ready"][1]
    assert rings(story["applied"]) == {"rx": 8192, "tx": 8192}
    assert story["applied"]["nics"]["eth-a"]["channels"]["cur"] == {"combined": 48}


def test_rings_changed_by_another_party_are_put_back(story: dict[str, Any]) -> None:
    event = story["remediated"]
    assert event["old"] == "rx 512 tx 256"
    assert event["new"] == "rx 8192 tx 8192"
    assert rings(story["after"]) == {"rx": 8192, "tx": 8192}
    # the channels did not move: only the rings were written back, once
    assert [e["key"] for e in story["remediations"]] == [KEY]
    calls = story["after"]["calls"]
    other = calls.index(["-G", "eth-a", "rx", "512", "tx", "256"])
    since = calls[other + 1 :]
    put_back = ["-G", "eth-a", "rx", "8192", "tx", "8192"]
    assert [c for c in since if c[0] in ("-G", "-L")] == [put_back]
    # at the next drift check, however slow this machine: before the write, that check's read
    # of the rings and the apply's own; a check that left the change standing would add two
    assert since[: since.index(put_back)].count(["-g", "eth-a"]) <= 2


def test_stop_rolls_back_to_the_nic_as_found(story: dict[str, Any]) -> None:
    assert story["rc"] == 0, story.get("log_tail")
    assert story["rollback"] is not None
    # the originals recorded at the first apply, not the other party's rings
    assert rings(story["final"]) == {"rx": 1024, "tx": 1024}
    assert story["final"]["nics"]["eth-a"]["channels"]["cur"] == {"combined": 32}


def test_every_file_written_is_on_a_private_tmpfs(story: dict[str, Any]) -> None:
    assert story["pm_qos"] is None
    written = story["written"]
    assert "/run/mcpnode/manifest.json" in written
    assert "/run/agent-test/features.d/mcpnode" in written
    assert "/var/lib/node_exporter/textfile_collector/mcpnode.prom" in written
    for path, (point, fs) in written.items():
        assert point in TMPFS and fs == "tmpfs", path
