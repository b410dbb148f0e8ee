"""The tuning journal: the original value of every key mcpnode changed, written before the first
write (STYLE habit 6), so that a failed apply, a crash or `rollback` can restore exactly them.

File: `/var/lib/mcpnode/tuning-journal.json` under the Host root (or under `--state-dir`),
replaced atomically (temp + fsync + rename + directory fsync) at every change.

    {"schema": "mcpnode.tuning-journal/v1",
     "state": "applying" | "applied" | "rolling-back",
     "profile": "inference-latency",
     "entries": [{"key": "net.core.somaxconn", "path": <its file under /proc/sys>,
                  "original": "4096"}, ...],              # first original of each key, in order
     "persist": {"path": "/etc/sysctl.d/90-mcpnode.conf", "original": null} | null,
     "modules": ["tcp_bbr"]}                               # loaded by mcpnode (never unloaded)

`state` other than "applied" means a run stopped half-way (crash, SIGKILL, power loss): the
next apply, rollback or agent start restores every original before doing anything else.

A journal that exists but cannot be read, parsed or trusted raises JournalError. It is never
treated as empty: it is the only record of the originals. Entries are checked against the key
-> path mapping, so an edited journal cannot aim a restore at any other file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any, Literal

from mcpnode.errors import HostError
from mcpnode.host import Host
from mcpnode.tuning import paths
from mcpnode.tuning.errors import JournalError
from mcpnode.tuning.profile import PROFILE_NAME

SCHEMA = "mcpnode.tuning-journal/v1"
JournalState = Literal["applying", "applied", "rolling-back"]
STATES: tuple[JournalState, ...] = ("applying", "applied", "rolling-back")
MAX_JOURNAL_BYTES = 16 << 20
MAX_ORIGINAL_BYTES = 1 << 16  # a whole persisted file may be an original


@dataclass(frozen=True)
class JournalEntry:
    key: str
    path: str
    original: str  # what to write back (enum files: the selected token)


@dataclass(frozen=True)
class PersistRecord:
    path: str
    original: str | None  # the file's content before mcpnode wrote it; None: it did not exist


@dataclass(frozen=True)
class Journal:
    state: JournalState
    profile: str
    entries: tuple[JournalEntry, ...]
    persist: PersistRecord | None = None
    modules: tuple[str, ...] = ()

    def with_state(self, state: JournalState) -> Journal:
        return replace(self, state=state)

    def entry(self, path: str) -> JournalEntry | None:
        for e in self.entries:
            if e.path == path:
                return e
        return None

    @property
    def empty(self) -> bool:
        return not self.entries and self.persist is None


def to_json(journal: Journal) -> str:
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "state": journal.state,
        "profile": journal.profile,
        "entries": [
            {"key": e.key, "path": e.path, "original": e.original} for e in journal.entries
        ],
        "persist": (
            None
            if journal.persist is None
            else {"path": journal.persist.path, "original": journal.persist.original}
        ),
        "modules": list(journal.modules),
    }
    return json.dumps(doc, indent=2) + "\n"


def _original_problem(value: object, limit: int) -> str | None:
    if not isinstance(value, str):
        return "is not a string"
    if len(value) > limit or "\0" in value:
        return "is too long or holds a NUL byte"
    return None


def from_json(text: str, where: str) -> Journal:
    """Parse and check a journal. Raises JournalError for anything unexpected (pure)."""
    try:
        doc = json.loads(text)
    except ValueError as err:
        raise JournalError(where, f"not JSON ({err})") from err
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise JournalError(where, f"not a {SCHEMA} document")
    state = doc.get("state")
    if state not in STATES:
        raise JournalError(where, f"unknown state {state!r}")
    profile = doc.get("profile")
    if not isinstance(profile, str) or not PROFILE_NAME.match(profile):
        raise JournalError(where, "profile is not a profile name")
    raw_entries = doc.get("entries")
    if not isinstance(raw_entries, list):
        raise JournalError(where, "entries is not a list")
    entries: list[JournalEntry] = []
    seen: set[str] = set()
    for i, raw in enumerate(raw_entries):
        if not isinstance(raw, dict) or set(raw) != {"key", "path", "original"}:
            raise JournalError(where, f"entry {i} is not {{key, path, original}}")
        key, path, original = raw["key"], raw["path"], raw["original"]
        if not isinstance(key, str) or not isinstance(path, str) or paths.path_of(key) != path:
            raise JournalError(where, f"entry {i}: {str(path)[:80]!r} is not the file of {key!r}")
        problem = _original_problem(original, 4096)
        if problem:
            raise JournalError(where, f"entry {i}: original {problem}")
        if path in seen:
            raise JournalError(where, f"entry {i}: {key} recorded twice")
        seen.add(path)
        entries.append(JournalEntry(key, path, original))
    persist = None
    raw_persist = doc.get("persist")
    if raw_persist is not None:
        if (
            not isinstance(raw_persist, dict)
            or set(raw_persist) != {"path", "original"}
            or raw_persist["path"] != paths.PERSIST_PATH
        ):
            raise JournalError(where, f"persist is not {{path: {paths.PERSIST_PATH}, original}}")
        original = raw_persist["original"]
        if original is not None and _original_problem(original, MAX_ORIGINAL_BYTES):
            raise JournalError(where, "persist original is not a file's text")
        persist = PersistRecord(paths.PERSIST_PATH, original)
    modules = doc.get("modules", [])
    if not isinstance(modules, list) or not all(
        isinstance(m, str) and paths.MODULE_NAME.match(m) for m in modules
    ):
        raise JournalError(where, "modules is not a list of module names")
    return Journal(state, profile, tuple(entries), persist, tuple(modules))


class JournalStore:
    """Where the journal lives: a Host (the tuned root, or a separate --state-dir) and a path."""

    def __init__(self, host: Host, path: str = paths.JOURNAL_PATH) -> None:
        self.host = host
        self.path = path

    @property
    def shown(self) -> str:
        return self.host.fs_path(self.path)

    def load(self) -> Journal | None:
        """The journal, or None when there is none. Raises JournalError when one exists but
        cannot be read or trusted (EACCES, EIO, not JSON, a wrong schema, a foreign path)."""
        try:
            data = self.host.read_optional(self.path)
        except HostError as err:
            raise JournalError(self.shown, f"cannot read: {err.detail}") from err
        if data is None:
            return None
        if len(data) > MAX_JOURNAL_BYTES:
            raise JournalError(self.shown, "larger than any journal mcpnode writes")
        return from_json(data, self.shown)

    def save(self, journal: Journal) -> None:
        """Replace the journal atomically. Raises a HostError subclass."""
        self.host.write_file_atomic(self.path, to_json(journal).encode("utf-8"), mode=0o600)

    def remove(self) -> None:
        self.host.remove(self.path)
