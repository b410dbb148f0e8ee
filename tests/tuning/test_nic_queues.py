"""`[nic]` rings and channels through `ethtool`: apply, verify and rollback on the live root,
the program being a recorded stand-in first on PATH (tests/support/fake_ethtool.py) so no real
NIC is touched; the journal and lock go to a temporary --state-dir. Also the output parser,
the plan's capability answers, the journal's key -> path rule and hostile profile values."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from mcpnode.tuning.errors import JournalError, ProfileError
from mcpnode.tuning.journal import from_json
from mcpnode.tuning.plugins.nicqueues import parse_ethtool
from mcpnode.tuning.profile import parse_profile
from tests.support.powerroot import journal_text
from tests.support.tuningcli import run_process

HERE = Path(__file__).resolve().parent
PROFILE = """\
[profile]
summary = "nic queues"

[nic]
devices = ["eth-a", "eth-b", "veth-c"]
rings = "max"
combined_channels = 48
"""
NICS = {
    "eth-a": {
        "rings": {"max": {"rx": 8192, "tx": 8192}, "cur": {"rx": 1024, "tx": 1024}},
        "channels": {"max": {"combined": 63}, "cur": {"combined": 32}},
    },
    "eth-b": {  # fewer queues than asked: not applicable, never a failed write
        "rings": {"max": {"rx": 4096, "tx": 4096}, "cur": {"rx": 4096, "tx": 4096}},
        "channels": {"max": {"combined": 8}, "cur": {"combined": 8}},
    },
    "veth-c": {"channels": {"max": {"combined": 64}, "cur": {"combined": 1}}},  # no rings
}


def fake_path(tmp: Path) -> dict[str, str]:
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "ethtool"
    tool.write_text(
        f"#!{sys.executable}\n" + (HERE.parent / "support" / "fake_ethtool.py").read_text()
    )
    tool.chmod(0o755)
    state = tmp / "nics.json"
    state.write_text(json.dumps({"nics": NICS, "calls": []}))
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_ETHTOOL_STATE": str(state)}


def test_apply_verify_rollback_through_ethtool(tmp_path: Path) -> None:
    env = fake_path(tmp_path)
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    (profiles / "nic.toml").write_text(PROFILE)
    where = ("--root", "/", "--profiles-dir", str(profiles), "--state-dir", str(tmp_path / "s"))
    proc = run_process("apply", "--profile", "nic", *where, "--format", "json", env=env)
    assert proc.returncode == 0, proc.stderr
    items = {i["key"]: (i["action"], i["desired"]) for i in json.loads(proc.stdout)["items"]}
    assert items["nic:rings:eth-a"] == ("set", "rx 8192 tx 8192")
    assert items["nic:channels:eth-a"] == ("set", "combined 48")
    assert items["nic:rings:eth-b"] == ("ok", "rx 4096 tx 4096")
    assert items["nic:channels:eth-b"] == ("unsupported", None)
    assert items["nic:rings:veth-c"] == ("unsupported", None)
    assert items["nic:channels:veth-c"] == ("set", "combined 48")
    state = json.loads(Path(env["FAKE_ETHTOOL_STATE"]).read_text())
    assert state["nics"]["eth-a"]["rings"]["cur"] == {"rx": 8192, "tx": 8192}
    assert state["nics"]["eth-a"]["channels"]["cur"] == {"combined": 48}
    writes = [c for c in state["calls"] if c[0] in ("-G", "-L")]
    assert writes == [
        ["-G", "eth-a", "rx", "8192", "tx", "8192"],
        ["-L", "eth-a", "combined", "48"],
        ["-L", "veth-c", "combined", "48"],
    ]

    proc = run_process("verify", "--profile", "nic", *where, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr

    proc = run_process("rollback", "--root", "/", "--state-dir", str(tmp_path / "s"), env=env)
    assert proc.returncode == 0, proc.stderr
    state = json.loads(Path(env["FAKE_ETHTOOL_STATE"]).read_text())
    assert state["nics"]["eth-a"]["rings"]["cur"] == {"rx": 1024, "tx": 1024}
    assert state["nics"]["eth-a"]["channels"]["cur"] == {"combined": 32}
    assert state["nics"]["veth-c"]["channels"]["cur"] == {"combined": 1}


def test_parse_ethtool_output() -> None:
    text = (
        "Ring parameters for eth0:\nPre-set maximums:\nRX:\t\t8192\nRX Mini:\tn/a\n"
        "TX:\t\t8192\nCurrent hardware settings:\nRX:\t\t1024\nRX Mini:\tn/a\nTX:\t\t512\n"
        "RX Buf Len:\t\tn/a\nTCP data split:\toff\n"
    )
    maximums, current = parse_ethtool(text)
    assert maximums == {"rx": "8192", "rx mini": "n/a", "tx": "8192"}
    assert current["rx"] == "1024" and current["tx"] == "512"
    assert parse_ethtool("") == ({}, {})
    big, _ = parse_ethtool("X: 1\n" * 100_000)  # bounded: only the first lines are looked at
    assert big == {"x": "1"}


def test_the_journal_names_only_the_ethtool_reads() -> None:
    def doc(key: str, path: str) -> str:
        return journal_text(key, path, "rx 1024 tx 1024")

    assert from_json(doc("nic:rings:eth0", "ethtool -g eth0"), "j").entries[0].key
    for key, path in (
        ("nic:rings:eth0", "ethtool -l eth0"),
        ("nic:rings:eth0", "/etc/passwd"),
        ("nic:rings:../x", "ethtool -g ../x"),
        ("nic:rings:eth0;reboot", "ethtool -g eth0;reboot"),
        ("nic:rings:-h", "ethtool -g -h"),
    ):
        with pytest.raises(JournalError, match="is not the file of"):
            from_json(doc(key, path), "j")


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ("rings = 4096", 'must be "rdma" or a list'),
        ('devices = ["eth0"]', "without rings or combined_channels"),
        ('devices = "all"\nrings = "max"', 'must be "rdma" or a list'),
        ('devices = ["eth0/../x"]\nrings = "max"', 'must be "rdma" or a list'),
        ('devices = ["-h"]\nrings = "max"', 'must be "rdma" or a list'),
        ('devices = ["eth0:1"]\nrings = "max"', 'must be "rdma" or a list'),
        ('devices = ["a234567890123456"]\nrings = "max"', 'must be "rdma" or a list'),
        ('devices = ["eth0"]\nrings = "min"', 'must be "max" or { rx = N, tx = N }'),
        ('devices = ["eth0"]\nrings = { rx = 0, tx = 1 }', "a count 1 to 65536"),
        ('devices = ["eth0"]\nrings = { rx = true, tx = 1 }', "a count 1 to 65536"),
        ('devices = ["eth0"]\nrings = { rx = 1 }', 'must be "max" or { rx = N, tx = N }'),
        ('devices = ["eth0"]\ncombined_channels = 65537', "a count 1 to 65536"),
        ('devices = ["eth0"]\ncombined_channels = "all"', "a count 1 to 65536"),
    ],
)
def test_hostile_nic_values(body: str, why: str) -> None:
    text = f'[profile]\nsummary = "x"\n[nic]\n{body}\n'
    with pytest.raises(ProfileError, match=why.replace("{", "\\{").replace("}", "\\}")):
        parse_profile(text, "bad.toml", "bad")
