"""Colour: `--color=auto|always|never` and NO_COLOR (no-color.org), on a real terminal.

`mcpnode audit` runs as a child with its stdout on a pseudo-terminal (os.openpty), so `auto`
sees a TTY exactly as in an interactive shell; the escape sequences are looked for in what
arrives on the terminal's other end."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mcpnode.cli.color import use_color

REPO = Path(__file__).resolve().parents[2]
ROOT = REPO / "tests/fixtures/hosts/h100-nvl-pair"
ESC = b"\x1b["


@pytest.mark.parametrize(
    ("choice", "env", "tty", "want"),
    [
        ("auto", {}, True, True),
        ("auto", {}, False, False),
        ("auto", {"NO_COLOR": "1"}, True, False),
        ("auto", {"NO_COLOR": ""}, True, True),  # empty means unset (no-color.org)
        ("auto", {"TERM": "dumb"}, True, False),
        ("always", {"NO_COLOR": "1"}, False, True),  # the explicit flag wins over the variable
        ("never", {}, True, False),
    ],
)
def test_rule(choice: str, env: dict[str, str], tty: bool, want: bool) -> None:
    assert use_color(choice, env, tty) is want


def audit_on_a_tty(*args: str, env: dict[str, str] | None = None) -> bytes:
    """`mcpnode [args] audit ...` with stdout on a pseudo-terminal; what the terminal got."""
    master, slave = os.openpty()
    child_env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "TERM")}
    child_env.update({"TERM": "xterm", **(env or {})})
    argv = [sys.executable, "-m", "mcpnode", *args]
    try:
        proc = subprocess.Popen(
            argv, stdout=slave, stderr=subprocess.DEVNULL, env=child_env, cwd=REPO
        )
        os.close(slave)
        out = bytearray()
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal's last writer
                break
            if not chunk:
                break
            out += chunk
        proc.wait(timeout=60)
    finally:
        os.close(master)
    assert b"GPU health" in out, out[-2000:]
    return bytes(out)


AUDIT = ("audit", "--root", str(ROOT), "--only", "gpu.*")


def test_a_terminal_gets_colour() -> None:
    assert ESC in audit_on_a_tty(*AUDIT)


def test_no_color_turns_it_off() -> None:
    assert ESC not in audit_on_a_tty(*AUDIT, env={"NO_COLOR": "1"})


def test_never_turns_it_off_on_the_group_or_the_command() -> None:
    assert ESC not in audit_on_a_tty("--color=never", *AUDIT)
    assert ESC not in audit_on_a_tty(*AUDIT, "--color", "never")


def test_always_wins_over_no_color_and_the_command_over_the_group() -> None:
    assert ESC in audit_on_a_tty(*AUDIT, "--color=always", env={"NO_COLOR": "1"})
    assert ESC in audit_on_a_tty("--color=never", *AUDIT, "--color=always")


def test_a_pipe_gets_none_unless_always() -> None:
    def piped(*args: str) -> bytes:
        return subprocess.run(
            [sys.executable, "-m", "mcpnode", *args],
            capture_output=True,
            cwd=REPO,
            check=False,
        ).stdout

    assert ESC not in piped(*AUDIT)
    assert ESC in piped("--color=always", *AUDIT)
