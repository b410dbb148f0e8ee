"""Errors of the tuning engine. The CLI maps them to exit codes with the rest
(cli/errors.py; the codes are exitcodes.py's)."""

from __future__ import annotations

from mcpnode.errors import McpnodeError
from mcpnode.tuning.outcome import Outcome


class ProfileError(McpnodeError):
    """A profile cannot be used. Raised before anything is read from or written to the host.

    `file` is the profile file at fault (a real path, or the name looked up when no file was
    found); `key` the offending key as written (`net..core`, `include`, a section name) or None
    when the file itself is unreadable or not TOML (the message then gives line and column)."""

    def __init__(self, file: str, key: str | None, detail: str, section: str | None = None):
        where = file
        if section is not None and key is not None:
            where += f": [{section}] {key!r}"
        elif key is not None:
            where += f": {key!r}"
        super().__init__(f"{where}: {detail}")
        self.file = file
        self.key = key
        self.section = section
        self.detail = detail


class ProfileNotFound(ProfileError):
    """No profile has the name asked for (on the command line or in the agent's configuration):
    a usage error, not a broken file. `name` is the name, `available` the profiles there are."""

    def __init__(self, name: str, available: tuple[str, ...], searched: str) -> None:
        self.where = f"profiles: {', '.join(available) or 'none'}; searched {searched}"
        super().__init__(f"{name}.toml", None, f"no profile named {name!r} ({self.where})")
        self.name = name
        self.available = available


class UnknownKey(McpnodeError):
    """`profiles explain KEY` for a key nothing knows: not under this root's /proc/sys, not in
    mcpnode's key facts, set by no profile (a typo, most likely). A usage error (exit 64), as an
    unknown profile name is."""

    def __init__(self, key: str, why: str) -> None:
        super().__init__(
            f"unknown key {key!r}: {why}; mcpnode's facts and every profile lack it too"
        )
        self.key = key


class JournalError(McpnodeError):
    """The tuning journal exists but cannot be read or trusted. Never treated as empty: the
    originals it holds are the only way back, so apply and rollback stop until a person looks."""

    def __init__(self, path: str, detail: str) -> None:
        super().__init__(
            f"{path}: {detail}. The journal holds the original values; refusing to continue. "
            "Inspect it (or restore it from backup) before running apply or rollback again."
        )
        self.path = path
        self.detail = detail


class ApplyFailed(McpnodeError):
    """A write failed mid-apply. `failure` is that write; `undone` what was changed before it,
    written back in reverse order. `undo_complete` is False when an undo write failed too (the
    journal is then kept, and the next apply or rollback finishes the job)."""

    def __init__(self, failure: Outcome, undone: tuple[Outcome, ...], hint: str | None) -> None:
        lines = [f"writing {failure.key} = {failure.new!r} failed: {failure.error}"]
        if hint:
            lines.append(f"  {hint}")
        if undone:
            lines.append(f"rolled back {len(undone)} earlier write(s), in reverse:")
            for o in undone:
                status = "ok" if not o.failed else f"FAILED: {o.error}"
                lines.append(f"  {o.key} = {o.new!r}: {status}")
        else:
            lines.append("nothing had been written before it; the host is unchanged.")
        self.undo_complete = not any(o.failed for o in undone)
        if not self.undo_complete:
            lines.append("the journal is kept: run `mcpnode rollback` to restore the originals.")
        super().__init__("\n".join(lines))
        self.failure = failure
        self.undone = undone
        self.hint = hint


class RollbackIncomplete(McpnodeError):
    """Some originals could not be written back; the journal is kept for another attempt."""

    def __init__(self, outcomes: tuple[Outcome, ...]) -> None:
        bad = [o for o in outcomes if o.failed]
        lines = [f"{len(bad)} original value(s) could not be restored; the journal is kept:"]
        lines += [f"  {o.key} = {o.new!r}: {o.error}" for o in bad]
        super().__init__("\n".join(lines))
        self.outcomes = outcomes
