"""The audit area `probe.*`, added by `mcpnode audit --probe` (off by default: it uses the GPUs).

It lives here, not in audit/run.py's AREAS, because judging a probe needs the placement plan and
audit sits below placement (the manifest carries the audit). The caller that asked for it passes
`[*AREAS, AREA]` to run_audit.

collect: on the live host, a measurement (live.py); on a recorded root, the run recorded there
(record.py). A probe that cannot run is a fact, not a crash: the check turns it into a FAIL
`probe.run`, since the audit was asked to verify something it could not; on a host without
GPUs there is nothing to verify, and `probe.run` is a SKIP saying so.
"""

from __future__ import annotations

from dataclasses import dataclass

from mcpnode.audit.context import AuditContext
from mcpnode.audit.model import Evidence, Finding, Status
from mcpnode.audit.run import Area
from mcpnode.errors import HostError
from mcpnode.host import Host
from mcpnode.placement.plan import plan_placement
from mcpnode.probe.analysis import ProbeReport, analyse
from mcpnode.probe.model import ProbeDataError, ProbeRun
from mcpnode.probe.record import SNAPSHOT_PROBE, load_recorded


@dataclass(frozen=True)
class ProbeFacts:
    run: ProbeRun | None
    source: str  # "measured now" or the logical path of the recorded run
    unavailable: str | None  # why there is no run


def obtain(host: Host, ctx: AuditContext) -> ProbeFacts:
    """A run for the machine behind `host`: measured when live, recorded otherwise."""
    if host.is_live:
        from mcpnode.errors import ProbeUnavailable
        from mcpnode.probe.live import measure
        from mcpnode.topology.nvml import open_backend

        nvml = open_backend(host)
        try:
            return ProbeFacts(measure(host, ctx.topology, nvml), "measured now", None)
        except ProbeUnavailable as err:
            return ProbeFacts(None, "measured now", str(err))
        finally:
            nvml.close()
    try:
        found = load_recorded(host)
    except (ProbeDataError, HostError) as err:
        return ProbeFacts(None, SNAPSHOT_PROBE, str(err))
    if found is None:
        return ProbeFacts(
            None,
            SNAPSHOT_PROBE,
            "no probe recorded under this root (capture one with `mcpnode snapshot --probe`)",
        )
    return ProbeFacts(found[0], found[1], None)


def report(facts: ProbeFacts, ctx: AuditContext) -> ProbeReport | None:
    if facts.run is None:
        return None
    return analyse(ctx.topology, plan_placement(ctx.topology), facts.run)


def check(facts: ProbeFacts, ctx: AuditContext) -> list[Finding]:
    got = report(facts, ctx)
    if got is None and not ctx.has_gpus:
        return [Finding("probe.run", Status.SKIP, "no NVIDIA GPU here: nothing to probe")]
    if got is None:
        return [
            Finding(
                "probe.run",
                Status.FAIL,
                f"probe not run: {facts.unavailable}",
                (Evidence(facts.source, facts.unavailable or "no run"),),
                "Install the extra (`pip install 'mcpnode[probe]'`) and run on the GPU host as"
                " root, or replay a snapshot taken with `mcpnode snapshot --probe`",
            )
        ]
    run = got.run
    head = Finding(
        "probe.run",
        Status.INFO,
        f"probe of {len(run.gpus)} GPU(s) {run.measured_at} ({facts.source}), CUDA"
        f" {run.cuda_driver_version or '?'}, {run.settings.samples} samples of"
        f" {run.settings.copies_per_sample} x {run.settings.buffer_bytes >> 20} MiB",
        tuple(Evidence(facts.source, p) for p in got.problems),
    )
    return [head, *got.findings]


AREA = Area("probe", "Probe: measured bandwidth", obtain, check)
