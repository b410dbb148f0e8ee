"""The one core function `mcpnode probe` calls: discover, get a run (measured on the live host,
recorded under any other root), analyse it against the placement.
"""

from __future__ import annotations

from dataclasses import dataclass

from mcpnode.errors import HostError, ProbeUnavailable
from mcpnode.host import Host
from mcpnode.placement.plan import HOUSEKEEPING_DEFAULT, plan_placement
from mcpnode.probe.analysis import ProbeReport, analyse
from mcpnode.probe.live import DEFAULT_SETTINGS, measure
from mcpnode.probe.model import Settings
from mcpnode.probe.record import load_recorded, save
from mcpnode.topology.discover import discover_host
from mcpnode.topology.nvml import open_backend


@dataclass(frozen=True)
class ProbeOutcome:
    report: ProbeReport
    source: str  # "measured now" or the logical path of the recorded run
    saved: str | None  # where the live run was kept
    save_error: str | None  # why it could not be kept


def run_probe(
    host: Host,
    *,
    settings: Settings = DEFAULT_SETTINGS,
    keep: bool = True,
    housekeeping: str = HOUSEKEEPING_DEFAULT,
) -> ProbeOutcome:
    """Probe the machine behind `host`. Live: measure, then (with `keep`) save the run to
    /var/lib/mcpnode/probe.json for the manifest; a save that fails is reported, not raised.
    Recorded root: replay the run recorded there.

    Raises ProbeUnavailable (no bindings, no driver, no GPU, nothing recorded), ProbeDataError
    (a recorded run that is unusable), RootError / HostError from discovery."""
    topo = discover_host(host)
    placement = plan_placement(topo, housekeeping)
    saved = save_error = None
    if host.is_live:
        nvml = open_backend(host)
        try:
            run = measure(host, topo, nvml, settings)
        finally:
            nvml.close()
        source = "measured now"
        if keep:
            try:
                saved = save(host, run)
            except HostError as err:
                save_error = str(err)
    else:
        found = load_recorded(host)
        if found is None:
            raise ProbeUnavailable(
                f"{host.source}: no probe recorded here (mcpnode-probe.json or"
                " /var/lib/mcpnode/probe.json); capture one with `mcpnode snapshot --probe`"
            )
        run, source = found
    return ProbeOutcome(analyse(topo, placement, run), source, saved, save_error)
