"""Two writers overlapping, forced at chosen points, on the real kernel
(tests/support/overlapchild.py): after every interleaving `rollback` restores exactly what the
network namespace had before the first run, and the second writer either waited for the first
or gave up with exit 75 — it never went on unlocked.

Without the state lock these interleavings lose originals: a writer stopped after its journal
save and resumed after another apply saves its own view of the journal over the other's, and a
writer paused between journal load and first read journals the other's targets as originals.

All in `unshare --net --mount`: net.* keys are the namespace's own, and the journal, the lock
and the persisted file live on tmpfs; this machine's values are read before and after and must
be unchanged. MCPNODE_OVERLAP_TRIALS raises the number of trials (default 300).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.tuning.test_tuning_netns import read_sysctl, skip_reason

REPO = Path(__file__).resolve().parents[2]
KEYS = (
    "net.core.somaxconn",
    "net.ipv4.tcp_notsent_lowat",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_time",
)
# Two profiles of per-netns keys only; they share somaxconn and notsent_lowat, and each sets
# keys the other does not (a switch must restore those).
PROFILE_A = """\
[profile]
summary = "overlap test A"
[sysctl]
"net.core.somaxconn" = 65535
"net.ipv4.tcp_notsent_lowat" = 131072
"net.ipv4.ip_local_port_range" = "32768 65535"
"""
PROFILE_B = """\
[profile]
summary = "overlap test B"
[sysctl]
"net.core.somaxconn" = 8192
"net.ipv4.tcp_notsent_lowat" = 262144
"net.ipv4.tcp_fin_timeout" = 15
"net.ipv4.tcp_keepalive_time" = 600
"""
TRIALS = int(os.environ.get("MCPNODE_OVERLAP_TRIALS", "300"))

pytestmark = pytest.mark.live


@pytest.fixture(scope="module")
def trials(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    profiles = tmp_path_factory.mktemp("overlap-profiles")
    (profiles / "pa.toml").write_text(PROFILE_A)
    (profiles / "pb.toml").write_text(PROFILE_B)
    host_before = {k: read_sysctl(k) for k in KEYS}
    params = {
        "repo": str(REPO),
        "keys": list(KEYS),
        "profiles": str(profiles),
        "journal": "/var/lib/mcpnode/tuning-journal.json",
        "tmpfs_required": ["/var/lib", "/etc/sysctl.d"],
        "tmpfs_optional": ["/run", "/etc/mcpnode"],
        "trials": TRIALS,
        "seed": 20261201,
    }
    proc = subprocess.run(
        [
            "unshare",
            "--net",
            "--mount",
            "--propagation",
            "private",
            "--",
            sys.executable,
            str(REPO / "tests" / "support" / "overlapchild.py"),
            json.dumps(params),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    report: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    report["host_before"] = host_before
    report["host_after"] = {k: read_sysctl(k) for k in KEYS}
    assert not report["errors"], report["errors"]
    return report


def test_every_interleaving_rolls_back_exactly(trials: dict[str, Any]) -> None:
    done = trials["trials"]
    assert len(done) == TRIALS
    bad = [t for t in done if not t["ok"]]
    assert bad == [], json.dumps(bad[:3], indent=1)


def test_the_trials_really_overlapped(trials: dict[str, Any]) -> None:
    """The trials exercised what they claim: writers stopped inside their write phase, second
    writers that gave up on the lock and second writers that waited for it."""
    done = trials["trials"]
    stopped = sum(1 for t in done if any(e.startswith("A stopped") for e in t["events"]))
    locked = sum(1 for t in done if t["locked"])
    waited = sum(1 for t in done if not t["locked"] and t["wait_b"] == "5")
    paused = Counter(t["mode"] for t in done)["pause"]
    assert stopped > TRIALS // 10 and locked > TRIALS // 10
    assert waited > TRIALS // 5 and paused > TRIALS // 5


def test_this_machine_is_untouched(trials: dict[str, Any]) -> None:
    assert trials["host_after"] == trials["host_before"]
