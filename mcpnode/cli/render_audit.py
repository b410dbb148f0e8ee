"""Audit renderers: text (kube-bench's shape: results by area, Remedies, one-line summary),
JSON (schema mcpnode.audit/v1, docs/audit-schema.json) and JUnit XML for CI systems."""

from __future__ import annotations

import json
import os
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

from mcpnode.audit.model import AUDIT_SCHEMA, AuditReport, Finding, Status
from mcpnode.codec.printable import printable

STATUS_ORDER = (Status.PASS, Status.FAIL, Status.WARN, Status.SKIP, Status.INFO)
_COLOURS = {
    Status.PASS: "\033[32m",  # green
    Status.FAIL: "\033[31m",  # red
    Status.WARN: "\033[33m",  # yellow
    Status.SKIP: "\033[2m",  # dim
    Status.INFO: "\033[36m",  # cyan
}
_RESET = "\033[0m"


def area_titles() -> dict[str, str]:
    from mcpnode.audit.run import AREAS

    return {a.prefix: a.title for a in AREAS}


def failed(report: AuditReport, strict: bool = False) -> bool:
    """Whether the audit fails: a FAIL, or with --strict a WARN too."""
    return report.failed or (strict and report.count(Status.WARN) > 0)


def _groups(report: AuditReport) -> list[tuple[str, list[Finding]]]:
    """Findings by area, areas in the order their first finding appears (AREAS order)."""
    out: dict[str, list[Finding]] = {}
    for f in report.findings:
        out.setdefault(f.area, []).append(f)
    return list(out.items())


def _label(f: Finding) -> str:
    return f"{f.id} [{printable(f.subject)}]" if f.subject else f.id


def summary_line(report: AuditReport, strict: bool = False) -> str:
    counts = ", ".join(f"{report.count(s)} {s.value}" for s in STATUS_ORDER)
    verdict = "FAILED" if failed(report, strict) else "passed"
    extra = " (--strict: WARN fails)" if strict else ""
    return f"{len(report.findings)} checks: {counts}; audit {verdict}{extra}"


# What the text report lists one by one unless --verbose: what someone has to act on or know was
# not checked, first the failures (kube-bench, `dcgmi diag` and NHC lead with them too). PASS and
# INFO findings are counted per area.
LISTED = (Status.FAIL, Status.WARN, Status.SKIP)


def filter_status(report: AuditReport, statuses: Iterable[Status]) -> AuditReport:
    """The report with only the findings of `statuses` (`--status`): like --only, the summary and
    the exit status then count only them."""
    keep = frozenset(statuses)
    return replace(report, findings=tuple(f for f in report.findings if f.status in keep))


def parse_statuses(values: Iterable[str]) -> tuple[Status, ...]:
    """`--status FAIL,WARN` (comma-separated, repeatable, any case) -> statuses in STATUS_ORDER.
    Raises ValueError naming the word that is no status."""
    names = {s.value for s in Status}
    chosen = set()
    for value in values:
        for word in value.split(","):
            word = word.strip().upper()
            if word not in names:
                raise ValueError(f"{word or '(empty)'!r} is not one of {', '.join(sorted(names))}")
            chosen.add(Status(word))
    return tuple(s for s in STATUS_ORDER if s in chosen)


def _counts(findings: Iterable[Finding]) -> str:
    found = list(findings)
    return ", ".join(
        f"{n} {s.value}" for s in STATUS_ORDER if (n := sum(f.status is s for f in found))
    )


def as_text(
    report: AuditReport, color: bool = False, strict: bool = False, verbose: bool = False
) -> str:
    """The terminal report. `verbose`: every finding, by area. Otherwise the FAIL, WARN and SKIP
    findings (LISTED), failures first, then one line per area counting its findings; both then
    give the remedies, the audit's own problems and the summary line."""

    def mark(status: Status) -> str:
        text = f"[{status.value}]"
        return f"{_COLOURS[status]}{text}{_RESET}" if color else text

    titles = area_titles()
    lines = [
        f"mcpnode audit: host {printable(report.host or 'unknown (no hostname recorded)')}, "
        f"kernel {printable(report.kernel or 'unknown (no /proc/version)')}, "
        + (
            f"profile {printable(report.profile)}"
            if report.profile
            else "no tuning profile checked"
        ),
        "",
    ]
    if verbose:
        for area, findings in _groups(report):
            lines.append(f"== {titles.get(area, area)} ==")
            lines.extend(f"{mark(f.status)} {_label(f)}: {printable(f.summary)}" for f in findings)
            lines.append("")
    else:
        listed = [f for status in LISTED for f in report.findings if f.status is status]
        if listed:
            lines.append("== " + ", ".join(s.value for s in LISTED) + " ==")
            lines.extend(f"{mark(f.status)} {_label(f)}: {printable(f.summary)}" for f in listed)
            lines.append("")
        groups = _groups(report)
        if groups:
            lines.append("== Areas (--verbose lists every finding) ==")
            lines.extend(f"{titles.get(area, area)}: {_counts(fs)}" for area, fs in groups)
            lines.append("")
    remedies = [f for f in report.findings if f.remedy and f.status in (Status.FAIL, Status.WARN)]
    if remedies:
        lines.append("== Remedies ==")
        # Findings of one id with one remedy (every drifted key of a profile: one apply) are
        # one line naming all their subjects, not the same command once per key.
        grouped: dict[tuple[str, str], list[Finding]] = {}
        for f in remedies:
            assert f.remedy is not None
            grouped.setdefault((f.id, f.remedy), []).append(f)
        for (fid, remedy), group in grouped.items():
            subjects = [f.subject for f in group if f.subject]
            label = f"{fid} [{printable(', '.join(subjects))}]" if subjects else fid
            lines.append(f"{label}: {printable(remedy)}")
        lines.append("")
    if report.problems:
        lines.append("== Problems (the audit's own) ==")
        lines.extend(printable(p) for p in report.problems)
        lines.append("")
    lines.append("== Summary ==")
    lines.append(summary_line(report, strict))
    return "\n".join(lines) + "\n"


def finding_json(f: Finding) -> dict[str, Any]:
    return {
        "id": f.id,
        "area": f.area,
        "status": f.status.value,
        "subject": f.subject,
        "summary": f.summary,
        "evidence": [{"source": e.source, "value": e.value} for e in f.evidence],
        "remedy": f.remedy,
    }


def report_json(report: AuditReport, strict: bool = False) -> dict[str, Any]:
    return {
        "schema": AUDIT_SCHEMA,
        "generated_at": report.generated_at,
        "host": report.host,
        "kernel": report.kernel,
        "profile": report.profile,
        "strict": strict,
        "result": "fail" if failed(report, strict) else "pass",
        "summary": {
            "total": len(report.findings),
            **{s.value.lower(): report.count(s) for s in STATUS_ORDER},
        },
        "findings": [finding_json(f) for f in report.findings],
        "problems": list(report.problems),
    }


def as_json(report: AuditReport, strict: bool = False) -> str:
    return json.dumps(report_json(report, strict), indent=2) + "\n"


def _details(f: Finding) -> str:
    lines = [f"{printable(e.source)}: {printable(e.value)}" for e in f.evidence]
    if f.remedy:
        lines.append(f"remedy: {printable(f.remedy)}")
    return "\n".join(lines)


def as_junit(report: AuditReport, strict: bool = False) -> str:
    """One testsuite per area, one testcase per finding: FAIL (and WARN under --strict) is a
    <failure>, SKIP a <skipped>; PASS/INFO/WARN keep their evidence in <system-out>."""
    titles = area_titles()
    suites = ET.Element("testsuites", name="mcpnode audit")
    total = fails = skips = 0
    for area, findings in _groups(report):
        suite = ET.SubElement(suites, "testsuite", name=titles.get(area, area))
        n_fail = n_skip = 0
        for f in findings:
            case = ET.SubElement(
                suite, "testcase", classname=f"mcpnode.audit.{area}", name=_label(f)
            )
            if f.status is Status.FAIL or (strict and f.status is Status.WARN):
                n_fail += 1
                failure = ET.SubElement(
                    case, "failure", message=printable(f.summary), type=f.status.value
                )
                failure.text = _details(f)
            elif f.status is Status.SKIP:
                n_skip += 1
                ET.SubElement(case, "skipped", message=printable(f.summary))
            else:
                out = ET.SubElement(case, "system-out")
                out.text = f"[{f.status.value}] {printable(f.summary)}\n{_details(f)}".rstrip()
        suite.set("tests", str(len(findings)))
        suite.set("failures", str(n_fail))
        suite.set("errors", "0")
        suite.set("skipped", str(n_skip))
        total += len(findings)
        fails += n_fail
        skips += n_skip
    suites.set("tests", str(total))
    suites.set("failures", str(fails))
    suites.set("errors", str(len(report.problems)))
    suites.set("skipped", str(skips))
    ET.indent(suites)
    body = ET.tostring(suites, encoding="unicode")
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + body + "\n"


def render(
    report: AuditReport,
    fmt: str,
    color: bool = False,
    strict: bool = False,
    verbose: bool = False,
) -> str:
    if fmt == "json":
        return as_json(report, strict)
    if fmt == "junit":
        return as_junit(report, strict)
    return as_text(report, color, strict, verbose)


def write_atomic(path: Path, text: str) -> None:
    """Write `text` to `path` so a reader sees the old file or the new one, never half: a temp
    file in the same directory, fsync, rename. Raises OSError."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent or Path())
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        Path(tmp).chmod(0o644)
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
