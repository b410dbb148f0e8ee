"""The tuning journal: the original value of every key mcpnode changed, written before the first
write (STYLE habit 6), so that a failed apply, a crash or `rollback` can restore exactly them.

File: `/var/lib/mcpnode/tuning-journal.json` under the Host root (or under `--state-dir`),
replaced atomically (temp + fsync + rename + directory fsync) at every change.

    {"schema": "mcpnode.tuning-journal/v1",
     "state": "applying" | "applied" | "rolling-back",
     "profile": "inference-latency",
     "entries": [{"key": "net.core.somaxconn", "path": <its file under /proc/sys>,
                  "original": "4096"}, ...],              # first original of each key, in order
                 # a whole-file key's entry also says what the file was:
                 #   "file": {"type": "regular", "mode": 420, "uid": 0, "gid": 0}
                 #         | {"type": "absent"}
     "persist": {"path": "/etc/sysctl.d/90-mcpnode.conf", "original": null,
                 "mode": 420, "uid": 0, "gid": 0} | null,  # the file before mcpnode wrote it
     "modules": ["tcp_bbr"],                               # loaded by mcpnode (never unloaded)
     "managed_irqs": [45, 46],                             # the kernel refused to move them
     "applied": {"profile": "inference-latency", "hash": "sha256:...",
                 "at": "2026-12-01T19:50:02+00:00", "by": "cli" | "agent"}}

`applied` answers "which profile is this host tuned with" (tuning/active.py): it is kept while
the profile stays applied, even when no key needed writing (a journal with no entries), and goes
with the journal at rollback. Older journals without it are read as applied by "cli".

A whole-file entry's `file` is restored exactly: an absent file is removed again, a regular file
comes back with its content, permission bits and owner. A symbolic link is never journaled:
apply refuses to replace one (docs/tuning.md, "Files mcpnode replaces"). Journals written before
`file` existed restore with the file's mode and owner as found, never group- or world-writable.

`managed_irqs` lists the interrupts whose `smp_affinity_list` write the kernel refused with EIO
(tuning/plugins/irq.py): later plans leave them alone instead of retrying. An `irqbalance:*` entry's
original is the whole environment file, restored byte for byte.

`state` other than "applied" means a run stopped half-way (crash, SIGKILL, power loss): the
next apply, rollback or agent start restores every original before doing anything else.

A journal that exists but cannot be read, parsed or trusted raises JournalError. It is never
treated as empty: it is the only record of the originals. Trusted means root's alone (Host's
read_trusted): a journal planted in a world-writable --state-dir or in a /var/lib/mcpnode owned
by another user would otherwise be replayed as root (`kernel.core_pattern = |/tmp/x %p` is code
execution). Entries are checked against the key -> path mapping, so an edited journal cannot aim
a restore at any other file.

Every save and remove requires the state lock (state/lock.py), held from the load before it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from typing import Any, Literal

from mcpnode.errors import HostError, PathNotFound
from mcpnode.host import FileStat, Host, HostReader
from mcpnode.state.lock import DEFAULT_WAIT_S, LOCK_NAME, StateLock
from mcpnode.state.places import JOURNAL_PATH
from mcpnode.tuning import paths, plugins
from mcpnode.tuning.errors import JournalError
from mcpnode.tuning.profile import PROFILE_NAME

SCHEMA = "mcpnode.tuning-journal/v1"
JournalState = Literal["applying", "applied", "rolling-back"]
STATES: tuple[JournalState, ...] = ("applying", "applied", "rolling-back")
MAX_JOURNAL_BYTES = 16 << 20
MAX_ORIGINAL_BYTES = 1 << 16  # a whole persisted file may be an original
AppliedBy = Literal["cli", "agent"]
APPLIED_BY: tuple[AppliedBy, ...] = ("cli", "agent")
_HASH = re.compile(r"sha256:[0-9a-f]{64}\Z")
_WHEN = re.compile(r"[0-9T:+.Z-]{10,40}\Z")


FileKind = Literal["regular", "absent"]
FILE_KINDS: tuple[FileKind, ...] = ("regular", "absent")


@dataclass(frozen=True)
class FileMeta:
    """What a whole-file key's file was before mcpnode first wrote it: absent, or a regular
    file with these permission bits and owner."""

    kind: FileKind
    mode: int = 0o644
    uid: int = 0
    gid: int = 0

    @staticmethod
    def regular(st: FileStat) -> FileMeta:
        return FileMeta("regular", st.mode & 0o7777, st.uid, st.gid)


ABSENT = FileMeta("absent")


@dataclass(frozen=True)
class JournalEntry:
    key: str
    path: str
    original: str  # what to write back (enum files: the selected token)
    file: FileMeta | None = None  # whole-file keys: the file's type, mode and owner then


@dataclass(frozen=True)
class PersistRecord:
    path: str
    original: str | None  # the file's content before mcpnode wrote it; None: it did not exist
    mode: int | None = None  # its permission bits and owner then (None: not recorded)
    uid: int | None = None
    gid: int | None = None

    @staticmethod
    def of(path: str, original: str | None, st: FileStat | None) -> PersistRecord:
        if original is None or st is None:
            return PersistRecord(path, original)
        return PersistRecord(path, original, st.mode & 0o7777, st.uid, st.gid)


@dataclass(frozen=True)
class AppliedProfile:
    """Which profile the journal's run applied: its name, content hash (Profile.content_hash),
    when (ISO 8601 UTC) and by what (`mcpnode apply` or the agent)."""

    profile: str
    hash: str | None
    at: str | None
    by: AppliedBy


@dataclass(frozen=True)
class Journal:
    state: JournalState
    profile: str
    entries: tuple[JournalEntry, ...]
    persist: PersistRecord | None = None
    modules: tuple[str, ...] = ()
    applied: AppliedProfile | None = None
    managed_irqs: tuple[int, ...] = ()

    def with_state(self, state: JournalState) -> Journal:
        return replace(self, state=state)

    def entry(self, path: str) -> JournalEntry | None:
        return next((e for e in self.entries if e.path == path), None)

    @property
    def empty(self) -> bool:
        return not self.entries and self.persist is None


def to_json(journal: Journal) -> str:
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "state": journal.state,
        "profile": journal.profile,
        "entries": [_entry_json(e) for e in journal.entries],
        "persist": _persist_json(journal.persist),
        "modules": list(journal.modules),
        "applied": (
            None
            if journal.applied is None
            else {
                "profile": journal.applied.profile,
                "hash": journal.applied.hash,
                "at": journal.applied.at,
                "by": journal.applied.by,
            }
        ),
    }
    if journal.managed_irqs:  # only when there are some: journals without [irq] stay as they were
        doc["managed_irqs"] = list(journal.managed_irqs)
    return json.dumps(doc, indent=2) + "\n"


def _entry_json(entry: JournalEntry) -> dict[str, Any]:
    doc: dict[str, Any] = {"key": entry.key, "path": entry.path, "original": entry.original}
    meta = entry.file
    if meta is not None:
        doc["file"] = (
            {"type": meta.kind}
            if meta.kind == "absent"
            else {"type": meta.kind, "mode": meta.mode, "uid": meta.uid, "gid": meta.gid}
        )
    return doc


def _file_meta(raw: object) -> FileMeta:
    """An entry's `file`; raises ValueError naming what is wrong."""
    if not isinstance(raw, dict) or raw.get("type") not in FILE_KINDS:
        raise ValueError("file is not {type: regular | absent, ...}")
    if raw["type"] == "absent":
        if set(raw) != {"type"}:
            raise ValueError("file of an absent file has only a type")
        return ABSENT
    if set(raw) != {"type", *_META}:
        raise ValueError("file of a regular file is {type, mode, uid, gid}")
    mode, uid, gid = (_id_or_none(raw[k]) for k in _META)
    if mode is None or uid is None or gid is None or mode > 0o7777:
        raise ValueError("file mode/uid/gid are not a file mode and ids")
    return FileMeta("regular", mode, uid, gid)


def _persist_json(record: PersistRecord | None) -> dict[str, Any] | None:
    if record is None:
        return None
    doc: dict[str, Any] = {"path": record.path, "original": record.original}
    if record.mode is not None:
        doc.update(mode=record.mode, uid=record.uid, gid=record.gid)
    return doc


def _id_or_none(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 32:
        raise ValueError(value)
    return value


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
        if not isinstance(raw, dict) or set(raw) not in (_ENTRY, {*_ENTRY, "file"}):
            raise JournalError(where, f"entry {i} is not {{key, path, original[, file]}}")
        key, path, original = raw["key"], raw["path"], raw["original"]
        meta = None
        if "file" in raw:
            if not isinstance(key, str) or not plugins.is_file_key(key):
                raise JournalError(where, f"entry {i}: {str(key)[:80]!r} is not a file key")
            try:
                meta = _file_meta(raw["file"])
            except ValueError as err:
                raise JournalError(where, f"entry {i}: {err}") from err
            if meta.kind == "absent" and original != "":
                raise JournalError(where, f"entry {i}: an absent file has no original text")
        if not isinstance(key, str) or not isinstance(path, str) or plugins.path_of(key) != path:
            raise JournalError(where, f"entry {i}: {str(path)[:80]!r} is not the file of {key!r}")
        limit = MAX_ORIGINAL_BYTES if plugins.is_file_key(key) else 4096
        problem = _original_problem(original, limit)
        if problem:
            raise JournalError(where, f"entry {i}: original {problem}")
        if path in seen:
            raise JournalError(where, f"entry {i}: {key} recorded twice")
        seen.add(path)
        entries.append(JournalEntry(key, path, original, meta))
    persist = None
    raw_persist = doc.get("persist")
    if raw_persist is not None:
        if (
            not isinstance(raw_persist, dict)
            or set(raw_persist) not in ({"path", "original"}, {"path", "original", *_META})
            or raw_persist["path"] != paths.PERSIST_PATH
        ):
            raise JournalError(where, f"persist is not {{path: {paths.PERSIST_PATH}, original}}")
        original = raw_persist["original"]
        if original is not None and _original_problem(original, MAX_ORIGINAL_BYTES):
            raise JournalError(where, "persist original is not a file's text")
        try:
            mode = _id_or_none(raw_persist.get("mode"))
            uid = _id_or_none(raw_persist.get("uid"))
            gid = _id_or_none(raw_persist.get("gid"))
        except ValueError as err:
            raise JournalError(where, f"persist mode/uid/gid {err} is not a number") from err
        if mode is not None and mode > 0o7777:
            raise JournalError(where, f"persist mode {mode:o} is not a file mode")
        if mode == 0o777:
            # What lstat() says of every symbolic link on Linux: an earlier version journaled a
            # symlinked 90-mcpnode.conf this way. Not a mode to restore (0644 is used instead).
            mode = uid = gid = None
        persist = PersistRecord(paths.PERSIST_PATH, original, mode, uid, gid)
    modules = doc.get("modules", [])
    if not isinstance(modules, list) or not all(
        isinstance(m, str) and paths.MODULE_NAME.match(m) for m in modules
    ):
        raise JournalError(where, "modules is not a list of module names")
    managed = doc.get("managed_irqs", [])
    if not isinstance(managed, list) or not all(
        isinstance(n, int) and not isinstance(n, bool) and 0 <= n < 1 << 20 for n in managed
    ):
        raise JournalError(where, "managed_irqs is not a list of interrupt numbers")
    return Journal(
        state,
        profile,
        tuple(entries),
        persist,
        tuple(modules),
        _applied(doc, profile, where),
        tuple(sorted(set(managed))),
    )


_META = ("mode", "uid", "gid")
_ENTRY = {"key", "path", "original"}


def _applied(doc: dict[str, Any], profile: str, where: str) -> AppliedProfile:
    raw = doc.get("applied")
    if raw is None:  # a journal from before `applied` existed: only `mcpnode apply` wrote them
        return AppliedProfile(profile, None, None, "cli")
    if not isinstance(raw, dict) or set(raw) != {"profile", "hash", "at", "by"}:
        raise JournalError(where, "applied is not {profile, hash, at, by}")
    name, digest, at, by = raw["profile"], raw["hash"], raw["at"], raw["by"]
    if name != profile:
        raise JournalError(where, f"applied.profile {str(name)[:80]!r} is not {profile!r}")
    if digest is not None and (not isinstance(digest, str) or not _HASH.match(digest)):
        raise JournalError(where, "applied.hash is not sha256:<64 hex digits>")
    if at is not None and (not isinstance(at, str) or not _WHEN.match(at)):
        raise JournalError(where, "applied.at is not an ISO 8601 time")
    if by not in APPLIED_BY:
        raise JournalError(where, f"applied.by {str(by)[:40]!r} is not one of cli, agent")
    return AppliedProfile(name, digest, at, by)


class JournalStore:
    """Where the journal lives: a Host (the tuned root, or a separate --state-dir) and a path,
    with the state lock beside it (`mcpnode.lock` in the same directory). `command` names this
    run to a writer that has to wait for it; `wait_s` is how long this one waits for another."""

    def __init__(
        self,
        host: Host,
        path: str = JOURNAL_PATH,
        *,
        command: str = "mcpnode",
        wait_s: float = DEFAULT_WAIT_S,
    ) -> None:
        self.host = host
        self.path = path
        self.wait_s = wait_s
        directory = path.rsplit("/", 1)[0]
        self.lock = StateLock(host, f"{directory}/{LOCK_NAME}", command)

    @property
    def shown(self) -> str:
        return self.host.fs_path(self.path)

    def load(self) -> Journal | None:
        """load_journal() of this store's place."""
        return load_journal(self.host, self.path)

    def managed_irqs(self) -> frozenset[int]:
        """managed_irqs() of this store's place."""
        return managed_irqs(self.host, self.path)

    def identity(self) -> FileStat | None:
        """The journal file's identity (inode, size, mtime), None when absent: cheap enough for
        the agent to notice at every drift interval that another run replaced the journal."""
        try:
            return self.host.lstat(self.path)
        except HostError:
            return None

    def save(self, journal: Journal) -> None:
        """Replace the journal atomically (mode 0600). Requires the state lock. Raises a
        HostError subclass."""
        self.lock.require("saving the tuning journal")
        self.host.write_file_atomic(self.path, to_json(journal).encode("utf-8"), mode=0o600)

    def remove(self) -> None:
        self.lock.require("removing the tuning journal")
        self.host.remove(self.path)


def load_journal(host: HostReader, path: str = JOURNAL_PATH) -> Journal | None:
    """The journal at `path`, or None when there is none: a reader's own, so the audit reads it
    through the reading role. Raises JournalError when one exists but cannot be read or
    trusted (EACCES, EIO, a symlink, not root's alone, larger than any journal mcpnode writes,
    not JSON, a wrong schema, a foreign path)."""
    shown = host.fs_path(path)
    try:
        data = host.read_trusted(path, MAX_JOURNAL_BYTES)
    except PathNotFound:
        return None
    except HostError as err:
        raise JournalError(shown, f"cannot be used: {err.detail}") from err
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise JournalError(shown, f"not UTF-8 (byte {err.start})") from err
    return from_json(text, shown)


def managed_irqs(host: HostReader, path: str = JOURNAL_PATH) -> frozenset[int]:
    """The interrupts an earlier apply found kernel-managed (for verify, which does not
    otherwise read the journal); empty when there is no usable journal."""
    try:
        journal = load_journal(host, path)
    except JournalError:
        return frozenset()
    return frozenset(journal.managed_irqs) if journal is not None else frozenset()
