"""mcpnode's errors as the one line and the exit status a command ends with: shared by click's
entry point (cli/main.py `main`) and the fast path in front of it (cli/fast.py), so the same
failure reads the same whichever of the two ran the command. Imports nothing heavy: the fast
path calls it."""

from __future__ import annotations

import sys

from mcpnode.errors import (
    CommandNotFound,
    HostError,
    LockBusy,
    ManifestError,
    McpnodeError,
    PinRefused,
    PlacementUnavailable,
    ProbeDataError,
    ProbeUnavailable,
    ProcessGone,
    RootError,
    UsageError,
)
from mcpnode.exitcodes import (
    EXIT_DATAERR,
    EXIT_ERROR,
    EXIT_LOCKED,
    EXIT_NO_PROCESS,
    EXIT_NOT_FOUND,
    EXIT_REFUSED,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
)

# mcpnode's errors that read as themselves after a prefix: the types, the prefix, the exit
# status; tried in this order, the first that matches wins (ProcessGone is a HostError).
_LINES: tuple[tuple[type[McpnodeError] | tuple[type[McpnodeError], ...], str, int], ...] = (
    (UsageError, "", EXIT_USAGE),
    (ProcessGone, "", EXIT_NO_PROCESS),
    (PlacementUnavailable, "placement unavailable here: ", EXIT_UNAVAILABLE),
    (PinRefused, "refused: ", EXIT_REFUSED),
    (CommandNotFound, "", EXIT_NOT_FOUND),
    (LockBusy, "state lock busy: ", EXIT_LOCKED),
    (HostError, "", EXIT_ERROR),
    ((ManifestError, ProbeDataError), "", EXIT_DATAERR),
    (ProbeUnavailable, "probe: ", EXIT_ERROR),
)


def error_line(err: BaseException) -> tuple[str, int] | None:
    """(the line for stderr, the exit status) for one of mcpnode's errors or an OSError; None
    for anything else (a bug: let its traceback show). _LINES first, in its order, as the
    `except` clauses of cli/main.py's main() did; then the special cases."""
    for types, prefix, code in _LINES:
        if isinstance(err, types):
            return f"mcpnode: {prefix}{err}", code
    if isinstance(err, RootError):
        # Only the machine root raises it (a directory, a snapshot tarball): name the option,
        # and keep it one line (tarfile's error lists every compression it tried, a line each).
        return f"mcpnode: {err.given_as} {' '.join(str(err).split())}", EXIT_ERROR
    if _is_output_dir_missing(err):
        return f"mcpnode: {err}", EXIT_ERROR
    if isinstance(err, McpnodeError):
        # not at import: --help stays fast
        from mcpnode.tuning.errors import ProfileNotFound, UnknownKey

        if isinstance(err, ProfileNotFound):
            # A name the user typed (--profile, profiles show): a usage error, in one line.
            return f"mcpnode: unknown profile {err.name!r} ({err.where})", EXIT_USAGE
        if isinstance(err, UnknownKey):  # a key typed to `profiles explain`, likewise
            return f"mcpnode: {err}", EXIT_USAGE
        return f"mcpnode: {type(err).__name__}: {err}", EXIT_ERROR
    if isinstance(err, OSError):
        # Output files (snapshot -o) are the only I/O outside Host; report them plainly.
        return f"mcpnode: {err}", EXIT_ERROR
    return None


def _is_output_dir_missing(err: BaseException) -> bool:
    # cli/options.py imports click; if it was never imported, nothing raised its error.
    options = sys.modules.get("mcpnode.cli.options")
    return options is not None and isinstance(err, options.OutputDirMissing)
