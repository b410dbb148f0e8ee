"""Host.command: version commands run live (no shell), are recorded, and replay from a
snapshot; a missing program is a fact, never an exception."""

from __future__ import annotations

import json
from pathlib import Path

from mcpnode.host import Host


def test_live_command_and_missing_program() -> None:
    host = Host("/")
    res = host.command(("uname", "-r"))
    assert res.found and res.returncode == 0 and res.stdout.strip()
    gone = host.command(("mcpnode-no-such-program-xyz", "--version"))
    assert not gone.found and gone.returncode is None
    assert gone.reason is not None and "not found" in gone.reason
    failing = host.command(("false",))
    assert failing.found and failing.returncode == 1


def test_shell_metacharacters_are_arguments_not_shell() -> None:
    res = Host("/").command(("echo", "$(id)", ";", "|"))
    assert res.stdout == "$(id) ; |\n"


def test_recording_and_replay(mini_root: Path) -> None:
    live = Host("/")
    with live.recording() as rec:
        live.command(("uname", "-s"))
        live.command(("mcpnode-no-such-program-xyz",))
    root = mini_root
    (root / "mcpnode-snapshot.json").write_text(json.dumps({"commands": rec.commands}))
    replay = Host(root)
    assert replay.command(("uname", "-s")).stdout == "Linux\n"
    assert not replay.command(("mcpnode-no-such-program-xyz",)).found
    unknown = replay.command(("nvidia-ctk", "--version"))
    assert not unknown.found and unknown.reason == "not recorded in this snapshot"


def test_garbage_snapshot_metadata_means_not_recorded(mini_root: Path) -> None:
    root = mini_root
    (root / "mcpnode-snapshot.json").write_text("{not json")
    res = Host(root).command(("uname", "-r"))
    assert not res.found and res.reason == "not recorded in this snapshot"
