"""One call from a Host to a manifest: discover once, plan, verify tuning, audit, assemble.

The CLI's `manifest publish|show` call `make_manifest`, the agent `build_all` (which keeps the
discovery, placement and audit the manifest was made from, for its exporters); everything they
read goes through the Host they are given.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypedDict

from mcpnode.audit.container.toolkit import toolkit_version
from mcpnode.audit.expectation import Expectation
from mcpnode.audit.model import AuditReport
from mcpnode.audit.run import audit_context, audit_report
from mcpnode.audit.xid import XidEvent
from mcpnode.errors import HostError, McpnodeError
from mcpnode.host import Host
from mcpnode.placement.manifest import build_manifest
from mcpnode.placement.plan import HOUSEKEEPING_DEFAULT, Placement, plan_placement
from mcpnode.placement.source import cpu_partition
from mcpnode.topology.discover import discover_host
from mcpnode.topology.model import Topology
from mcpnode.tuning.journal import JournalStore
from mcpnode.tuning.profile import load_profile
from mcpnode.tuning.verify import VerifyReport, verify

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing.Unpack from Python 3.11; mypy reads both

MACHINE_ID_PATH = "/etc/machine-id"

# What gives the manifest its `probe` section: mcpnode.probe.section.manifest_section, passed in
# by the commands that publish (the probe package sits above this one).
ProbeSection = Callable[[Host, Topology, Placement], Mapping[str, Any] | None]


@dataclass(frozen=True)
class Built:
    """One pass over the machine: the manifest and what it was made of, so the agent can
    render its exporters from the same discovery and audit instead of redoing both."""

    manifest: dict[str, Any]
    topology: Topology
    placement: Placement
    audit: AuditReport


class ManifestOptions(TypedDict, total=False):
    """What a caller may ask of a manifest (build_all's keywords, which say what each is)."""

    now: datetime | None
    housekeeping: str
    profiles_dir: Path | None
    topology: Topology | None
    probe: ProbeSection | None


def make_manifest(host: Host, **options: Unpack[ManifestOptions]) -> dict[str, Any]:
    """The manifest of the machine behind `host`.

    `topology` reuses a discovery already made through `host` (the agent keeps one between
    device events). Raises RootError / HostError when discovery cannot run, UsageError for a
    bad `housekeeping`; a profile that cannot be loaded is recorded in the tuning section, and
    a failing audit area in the audit's problems, never raised. `probe` reads the last probe
    run kept under `host` into the manifest's `probe` section."""
    return build_all(host, **options).manifest


_P = ParamSpec("_P")


def _one_pass(fn: Callable[Concatenate[Host, _P], Built]) -> Callable[Concatenate[Host, _P], Built]:
    """Run `fn` in one `host.oneshot()` block: the audit's collectors and the tuning verify read
    thousands of files below the same few directories (AER counters and IB ports of every
    device), and resolving each path component by component again for every read cost more
    than the rest of the build. Nothing is cached past the pass, so the agent's next build sees
    devices that came or went."""

    @functools.wraps(fn)
    def run(host: Host, /, *args: _P.args, **kwargs: _P.kwargs) -> Built:
        with host.oneshot():
            return fn(host, *args, **kwargs)

    return run


@_one_pass
def build_all(
    host: Host,
    *,
    now: datetime | None = None,
    housekeeping: str = HOUSEKEEPING_DEFAULT,
    profiles_dir: Path | None = None,
    topology: Topology | None = None,
    probe: ProbeSection | None = None,
    observed_xids: tuple[XidEvent, ...] = (),
    expect: Expectation | None = None,
    expect_source: str | None = None,
    keepalive: Callable[[], None] | None = None,
) -> Built:
    """make_manifest, keeping the topology, placement and audit report it was built from.

    `observed_xids` and `expect` reach the audit's context (the agent's NVML XID events and its
    [expect] table); `keepalive` is called between the audit's long steps (the agent's
    watchdog ping). One oneshot() pass (_one_pass)."""
    topo = topology if topology is not None else discover_host(host)
    placement = plan_placement(topo, housekeeping)
    # The kubelet area compares the kubelet's reserved CPUs with the housekeeping this manifest
    # publishes, not with a previous manifest's.
    partition = cpu_partition(
        placement, {n.id: n.cpus for n in topo.numa_nodes}, "this manifest's placement"
    )
    ctx = replace(
        audit_context(
            host,
            topo,
            None,
            None if profiles_dir is None else str(profiles_dir),
            housekeeping=placement.housekeeping,
            observed_xids=observed_xids,
        ),
        expect=expect,
        expect_source=expect_source,
        partition=partition,
        keepalive=keepalive,
    )
    profile = ctx.profile
    tuning: VerifyReport | str | None
    if profile is None:
        # No active profile (or the journal is unusable): nothing to be compliant with.
        tuning = ctx.active.problem if ctx.active is not None else None
    else:
        try:
            managed = JournalStore(host).managed_irqs()
            tuning = verify(host, load_profile(profile, host, profiles_dir), partition, managed)
        except McpnodeError as err:
            tuning = f"{type(err).__name__}: {err}"
    when = now or datetime.now(timezone.utc)
    audit = audit_report(host, ctx, when)
    manifest = build_manifest(
        topo,
        placement,
        tuning,
        audit,
        when,
        machine_id=read_machine_id(host),
        driver=ctx.driver_version,
        container_toolkit=toolkit_version(audit.findings),
        housekeeping=housekeeping,
        tuning_source=ctx.active.source if ctx.active is not None else None,
        probe=probe(host, topo, placement) if probe is not None else None,
    )
    return Built(manifest, topo, placement, audit)


def read_machine_id(host: Host) -> str | None:
    """/etc/machine-id (machine-id(5): 32 lowercase hex digits), None when absent, empty
    (first boot, `systemd-firstboot` not run yet) or unreadable."""
    try:
        text = host.read_optional(MACHINE_ID_PATH)
    except HostError:
        return None
    value = (text or "").strip()
    return value or None
