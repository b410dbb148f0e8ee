"""Log priorities for the journal: every line on a journal stream starts with `<N>`, read back
the way systemd-journald reads a service's stream (journald-stream.c: `syslog_parse_priority`
on each line when level prefixes are on, the default; a line without one gets the stream's
default priority, info).

The stream is a real AF_UNIX stream socket, as the one systemd connects a service's stdout and
stderr to, and `JOURNAL_STREAM` names its device and inode as systemd sets it
(systemd.exec(5)); the child processes are real: a Python child logging at each level through
`configure_logging`, and `mcpnode agent` failing to start."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from mcpnode.logs import PRIORITIES, journal_priority, stderr_is_journal
from tests.support import auditroot
from tests.support.fixtures import RootFactory

REPO = Path(__file__).resolve().parents[2]
INFO = 6  # journald's default priority for a stream line without a prefix (SyslogLevel=info)
_PREFIX = re.compile(r"<([0-7])>")

CHILD = """
import structlog
from mcpnode.logs import configure_logging
configure_logging("auto", "debug")
log = structlog.get_logger("test")
log.debug("a.debug", n=1)
log.info("a.info", n=2)
log.warning("a.warning", n=3)
log.error("a.error", n=4)
log.critical("a.critical", n=5)
try:
    raise ValueError("boom")
except ValueError:
    log.exception("a.exception")
"""


def journal_records(data: bytes) -> list[tuple[int, str]]:
    """(priority, message) per line, as journald stores a stream's lines."""
    out = []
    for raw in data.decode().splitlines():
        m = _PREFIX.match(raw)
        out.append((int(m.group(1)), raw[m.end() :]) if m else (INFO, raw))
    return out


def run_on_stream(argv: list[str], *, named: bool = True, **kwargs: object) -> tuple[int, bytes]:
    """Run `argv` with stderr on a stream socket; JOURNAL_STREAM names it (or, with
    named=False, another stream). Returns the exit status and what arrived on the socket."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    other, other_peer = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        st = os.fstat((theirs if named else other).fileno())
        env = {
            **{k: v for k, v in os.environ.items() if k not in ("JOURNAL_STREAM", "NOTIFY_SOCKET")},
            "JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}",
        }
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=theirs.fileno(),
            env=env, cwd=REPO, **kwargs,  # type: ignore[call-overload]
        )  # fmt: skip
        theirs.close()
        chunks = []
        while chunk := ours.recv(65536):
            chunks.append(chunk)
        return proc.wait(timeout=60), b"".join(chunks)
    finally:
        for s in (ours, theirs, other, other_peer):
            s.close()


def test_every_level_carries_its_priority() -> None:
    rc, data = run_on_stream([sys.executable, "-c", CHILD])
    assert rc == 0, data.decode()
    records = [(p, json.loads(m)) for p, m in journal_records(data)]
    by_event = {doc["event"]: p for p, doc in records}
    assert by_event == {
        "a.debug": 7,
        "a.info": 6,
        "a.warning": 4,
        "a.error": 3,
        "a.critical": 2,
        "a.exception": 3,
    }
    # Each record is still one JSON object after its prefix (the traceback inside it).
    assert all(isinstance(doc, dict) and "timestamp" in doc for _, doc in records)
    # `journalctl -p warning`: priority 4 and more urgent.
    shown = [doc["event"] for p, doc in records if p <= 4]
    assert shown == ["a.warning", "a.error", "a.critical", "a.exception"]


def test_no_prefix_when_stderr_is_not_the_named_stream() -> None:
    """A child that inherited JOURNAL_STREAM but writes elsewhere: no `<N>` (it would show up
    literally in a file or a pipe)."""
    rc, data = run_on_stream([sys.executable, "-c", CHILD], named=False)
    assert rc == 0
    lines = data.decode().splitlines()
    assert lines and not [ln for ln in lines if _PREFIX.match(ln)]
    assert json.loads(lines[0])["event"] == "a.debug"


def test_the_agent_logs_its_start_failure_as_an_error(audit_root: RootFactory) -> None:
    """`mcpnode agent` with a configuration it refuses: exit 78, and the reason is in the
    journal at priority err, so `journalctl -p err -u mcpnode` shows why the unit failed."""
    root = audit_root(auditroot.HGX, files={"etc/mcpnode/mcpnode.toml": "[drift]\nintervall = 5\n"})
    rc, data = run_on_stream([sys.executable, "-m", "mcpnode", "agent", "--root", str(root)])
    assert rc == 78, data.decode()
    records = journal_records(data)
    errors = [json.loads(m) for p, m in records if p == 3]
    assert [e["event"] for e in errors] == ["agent.start-failed"]
    assert "drift.intervall" in errors[0]["error"]
    assert all(p in (3, 4, 6, 7) for p, _ in records)


@pytest.mark.parametrize(
    ("value", "expected"),
    [("", False), ("12", False), ("a:b", False), ("1:2:3", False), ("-1:2", False)],
)
def test_malformed_journal_stream_is_not_the_journal(value: str, expected: bool) -> None:
    assert stderr_is_journal({"JOURNAL_STREAM": value}) is expected


def test_unknown_method_names_get_info() -> None:
    assert journal_priority(None, "no-such-level", "x") == "<6>x"
    assert {PRIORITIES[m] for m in ("debug", "info", "warning", "error", "critical")} == {
        7,
        6,
        4,
        3,
        2,
    }
