"""Apply a profile, roll it back, recover from an interrupted run. The effects of tuning.

apply:    recover an interrupted run -> load modules -> (re)plan -> journal the originals
          (atomically, before the first write) -> write in plan order -> persist -> journal
          "applied". On the first failed write everything written so far is written back in
          reverse, and ApplyFailed reports both.
rollback: journal "rolling-back" -> write every original back in reverse -> restore or remove
          the persisted file -> remove the journal.
recover:  what the agent calls at start: undo an interrupted apply or rollback, if any.

A SIGKILL at any point leaves a journal whose state is not "applied" (or no journal, when no
write had happened yet), and the next apply/rollback/recover restores every original first.
Every write logs one structlog event with key, old, new and result.

Each of the three holds the state lock (state/lock.py) from loading the journal to its final
save, so two runs never interleave; a run that cannot get it within the store's wait raises
LockBusy and changes nothing. A dry run only reads and takes no lock.

The journal keeps the applied profile (name, content hash, when, by what) for as long as it
stays applied, also when no key needed writing: it is how `mcpnode profiles active`, verify and
the audit know which profile this host is tuned with.

Test hook: `MCPNODE_FAULT_PAUSE_AFTER_LOAD=SECONDS` sleeps between loading the journal and the
first read of the host, so overlap tests can run another writer in exactly that window.
"""

from __future__ import annotations

import errno as errno_mod
import os
import stat
import time
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any, NoReturn

import structlog

from mcpnode.codec.printable import printable
from mcpnode.errors import HostError, NotRegularFile, SymlinkLoop
from mcpnode.host import Host
from mcpnode.tuning import paths, plugins
from mcpnode.tuning.errors import ApplyFailed, RollbackIncomplete
from mcpnode.tuning.journal import (
    ABSENT,
    AppliedBy,
    AppliedProfile,
    FileMeta,
    Journal,
    JournalEntry,
    JournalStore,
    PersistRecord,
)
from mcpnode.tuning.model import PlanItem
from mcpnode.tuning.outcome import Outcome, Result
from mcpnode.tuning.partition import CpuPartition
from mcpnode.tuning.persist import Assignment, find_overrides, persisted_values, render_conf
from mcpnode.tuning.plan import Plan, plan, plan_restores
from mcpnode.tuning.plugins.base import Subsystem
from mcpnode.tuning.privilege import denied_hint
from mcpnode.tuning.profile import Profile
from mcpnode.tuning.read import Absent, Reading, read_value
from mcpnode.tuning.state import read_state, refuse_directory_keys
from mcpnode.tuning.values import Exact, restorable, satisfies

PERSIST_KEY = "persist:" + paths.PERSIST_PATH
PAUSE_ENV = "MCPNODE_FAULT_PAUSE_AFTER_LOAD"
MAX_FILE_BYTES = 1 << 16  # a whole file a subsystem writes (an environment file, a drop-in)


def _fault_pause() -> None:
    """The overlap-test hook (module docstring); read at each run, never at import."""
    value = os.environ.get(PAUSE_ENV, "")
    try:
        seconds = float(value) if value else 0.0
    except ValueError:
        return
    if seconds > 0:
        time.sleep(seconds)


def logger() -> Any:
    return structlog.get_logger("mcpnode.tuning")


@dataclass(frozen=True)
class PersistResult:
    path: str  # as shown (under the root)
    content: str
    written: bool
    overrides: tuple[Assignment, ...]


@dataclass(frozen=True)
class ApplyResult:
    profile: str
    dry_run: bool
    plan: Plan  # the plan executed (made again after loading modules)
    restores: tuple[PlanItem, ...]  # journaled keys this profile no longer sets
    recovered: tuple[Outcome, ...]  # an interrupted earlier run, undone first
    loads: tuple[Outcome, ...]
    writes: tuple[Outcome, ...]
    persist: PersistResult | None
    journal: str
    notes: tuple[str, ...]
    managed: tuple[Outcome, ...] = ()  # interrupts the kernel refused to move (EIO)


@dataclass(frozen=True)
class RollbackResult:
    journal: str
    profile: str | None  # None when there was nothing to roll back
    outcomes: tuple[Outcome, ...]


def _write(
    host: Host,
    item_key: str,
    path: str,
    old: str | None,
    new: str,
    event: str,
    log: Any,
    whole_file: bool = False,
    meta: FileMeta | None = None,
) -> Outcome:
    """One value write through the key's subsystem (tuning/plugins/), logged. Returns the
    outcome; never raises HostError.

    A whole-file key's value (its subsystem's `file_keys`) is what its subsystem makes of the file
    (`file_text`: irqbalance's banned cpulist set in its environment file), or with
    `whole_file` (restores, undo) the file's original text; the outcome's `old` is then the
    whole file as it was, so an undo puts it back byte for byte.
    `meta` (restores, undo): what the journal says the file was, put back with the text.
    A write the kernel took only in part (Subsystem.granted) is a "partial" outcome."""
    got: str | None = None
    try:
        subsystem = plugins.subsystem_of(item_key)
        if item_key in subsystem.file_keys:
            old = _write_file_key(host, subsystem, item_key, path, new, whole_file, meta)
        else:
            before = subsystem.write(host, item_key, path, new, whole_file)
            old = before if before is not None else old
            got = subsystem.granted(host, item_key, path, new) if event == "write" else None
    except HostError as err:
        result: Result = "restore-failed" if event != "write" else "failed"
        outcome = Outcome(item_key, path, old, new, result, str(err), err.errno)
        log.error(event, key=item_key, old=old, new=new, result=result, error=str(err))
        return outcome
    if got is not None:
        # Written, and the kernel took less (fewer huge pages): never a silent success.
        why = f"the kernel took {got} of {new}"
        log.warning(event, key=item_key, old=old, new=new, result="partial", granted=got)
        return Outcome(item_key, path, old, new, "partial", why)
    written: Result = "restored" if event != "write" else "ok"
    log.info(event, key=item_key, old=old, new=new, result=written)
    return Outcome(item_key, path, old, new, written)


def _write_file_key(
    host: Host,
    subsystem: Subsystem,
    key: str,
    path: str,
    new: str,
    whole_file: bool,
    meta: FileMeta | None = None,
) -> str:
    """Write a whole-file key (a subsystem's `file_keys`) atomically: the subsystem's `file_text` of
    `new` (irqbalance's banned CPUs set in its environment file; a drop-in's whole text), or
    with `whole_file` (restores, undo) `new` as the whole text, then the subsystem's
    `after_file_write` (grub-mkconfig). Returns the file's text before ("" when it did not
    exist).

    Applying (no `meta`) keeps the file's own mode (safe_mode) and owner, creates a new file
    0644, and "" removes a drop-in (`empty_file_removes`); a symbolic link or other
    non-regular file there is refused (current_meta). Restoring with `meta` (the journal's
    record, or the file as an undone run found it) puts the file back exactly: removed when it
    was absent, else a regular file with the recorded text, mode and owner, replacing whatever
    is there now (rename(2) replaces a link, never writes through it). Raises HostError."""
    prior: FileMeta | None
    if meta is not None:
        try:
            prior = current_meta(host, path)
            before = host.read_optional(path, limit=MAX_FILE_BYTES)
        except HostError:  # a link (or unreadable): replaced all the same, not put back
            prior, before = None, None
        _put(host, path, new, meta)
    else:
        prior = current_meta(host, path)  # before reading: a link is refused, not followed
        before = host.read_optional(path, limit=MAX_FILE_BYTES)
        text = new if whole_file else subsystem.file_text(key, before or "", new)
        if text == "" and subsystem.empty_file_removes:
            host.remove(path)
        else:
            _put(host, path, text, prior if prior.kind == "regular" else FileMeta("regular"))
    try:
        subsystem.after_file_write(host, key)
    except HostError:
        # This step failed as a whole: the file goes back as it was (absent, or its text,
        # mode and owner) before the error is reported, so the caller's undo (which skips a
        # failed write) has nothing left behind.
        if prior is not None:
            _put(host, path, before or "", prior)
        raise
    return before or ""


def current_meta(host: Host, path: str) -> FileMeta:
    """What `path` is now: absent, or a regular file's mode and owner. A symbolic link raises
    SymlinkLoop and anything else that is not a regular file NotRegularFile: mcpnode neither
    writes through a link (the file it points to may be anyone's, anywhere) nor replaces one
    (the administrator's link would silently stop meaning anything), like systemd's
    WRITE_STRING_FILE_NOFOLLOW (docs/tuning.md, "Files mcpnode replaces")."""
    st = host.lstat(path)
    if st is None:
        return ABSENT
    if stat.S_ISLNK(st.mode):
        target = host.readlink(path)
        shown = printable(target[:200]) if target is not None else "?"
        raise SymlinkLoop(
            path,
            None,
            f"is a symbolic link (to {shown}): mcpnode replaces this file only when it is a "
            "regular file or absent; make it a regular file (or leave this setting out) and "
            "apply again",
        )
    if not stat.S_ISREG(st.mode):
        raise NotRegularFile(path, None, "is not a regular file: mcpnode will not replace it")
    return FileMeta.regular(st)


def safe_mode(mode: int | None) -> int:
    """The permission bits mcpnode writes a file with, from a recorded or found `mode`: never
    group- or world-writable, never setuid, setgid or sticky (these are configuration files a
    root service or grub-mkconfig reads: whoever can write one runs code as root). 0777 is what
    lstat() answers for every symbolic link on Linux, so it means "no mode": 0644."""
    if mode is None or mode & 0o777 == 0o777:
        return 0o644
    return mode & 0o755


def _put(host: Host, path: str, text: str, meta: FileMeta) -> None:
    """Make `path` what `meta` says with `text`: absent removes it (a link itself, never its
    target), regular writes `text` with the mode (safe_mode) and owner recorded."""
    if meta.kind == "absent":
        host.remove(path)
        return
    host.write_file_atomic(
        path, text.encode("utf-8"), mode=safe_mode(meta.mode), owner=(meta.uid, meta.gid)
    )


def _restore_entry(host: Host, entry: JournalEntry, event: str, log: Any) -> Outcome:
    if plugins.is_raw_key(entry.key):
        try:
            subsystem = plugins.subsystem_of(entry.key)
            text = subsystem.current_text(host, entry.key, entry.path)
        except HostError:
            text = None
        if text == entry.original and _file_is(host, entry.path, entry.file):
            return Outcome(entry.key, entry.path, text, entry.original, "unchanged")
        return _write(
            host, entry.key, entry.path, text, entry.original, event, log, True, entry.file
        )
    owner = plugins.owner(entry.key)
    # A value no file holds (a NIC's rings) is read back the way its subsystem reads it.
    found = owner.read_restore(host, entry.path) if owner is not None else None
    reading = found if found is not None else read_value(host, entry.path)
    if isinstance(reading, Absent):
        log.warning(event, key=entry.key, old=None, new=entry.original, result="gone")
        return Outcome(entry.key, entry.path, None, entry.original, "gone")
    if isinstance(reading, str) and satisfies(reading, Exact(entry.original)):
        return Outcome(entry.key, entry.path, reading, entry.original, "unchanged")
    old = reading if isinstance(reading, str) else None
    return _write(host, entry.key, entry.path, old, entry.original, event, log)


def _file_is(host: Host, path: str, meta: FileMeta | None) -> bool:
    """Whether `path` is still what `meta` says (type, mode and owner); True without a `meta`
    (a journal from before they were recorded: the text alone is compared)."""
    if meta is None:
        return True
    try:
        st = host.lstat(path)
    except HostError:
        return False
    if meta.kind == "absent":
        return st is None
    return (
        st is not None
        and stat.S_ISREG(st.mode)
        and st.mode & 0o7777 == safe_mode(meta.mode)
        and (st.uid, st.gid) == (meta.uid, meta.gid)
    )


def _restore_persisted(host: Host, record: PersistRecord, log: Any) -> Outcome:
    current: str | None
    try:
        current = host.read_optional(record.path)
    except HostError:
        current = None
    try:
        if record.original is None:
            host.remove(record.path)
        elif current != record.original or not _meta_matches(host, record):
            # Replaces whatever is there now (a link included: rename(2) never follows one)
            # with the original as a regular file, its mode made safe (safe_mode).
            owner = None if record.uid is None or record.gid is None else (record.uid, record.gid)
            host.write_file_atomic(
                record.path,
                record.original.encode("utf-8"),
                mode=safe_mode(record.mode),
                owner=owner,
            )
        else:
            return Outcome(PERSIST_KEY, record.path, current, "original", "unchanged")
    except HostError as err:
        log.error(
            "restore", key=PERSIST_KEY, old="mcpnode", new="original", result="restore-failed"
        )
        return Outcome(PERSIST_KEY, record.path, None, "original", "restore-failed", str(err))
    new = "removed" if record.original is None else "original"
    log.info(
        "restore", key=PERSIST_KEY, old="mcpnode" if current else None, new=new, result="restored"
    )
    return Outcome(PERSIST_KEY, record.path, None, new, "restored")


def _meta_matches(host: Host, record: PersistRecord) -> bool:
    """Whether the file is still a regular file with the mode and owner recorded (True when
    none was recorded and it is not a symbolic link)."""
    if record.mode is None:
        try:
            st = host.lstat(record.path)
        except HostError:
            return False
        return st is None or not stat.S_ISLNK(st.mode)
    try:
        st = host.lstat(record.path)
    except HostError:
        return False
    return (
        st is not None
        and stat.S_ISREG(st.mode)
        and st.mode & 0o7777 == safe_mode(record.mode)
        and (st.uid, st.gid) == (record.uid, record.gid)
    )


def _restore_everything(
    host: Host, store: JournalStore, journal: Journal, log: Any
) -> tuple[Outcome, ...]:
    """Write every original back in reverse, restore the persisted file, remove the journal.
    Raises RollbackIncomplete (journal kept) when any of it fails."""
    if journal.state != "rolling-back":
        store.save(journal.with_state("rolling-back"))
    outcomes = [_restore_entry(host, e, "restore", log) for e in reversed(journal.entries)]
    if journal.persist is not None:
        outcomes.append(_restore_persisted(host, journal.persist, log))
    result = tuple(outcomes)
    if any(o.failed for o in result):
        raise RollbackIncomplete(result)
    store.remove()
    return result


# Every file this engine replaces with Host.write_file_atomic: its temporaries a SIGKILL left
# behind are removed when a run starts, like the journal's (tuning/journal.py). The subsystems
# name theirs (Subsystem.atomic_files); --persist's file is the engine's own.
ATOMIC_FILES = (paths.PERSIST_PATH, *plugins.atomic_files())


def _remove_stale_temps(host: Host, store: JournalStore, log: Any) -> None:
    """At the start of a run, under the state lock: the temporary files (`.NAME.PID.RAND.tmp`)
    an apply or rollback killed between create and rename left beside the files it writes, so
    a crash's leftover does not stay in /etc/sysctl.d until that file is written again. Only
    those whose writer is gone (host/write.py)."""
    removed = store.host.remove_stale_temps(store.path)
    for path in ATOMIC_FILES:
        removed += host.remove_stale_temps(path)
    if removed:
        log.info("cleanup", removed=removed, result="stale temporary files removed")


def rollback(host: Host, store: JournalStore, log: Any | None = None) -> RollbackResult:
    """Restore every original recorded in the journal (the persisted file with its mode and
    owner), then remove the persisted file and the journal. Nothing to do without a journal.
    Raises LockBusy (another run holds the state lock), JournalError (unreadable or untrusted
    journal) or RollbackIncomplete (some originals could not be written; the journal is kept)."""
    log = log if log is not None else logger()
    lock = store.lock
    if not lock.host.exists(lock.path) and not store.host.exists(store.path):
        # Every apply holds this lock from before its journal's first save, creating its file:
        # with neither file nothing was applied here (no journal, no temp file to clean), and a
        # rollback that finds nothing to do leaves nothing behind either. Anything at the
        # journal's path, even without a lock, is loaded under the lock and judged as ever.
        # A dead writer's temporaries are still swept: removing them needs no lock (only files
        # whose writer is gone are touched, and nothing reads them) and creates nothing.
        _remove_stale_temps(host, store, log)
        return RollbackResult(store.shown, None, ())
    with lock.hold(store.wait_s):
        _remove_stale_temps(host, store, log)
        journal = store.load()
        if journal is None:
            return RollbackResult(store.shown, None, ())
        return RollbackResult(
            store.shown, journal.profile, _restore_everything(host, store, journal, log)
        )


def recover(host: Host, store: JournalStore, log: Any | None = None) -> tuple[Outcome, ...]:
    """Undo an interrupted apply or rollback (journal state not "applied"). For agent start.
    Raises LockBusy, JournalError or RollbackIncomplete like rollback."""
    log = log if log is not None else logger()
    with store.lock.hold(store.wait_s):
        _remove_stale_temps(host, store, log)
        journal = store.load()
        if journal is None or journal.state == "applied":
            return ()
        log.warning("recover", journal=store.shown, state=journal.state, profile=journal.profile)
        return _restore_everything(host, store, journal, log)


def _load_modules(host: Host, items: tuple[PlanItem, ...], log: Any) -> tuple[Outcome, ...]:
    out = []
    for item in items:
        name = item.key.removeprefix("module:")
        try:
            host.load_module(name)
        except HostError as err:
            log.error(
                "load",
                key=item.key,
                old="not loaded",
                new=name,
                result="load-failed",
                error=str(err),
            )
            out.append(Outcome(item.key, "", "not loaded", name, "load-failed", str(err)))
            continue
        log.info("load", key=item.key, old="not loaded", new=name, result="loaded")
        out.append(Outcome(item.key, "", "not loaded", name, "loaded"))
    return tuple(out)


def apply_profile(
    host: Host,
    profile: Profile,
    store: JournalStore,
    *,
    persist: bool = False,
    dry_run: bool = False,
    hold: frozenset[str] = frozenset(),
    by: AppliedBy = "cli",
    log: Any | None = None,
    partition: CpuPartition | None = None,
) -> ApplyResult:
    """Apply `profile` to `host`, journaling originals in `store` first, under the state lock
    (a dry run only reads, unlocked). `by` is recorded in the journal as who applied it.
    `partition`: the housekeeping CPUs and GPU slices `[irq]` places against (None: its items
    are skipped, saying why). An interrupt the kernel refuses to move (EIO) is recorded in the
    journal as managed, not a failure (tuning/plugins/irq.py).

    `hold` names keys left exactly as they are: not written, not restored, their journal
    entries kept. The agent holds the keys it gave up remediating (another owner keeps
    changing them): writing the profile's value or the original back would both be fighting.

    Raises LockBusy when another run holds the state lock past the store's wait, JournalError
    before any write when the journal cannot be trusted, ApplyFailed when a write fails (after
    undoing the earlier ones), RollbackIncomplete when undoing an interrupted earlier run fails,
    and HostError subclasses for failures outside the writes."""
    log = log if log is not None else logger()
    if dry_run:
        return _apply(host, profile, store, persist, True, hold, by, log, partition)
    with store.lock.hold(store.wait_s):
        _remove_stale_temps(host, store, log)
        return _apply(host, profile, store, persist, False, hold, by, log, partition)


def _apply(
    host: Host,
    profile: Profile,
    store: JournalStore,
    persist: bool,
    dry_run: bool,
    hold: frozenset[str],
    by: AppliedBy,
    log: Any,
    partition: CpuPartition | None,
) -> ApplyResult:
    journal = store.load()
    _fault_pause()
    notes: list[str] = []
    recovered: tuple[Outcome, ...] = ()
    if journal is not None and journal.state != "applied":
        if dry_run:
            notes.append(
                f"an interrupted run ({journal.state}) will be undone first: {store.shown}"
            )
        else:
            log.warning(
                "recover", journal=store.shown, state=journal.state, profile=journal.profile
            )
            recovered = _restore_everything(host, store, journal, log)
            journal = None
    entries = journal.entries if journal is not None else ()
    held = tuple(e for e in entries if e.key in hold)
    entries = tuple(e for e in entries if e.key not in hold)
    if hold:
        profile = replace(profile, settings=tuple(x for x in profile.settings if x.key not in hold))
    extra = [e.path for e in entries]
    known_managed = journal.managed_irqs if journal is not None else ()
    refused_before = frozenset(known_managed)

    refuse_directory_keys(host, profile)
    state = read_state(host, profile, extra, partition=partition, managed=refused_before)
    current = plan(profile, state)
    loads: tuple[Outcome, ...] = ()
    if current.loads and not dry_run:
        loads = _load_modules(host, current.loads, log)
        state = read_state(host, profile, extra, partition=partition, managed=refused_before)
        current = plan(profile, state)
    restores = plan_restores(tuple((e.key, e.path, e.original) for e in entries), current, state)

    conf: str | None = None
    persist_result: PersistResult | None = None
    if persist:
        conf = render_conf(profile, current)
        overrides = find_overrides(host, persisted_values(current))
        persist_result = PersistResult(
            host.fs_path(paths.PERSIST_PATH), conf, not dry_run, overrides
        )
    elif journal is not None and journal.persist is not None:
        notes.append(
            f"{paths.PERSIST_PATH} from an earlier --persist is left as it was "
            "(apply --persist to update it, rollback to remove it)"
        )
    # Every whole file this run may replace, as it is now: a symbolic link (or a directory)
    # there stops the run here, before the journal and the first write (current_meta), and a
    # dry run says so too. What is found is what the journal records and an undo puts back.
    found = {
        i.path: current_meta(host, i.path)
        for i in (*(r for r in restores if r.action == "set"), *current.writes)
        if plugins.is_file_key(i.key)
    }
    if persist:
        found[paths.PERSIST_PATH] = current_meta(host, paths.PERSIST_PATH)
    if dry_run:
        return ApplyResult(
            profile=profile.name,
            dry_run=True,
            plan=current,
            restores=restores,
            recovered=(),
            loads=(),
            writes=(),
            persist=persist_result,
            journal=store.shown,
            notes=tuple(notes),
        )

    # Journal first: every original this run may overwrite, before the first write.
    base = journal if journal is not None else Journal("applied", profile.name, ())
    planned_paths = {i.path for i in current.items if i.path}
    # The rest are restored now; held keys keep their entries untouched.
    kept = [e for e in base.entries if e.path in planned_paths or e in held]
    known = {e.path for e in base.entries}
    added = [
        JournalEntry(i.key, i.path, _original(i, state.readings.get(i.path)), found.get(i.path))
        for i in current.writes
        if i.path not in known and (i.current is not None or plugins.is_raw_key(i.key))
    ]
    persist_record = base.persist
    if persist and persist_record is None:
        persist_record = PersistRecord.of(
            paths.PERSIST_PATH,
            host.read_optional(paths.PERSIST_PATH),
            host.lstat(paths.PERSIST_PATH),
        )
    modules = base.modules + tuple(
        o.new for o in loads if o.result == "loaded" and o.new not in base.modules
    )
    todo = [*(r for r in restores if r.action == "set"), *current.writes]
    applied = _applied_record(profile, by, journal)
    working: Journal | None = None
    if todo or persist:
        # Entries being restored stay in the journal until the run completes.
        working = Journal(
            "applying", profile.name, (*base.entries, *added), persist_record, modules, applied
        )
        store.save(working)

    done: list[Outcome] = []
    managed: list[Outcome] = []
    originals = {e.path: e.file for e in base.entries}
    for item in todo:
        assert item.desired is not None
        whole = item.rule == "original"  # a restore of an entry the profile no longer sets
        meta = originals.get(item.path) if whole else None
        outcome = _write(
            host, item.key, item.path, item.current, item.desired, "write", log, whole, meta
        )
        if outcome.failed and plugins.subsystem_of(item.key).refused_as_managed(item.key, outcome):
            log.info("write", key=item.key, old=item.current, new=item.desired, result="managed")
            managed.append(replace(outcome, result="managed"))
            continue
        if outcome.failed:
            _fail(host, store, journal, done, outcome, log, found)
        done.append(outcome)
    if persist and conf is not None:
        try:
            host.write_file_atomic(paths.PERSIST_PATH, conf.encode("utf-8"), mode=0o644)
        except HostError as err:
            failure = Outcome(
                PERSIST_KEY, paths.PERSIST_PATH, None, profile.name, "failed", str(err), err.errno
            )
            log.error("write", key=PERSIST_KEY, old=None, new=profile.name, result="failed")
            _fail(host, store, journal, done, failure, log, found)
        log.info("write", key=PERSIST_KEY, old=None, new=profile.name, result="ok")

    # Kept even with no entries: it records which profile is applied (tuning/active.py).
    refused = {o.key for o in managed}
    managed_irqs = tuple(
        sorted(
            {*known_managed, *(n for o in managed if (n := paths.irq_number(o.key)) is not None)}
        )
    )
    final = Journal(
        "applied",
        profile.name,
        (*kept, *(e for e in added if e.key not in refused)),
        persist_record,
        modules,
        applied,
        managed_irqs,
    )
    if working is not None or final != journal:
        store.save(final)
    restored = sum(1 for r in restores if r.action == "set")
    if restored:
        notes.append(f"restored {restored} key(s) the previous profile set and this one does not")
    if managed:
        notes.append(
            f"{len(managed)} interrupt(s) are kernel-managed (EIO on write): left where the "
            "kernel put them, recorded in the journal"
        )
    for subsystem in plugins.SUBSYSTEMS:
        notes.extend(subsystem.notes(host, current.items, done))
    return ApplyResult(
        profile=profile.name,
        dry_run=False,
        plan=current,
        restores=restores,
        recovered=recovered,
        loads=loads,
        writes=tuple(done),
        persist=persist_result,
        journal=store.shown,
        notes=tuple(notes),
        managed=tuple(managed),
    )


def _original(item: PlanItem, reading: Reading | None) -> str:
    """What the journal keeps to restore `item`: the value as read, or for an irqbalance key
    the whole environment file."""
    if plugins.is_raw_key(item.key):
        return reading if isinstance(reading, str) else ""
    assert item.current is not None
    return restorable(item.current)


def _applied_record(profile: Profile, by: AppliedBy, before: Journal | None) -> AppliedProfile:
    """The journal's `applied` for this run: the previous record (its time) when the same
    profile, unchanged, is applied again by the same kind of run, so the agent's drift
    remediations do not rewrite it every interval; a new one otherwise."""
    digest = profile.content_hash
    old = before.applied if before is not None else None
    if old is not None and (old.profile, old.hash, old.by) == (profile.name, digest, by):
        return old
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    return AppliedProfile(profile.name, digest, now, by)


def _fail(
    host: Host,
    store: JournalStore,
    before: Journal | None,
    done: list[Outcome],
    failure: Outcome,
    log: Any,
    found: dict[str, FileMeta],
) -> NoReturn:
    """Undo `done` in reverse, put the journal back as it was before this run, raise. `found`:
    each whole file as it was before this run (absent, or its mode and owner)."""
    undone = []
    for o in reversed(done):
        if plugins.is_raw_key(o.key):  # the whole file (or grubby's args) as it was
            meta = found.get(o.path)
            undone.append(_write(host, o.key, o.path, o.new, o.old or "", "undo", log, True, meta))
            continue
        assert o.old is not None
        undone.append(_write(host, o.key, o.path, o.new, restorable(o.old), "undo", log))
    complete = not any(u.failed for u in undone)
    if complete:
        # The host is as it was before this run: so is the journal. Should this fail (or
        # the process die here), the "applying" journal makes the next run restore originals.
        try:
            if before is None:
                store.remove()
            else:
                store.save(before)
        except HostError as err:
            log.error("journal", journal=store.shown, result="failed", error=str(err))
    hint = None
    if failure.errno in (errno_mod.EACCES, errno_mod.EPERM, errno_mod.EROFS):
        hint = denied_hint(failure.key, failure.errno, plugins.requirement(failure.key))
    raise ApplyFailed(failure, tuple(undone), hint)
