"""The result of reading a file that may fail, as a value: the text, or `Absent` (the file is
not there), or `Unreadable` (it is there and could not be read: EACCES/EPERM is `denied`, any
other failure is not). Tuning decides on these (a sysctl that does not exist on this kernel is
`Absent`, never "" or 0), and the audit's facts hold them (a file it could not read is a SKIP
naming the reason, not a FAIL). The I/O that produces them goes through Host, in the layer that
reads; this module is the type alone.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Absent", "Reading", "Unreadable"]


@dataclass(frozen=True)
class Absent:
    """The file does not exist: the key is not on this kernel (or the device is gone)."""

    reason: str


@dataclass(frozen=True)
class Unreadable:
    """The file exists but could not be read. `denied` for EACCES/EPERM; `reason` says why, in
    the words of the reader that produced it (may be empty when all that is known is the
    denial)."""

    reason: str
    denied: bool


Reading = str | Absent | Unreadable
