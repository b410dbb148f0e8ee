"""What happened to one write: the record apply, rollback and recovery return and log."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# ok: written; failed: the write raised; restored: an original written back;
# restore-failed: writing an original back raised; unchanged: already the original (no write);
# gone: the key vanished (module unloaded) so there is nothing to restore;
# loaded / load-failed: a kernel module; managed: an interrupt whose affinity the kernel keeps
# (EIO on write: tuning/plugins/irq.py), recorded, not a failure; partial: written, and the
# kernel took less than asked (fewer huge pages: tuning/plugins/hugepages.py), `error` says what.
Result = Literal[
    "ok",
    "failed",
    "restored",
    "restore-failed",
    "unchanged",
    "gone",
    "loaded",
    "load-failed",
    "managed",
    "partial",
]


@dataclass(frozen=True)
class Outcome:
    key: str
    path: str  # logical path written ("" for a module)
    old: str | None  # value before the write, as read (None when unknown)
    new: str  # value written, or the module name
    result: Result
    error: str | None = None  # the HostError message when result is *failed
    errno: int | None = None  # its errno, when the kernel gave one

    @property
    def failed(self) -> bool:
        return self.result in ("failed", "restore-failed", "load-failed")
