"""Text and JSON for the tuning commands. JSON documents carry a schema name and version."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict
from typing import Any

from mcpnode.codec.printable import printable as _p
from mcpnode.state.active import ActiveProfile
from mcpnode.tuning.apply import ApplyResult, RollbackResult
from mcpnode.tuning.explain import Explanation
from mcpnode.tuning.model import PlanItem
from mcpnode.tuning.outcome import Outcome
from mcpnode.tuning.persist import Assignment
from mcpnode.tuning.profile import Profile, ProfileInfo
from mcpnode.tuning.recommend import Recommendation
from mcpnode.tuning.values import describe
from mcpnode.tuning.verify import VerifyReport

APPLY_SCHEMA = "mcpnode.tuning-apply/v1"
VERIFY_SCHEMA = "mcpnode.tuning-verify/v1"
ROLLBACK_SCHEMA = "mcpnode.tuning-rollback/v1"
PROFILES_SCHEMA = "mcpnode.tuning-profiles/v1"
ACTIVE_SCHEMA = "mcpnode.tuning-active/v1"
_CELL = 34


def _cell(value: str | None) -> str:
    text = "-" if value is None else _p(" ".join(value.split())) or "(empty)"
    return text if len(text) <= _CELL else text[: _CELL - 1] + "…"


def table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """Left-aligned columns, two spaces apart; the last column is never padded."""
    body = [[_p(c) for c in r] for r in rows]  # cells may hold a file's text
    widths = [max([len(h), *(len(r[i]) for r in body)]) for i, h in enumerate(headers)]
    lines = []
    for row in [list(headers), *body]:
        cells = [c.ljust(widths[i]) for i, c in enumerate(row[:-1])] + [row[-1]]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines) + "\n"


def plan_table(items: Sequence[PlanItem]) -> str:
    rows = [(i.key, _cell(i.current), _cell(i.desired), i.action, i.reason) for i in items]
    return table(("KEY", "CURRENT", "DESIRED", "ACTION", "REASON"), rows)


def _outcome_lines(title: str, outcomes: Sequence[Outcome]) -> list[str]:
    if not outcomes:
        return []
    lines = [title]
    for o in outcomes:
        detail = f": {_p(o.error)}" if o.error else ""
        lines.append(f"  {o.key}: {_cell(o.old)} -> {_cell(o.new)} [{o.result}]{detail}")
    return lines


def _override_lines(overrides: Sequence[Assignment]) -> list[str]:
    winners = [a for a in overrides if a.wins and not a.same_value]
    others = [a for a in overrides if not (a.wins and not a.same_value)]
    lines = []
    if winners:
        lines.append("WARNING: these assignments override mcpnode's at boot (applied later):")
        lines += [
            f"  {_p(a.file)}:{a.line}: {_p(a.written)} = {_p(a.value)} ({_p(a.note)})"
            for a in winners
        ]
    if others:
        lines.append("other assignments of the same keys (no effect on the outcome):")
        for a in others:
            why = "same value" if a.same_value else "overridden by 90-mcpnode.conf"
            lines.append(
                f"  {_p(a.file)}:{a.line}: {_p(a.written)} = {_p(a.value)} ({why}; {_p(a.note)})"
            )
    return lines


def apply_text(result: ApplyResult) -> str:
    counts = result.plan.counts()
    head = "plan" if result.dry_run else "applied"
    summary = ", ".join(f"{n} {a}" for a, n in counts.items() if n)
    lines = [f"{head}: profile {_p(result.profile)} ({summary or 'empty'})"]
    lines += _outcome_lines("recovered an interrupted run first:", result.recovered)
    out = "\n".join(lines) + "\n" + plan_table(result.plan.items)
    extra: list[str] = []
    if result.restores:
        extra.append("journaled keys this profile no longer sets:")
        extra.append(plan_table(result.restores).rstrip("\n"))
    extra += _outcome_lines("modules:", result.loads)
    if not result.dry_run:
        extra.append(f"{len(result.writes)} write(s); journal: {_p(result.journal)}")
    if result.persist is not None:
        verb = "wrote" if result.persist.written else "would write"
        extra.append(f"{verb} {_p(result.persist.path)}:")
        extra += ["  " + line for line in result.persist.content.splitlines()]
        extra += _override_lines(result.persist.overrides)
    extra += [f"note: {_p(n)}" for n in result.notes]
    return out + ("\n".join(extra) + "\n" if extra else "")


def _document(schema: str, **fields: Any) -> str:
    """A JSON document of these commands: its schema first, then `fields` in order."""
    return json.dumps({"schema": schema, **fields}, indent=2)


def _item_json(i: PlanItem) -> dict[str, Any]:
    return {
        "key": i.key,
        "path": i.path or None,
        "rule": i.rule,
        "current": i.current,
        "desired": i.desired,
        "action": i.action,
        "reason": i.reason,
        "source": i.source or None,
    }


def _outcome_json(o: Outcome) -> dict[str, Any]:
    return {
        "key": o.key,
        "path": o.path or None,
        "old": o.old,
        "new": o.new,
        "result": o.result,
        "error": o.error,
    }


def apply_json(result: ApplyResult) -> str:
    persist = None
    if result.persist is not None:
        persist = {
            "path": result.persist.path,
            "written": result.persist.written,
            "content": result.persist.content,
            "overrides": [asdict(a) for a in result.persist.overrides],
        }
    return _document(
        APPLY_SCHEMA,
        profile=result.profile,
        dry_run=result.dry_run,
        counts=result.plan.counts(),
        items=[_item_json(i) for i in result.plan.items],
        restores=[_item_json(i) for i in result.restores],
        recovered=[_outcome_json(o) for o in result.recovered],
        loads=[_outcome_json(o) for o in result.loads],
        writes=[_outcome_json(o) for o in result.writes],
        managed=[_outcome_json(o) for o in result.managed],
        persist=persist,
        journal=result.journal,
        notes=list(result.notes),
    )


def verify_text(report: VerifyReport, active: ActiveProfile | None = None) -> str:
    n = len(report.plan.items)
    lines = [] if active is None else [f"checking {_active_line(active)}"]
    unknown = report.unknown_reason
    if report.ok and unknown is not None:
        lines.append(
            f"verify: profile {_p(report.profile)}: UNKNOWN, no drift seen but {_p(unknown)}"
        )
    elif report.ok:
        lines.append(f"verify: profile {_p(report.profile)}: no drift ({n} items)")
    else:
        lines.append(
            f"verify: profile {_p(report.profile)}: {len(report.drift)} of {n} items drifted"
        )
        rows = [(d.key, _cell(d.expected), _cell(d.actual), d.reason) for d in report.drift]
        lines.append(table(("KEY", "EXPECTED", "ACTUAL", "REASON"), rows).rstrip("\n"))
    for item in report.unsupported:
        lines.append(f"not present: {item.key} ({_p(item.reason)})")
    for item in report.unverified:
        lines.append(f"not verified: {item.key} ({item.action}: {_p(item.reason)})")
    return "\n".join(lines) + "\n"


def verify_json(report: VerifyReport, active: ActiveProfile | None = None) -> str:
    return _document(
        VERIFY_SCHEMA,
        profile=report.profile,
        active=None if active is None else asdict(active),
        ok=report.ok,
        compliant=report.compliant,
        unknown_reason=report.unknown_reason,
        drift=[asdict(d) for d in report.drift],
        unsupported=[_item_json(i) for i in report.unsupported],
        unverified=[_item_json(i) for i in report.unverified],
        items=[_item_json(i) for i in report.plan.items],
    )


def _active_line(active: ActiveProfile) -> str:
    if active.problem is not None:
        return f"active profile unknown: {_p(active.problem)}"
    if active.name is None:
        return f"no active profile: not tuned by mcpnode ({_p(active.detail)})"
    state = "applied" if active.applied else "not applied"
    return f"profile {_p(active.name)} ({_p(active.source)}, {state}: {_p(active.detail)})"


def verify_none_text(active: ActiveProfile) -> str:
    """verify with no --profile on a host where no profile is active (or it is unknown)."""
    if active.problem is not None:
        return f"verify: UNKNOWN, the active profile cannot be told: {_p(active.problem)}\n"
    return (
        f"verify: UNKNOWN, no active profile: not tuned by mcpnode ({_p(active.detail)}).\n"
        "`mcpnode apply --profile NAME` tunes this host; `mcpnode verify --profile NAME` checks "
        "it against a profile without applying it.\n"
    )


def verify_none_json(active: ActiveProfile) -> str:
    """verify --format json with no --profile where no profile is active (or it is unknown):
    the verify document, nothing checked, `unknown_reason` saying why (exit 3, as in text)."""
    if active.problem is not None:
        reason = f"the active profile cannot be told: {active.problem}"
    else:
        reason = f"no active profile: not tuned by mcpnode ({active.detail})"
    return _document(
        VERIFY_SCHEMA,
        profile=None,
        active=asdict(active),
        ok=False,
        compliant=None,
        unknown_reason=reason,
        drift=[],
        unsupported=[],
        unverified=[],
        items=[],
    )


def active_text(active: ActiveProfile) -> str:
    """`mcpnode profiles active`: the name and where the answer came from."""
    if active.problem is not None:
        return f"unknown\nsource: journal\nproblem: {_p(active.problem)}\n"
    if active.name is None:
        return (
            "none\nsource: none (not tuned by mcpnode: "
            f"{_p(active.detail)}; `mcpnode apply --profile NAME` tunes it)\n"
        )
    lines = [active.name, f"source: {_p(active.source)} ({_p(active.detail)})"]
    lines.append(f"applied: {'yes' if active.applied else 'no (configured, not applied)'}")
    if active.by is not None:
        lines.append(f"by: {_p(active.by)}" + (f" at {_p(active.at)}" if active.at else ""))
    if active.hash is not None:
        lines.append(f"content: {_p(active.hash)}")
    return "\n".join(lines) + "\n"


def active_json(active: ActiveProfile) -> str:
    return _document(ACTIVE_SCHEMA, **asdict(active))


def rollback_text(result: RollbackResult) -> str:
    if result.profile is None:
        return f"nothing to roll back: no journal at {_p(result.journal)}\n"
    lines = [f"rolled back profile {_p(result.profile)} (journal {_p(result.journal)} removed)"]
    lines += _outcome_lines("restored, in reverse order:", result.outcomes)
    return "\n".join(lines) + "\n"


def rollback_json(result: RollbackResult) -> str:
    return _document(
        ROLLBACK_SCHEMA,
        profile=result.profile,
        journal=result.journal,
        outcomes=[_outcome_json(o) for o in result.outcomes],
    )


def profiles_text(rows: Sequence[ProfileInfo]) -> str:
    if not rows:
        return "no profiles found\n"
    body = []
    for r in rows:
        origin = r.origin + (" (overrides system)" if r.shadows else "")
        about = f"INVALID: {r.error}" if r.error else r.summary
        inc = ", ".join(r.includes) or "-"
        body.append((r.name, origin, inc, about))
    return table(("NAME", "ORIGIN", "INCLUDES", "SUMMARY"), body)


def profiles_json(rows: Sequence[ProfileInfo]) -> str:
    return _document(PROFILES_SCHEMA, profiles=[asdict(r) for r in rows])


def profile_text(profile: Profile) -> str:
    lines = [
        f"profile {profile.name}: {_p(profile.summary)}",
        f"file: {_p(profile.file)}",
        f"merged: {' -> '.join(profile.chain)}",
    ]
    if profile.modules:
        lines.append(f"modules: {', '.join(profile.modules)}")
    lines.append("")
    for s in profile.settings:
        origin = "" if s.source == profile.file else f"    (from {_p(s.source)})"
        lines.append(f"{s.key} = {describe(s.desired)}{origin}")
        lines += [f"    # {_p(c)}" for c in s.comment.splitlines() if c]
    return "\n".join(lines) + "\n"


def profile_json(profile: Profile) -> str:
    return _document(
        PROFILES_SCHEMA,
        name=profile.name,
        summary=profile.summary,
        file=profile.file,
        chain=list(profile.chain),
        modules=list(profile.modules),
        settings=[
            {"key": s.key, "rule": describe(s.desired), "source": s.source, "comment": s.comment}
            for s in profile.settings
        ],
    )


def explain_text(e: Explanation) -> str:
    lines = [e.key + (f"  ({_p(e.path)})" if e.path else "")]
    if e.current is not None:
        lines.append(f"  current: {_p(' '.join(e.current.split()))}")
    elif e.current_note:
        lines.append(f"  current: {_p(e.current_note)}")
    if e.default:
        lines.append(f"  kernel default: {_p(e.default)}")
    if e.note:
        lines.append(f"  why: {_p(e.note)}")
    if e.set_by:
        for s in e.set_by:
            lines.append(f"  {s.rule}  in {s.file}, used by: {', '.join(s.profiles)}")
            lines += [f"      # {_p(c)}" for c in s.comment.splitlines() if c]
    else:
        lines.append("  set by no profile")
    if e.netns:
        lines.append(f"  network namespaces: {e.netns}")
    lines.append(f"  privilege: {e.privilege}")
    if e.sensitive:
        lines.append(
            f"  SENSITIVE: {e.sensitive}. A profile may set it only with "
            f'`allow_sensitive = ["{e.key}"]` in its [profile] table.'
        )
    return "\n".join(lines) + "\n"


def explain_json(e: Explanation) -> str:
    return _document(PROFILES_SCHEMA, explain=asdict(e))


RECOMMEND_SCHEMA = "mcpnode.tuning-recommend/v1"


def recommend_text(r: Recommendation) -> str:
    lines = [f"recommended profile: {_p(r.profile)}"]
    lines += [f"  - {_p(reason)}" for reason in r.reasons]
    lines.append(f"apply it with: mcpnode apply --profile {_p(r.profile)}")
    return "\n".join(lines) + "\n"


def recommend_json(r: Recommendation) -> str:
    return _document(
        RECOMMEND_SCHEMA, profile=r.profile, reasons=list(r.reasons), facts=asdict(r.facts)
    )
