"""`mcpnode rollback` where nothing was ever applied: it says so and leaves the root as it found
it, no state directory and no lock file created (every apply creates the lock, so its absence
means there is no journal to restore)."""

from __future__ import annotations

from pathlib import Path

from tests.support.minihost import build
from tests.support.tuningcli import run_cli


def files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def test_rollback_without_a_journal_creates_nothing(tmp_path: Path) -> None:
    root = build(tmp_path / "root")
    before = files(root)
    code, out, err = run_cli("rollback", "--root", str(root))
    assert code == 0, err
    assert out.startswith("nothing to roll back: no journal at ")
    assert files(root) == before
    assert not (root / "var" / "lib" / "mcpnode").exists()


def test_rollback_with_a_state_dir_and_no_journal_leaves_no_lock(tmp_path: Path) -> None:
    root = build(tmp_path / "root")
    state = tmp_path / "state"
    code, _, err = run_cli("rollback", "--root", str(root), "--state-dir", str(state))
    assert code == 0, err
    assert list(state.iterdir()) == []  # the directory asked for, and nothing in it
