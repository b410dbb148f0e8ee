"""Findings: what an audit check concludes, with the evidence and the remedy."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

AUDIT_SCHEMA = "mcpnode.audit/v1"


class Status(str, enum.Enum):
    PASS = "PASS"  # noqa: S105 - a status, not a password
    WARN = "WARN"
    FAIL = "FAIL"
    SKIP = "SKIP"  # could not be checked here (no GPU, not root, not applicable): says why
    INFO = "INFO"  # worth knowing, never a fault (PCIe generation below max at idle)


@dataclass(frozen=True)
class Evidence:
    """What was read, from where: a logical path, a command line, or an NVML fact."""

    source: str
    value: str


@dataclass(frozen=True)
class Finding:
    id: str  # stable, dotted: container.toolkit.version
    status: Status
    summary: str  # one line
    evidence: tuple[Evidence, ...] = ()
    remedy: str | None = None  # the exact command or file change; None when nothing to do
    subject: str | None = None  # what it is about when a check repeats (GPU bus id, key)

    @property
    def area(self) -> str:
        return self.id.split(".", 1)[0]


def skipped(fid: str, summary: str, evidence: Evidence, remedy: str | None = None) -> list[Finding]:
    """What a check finds when it cannot run here: one SKIP that says why (`summary`, which
    names what was not checked), with what showed it."""
    return [Finding(fid, Status.SKIP, summary, (evidence,), remedy)]


@dataclass(frozen=True)
class AuditReport:
    findings: tuple[Finding, ...]
    host: str | None
    kernel: str | None
    generated_at: str
    problems: tuple[str, ...] = field(default=())  # the audit's own trouble (a collector failed)
    profile: str | None = None  # the tuning profile compliance was checked against

    def count(self, status: Status) -> int:
        return sum(1 for f in self.findings if f.status is status)

    @property
    def failed(self) -> bool:
        return any(f.status is Status.FAIL for f in self.findings)
