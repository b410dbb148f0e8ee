"""Who may be trusted: files and directories root (or this euid) alone controls, the rule of
sshd's StrictModes and sudo's sudoers checks (read.py's read_trusted, write.py's lock); and
whether the writer a leftover file names still runs."""

from __future__ import annotations

import os
import stat


def _pid_running(pid: int) -> bool:
    """Whether a process with this pid exists here (kill(pid, 0); EPERM means it does)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _trusted_uids() -> frozenset[int]:
    return frozenset({0, os.geteuid()})


def _mode_problem(st: os.stat_result, what: str, path: str) -> str | None:
    """Why a file or directory with this stat may not be trusted, or None."""
    if st.st_uid not in _trusted_uids():
        return f"{what} {path} is owned by uid {st.st_uid}, not root"
    writable = st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    # A sticky world-writable directory (/tmp) lets nobody but an entry's owner rename or
    # replace that entry; the entry below it is checked on its own (sshd, sudo: same rule).
    if writable and not (stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX):
        kind = (
            "group- and world-writable"
            if writable == (stat.S_IWGRP | stat.S_IWOTH)
            else ("group-writable" if writable & stat.S_IWGRP else "world-writable")
        )
        return f"{what} {path} is {kind} (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def _untrusted_dirs(directory: str) -> str | None:
    """The first directory from `directory` up to `/` that may not be trusted, as a reason."""
    current = os.path.realpath(directory)
    while True:
        try:
            st = os.stat(current)
        except OSError as err:
            return f"directory {current} cannot be checked: {err.strerror}"
        problem = _mode_problem(st, "directory", current)
        if problem is not None:
            return problem
        if current == "/":
            return None
        current = os.path.dirname(current) or "/"
