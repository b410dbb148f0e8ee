"""The answer to "which profile is this host tuned with", as every consumer takes it:
`mcpnode profiles active`, verify, the audit, the manifest and the exporters.

tuning/active.py resolves it (agent state, journal, persisted file, configured, none: the
order is documented there); this record is what the layers above share, so the audit and the
CLI name it without reaching into tuning.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Source = Literal["agent", "journal", "persisted", "configured", "none"]


@dataclass(frozen=True)
class ActiveProfile:
    """The answer. `name` None with source "none": not tuned by mcpnode; with a `problem`: the
    journal could not be used, so the answer is unknown.

    applied: the profile's values were written by mcpnode (agent, journal, persisted) rather
             than only chosen (configured)
    by/at/hash: from the journal when it records them (who applied it, when, which content)
    detail:  one line for people (`mcpnode agent pid 812, adopted from an operator's apply`)"""

    name: str | None
    source: Source
    applied: bool
    detail: str
    by: str | None = None
    at: str | None = None
    hash: str | None = None
    problem: str | None = None

    @property
    def known(self) -> bool:
        return self.problem is None
