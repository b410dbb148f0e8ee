"""What the agent publishes about the node: discovery, then the manifest and the configured
exporters from one build (placement/build.py); the NFD feature file's refresh before its
expiry; and rediscovery after a device event (debounced).

A file is written only when its content changed: the manifest when its content hash differs
from the last published one, an exporter when its text does, so readers watching mtimes stay
quiet. Logged as `manifest.published`, `export.written`, `export.removed`, `rediscover`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING

from mcpnode.agent.config import AgentConfig
from mcpnode.agent.part import AgentPart
from mcpnode.agent.sources import DeviceEvent
from mcpnode.audit.xid import XidEvent
from mcpnode.errors import HostError, McpnodeError
from mcpnode.placement.build import Built, build_all
from mcpnode.placement.exporters import nfd
from mcpnode.placement.exporters.inputs import summarize
from mcpnode.placement.exporters.write import Options, render, target_path
from mcpnode.placement.manifest import content_hash, publish
from mcpnode.placement.source import Stamp, publication, read_stamp
from mcpnode.probe.section import manifest_section
from mcpnode.topology.discover import discover
from mcpnode.topology.model import Topology
from mcpnode.topology.nvml import GpuBackend, open_backend

if TYPE_CHECKING:
    from mcpnode.agent.metrics import EventSource

# Exporter files that describe the agent's own, live judgement of the node (labels a scheduler
# selects on, series an alert fires on): removed when the agent stops, so a node nobody tunes
# any more does not go on advertising `tuning-compliant=true`. The others describe hardware and
# must survive a restart (slurmd reads gres lines at its own start; facts are read by the next
# Ansible run).
REMOVED_AT_STOP = ("nfd", "prom")
# The NFD feature file is rewritten every third of its expiry: one missed rewrite (a loop
# blocked by NVML for tens of seconds) still leaves a valid file behind.
NFD_REFRESH_FRACTION = 1 / 3


@dataclass(eq=False)
class Publisher(AgentPart):
    """Discovers the host and publishes what the agent knows of it. `config` is the agent's
    configuration (replaced at reload); `observed_xids` answers the XIDs only NVML reported
    (agent/health.py), `rediscovered` is told of a new backend and topology before the
    republish. Call from the loop thread only."""

    observed_xids: Callable[[], tuple[XidEvent, ...]]
    rediscovered: Callable[[GpuBackend | None, Topology], None]
    # The watchdog ping a long republish calls between its audit's steps (Notifier.keepalive)
    keepalive: Callable[[], None] | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        self.backend: GpuBackend | None = None
        self.topology: Topology | None = None
        self.built: Built | None = None
        # The freshness facts read before the discovery the manifest is built from.
        self._stamp = Stamp(None, None, None)
        self._manifest_hash: str | None = None
        # kind -> (logical path, text as rendered, without the nfd expiry): what was written.
        self.exports: dict[str, tuple[str, str]] = {}
        self._rediscover_reason: list[str] = []

    def discover(self) -> None:
        """The first discovery, at start. Raises McpnodeError."""
        self._stamp = read_stamp(self.host)
        self.backend = open_backend(self.host)
        self.topology = discover(self.host, self.backend)

    # -- publishing -------------------------------------------------------------------------------

    def publish(self, reason: str) -> None:
        """Build the manifest and the configured exporters from one discovery and one audit;
        write each file only when its content changed (readers watching mtimes stay quiet)."""
        assert self.topology is not None
        try:
            built = build_all(
                self.host,
                housekeeping=self.config.housekeeping,
                profiles_dir=self.ctx.profiles_dir,
                topology=self.topology,
                probe=manifest_section,
                observed_xids=self.observed_xids(),
                expect=self.config.expect,
                expect_source=self.config.file if self.config.expect else None,
                keepalive=self.keepalive,
            )
        except McpnodeError as err:
            self.log.error("manifest.build-failed", reason=reason, error=str(err))
            self.metrics.record_publish("failed")
            return
        self.built = built
        failed = False
        summary = summarize(built.audit)
        self.metrics.set_inventory(len(built.topology.gpus), len(built.topology.nics))
        self.metrics.set_audit_findings(built.audit.findings)
        self.metrics.set_gpu_state(built.topology.gpus, summary.unhealthy_gpus)
        digest = content_hash(built.manifest)
        if digest != self._manifest_hash:
            try:
                path = publish(self.host, built.manifest, publication(self._stamp, os.getpid()))
            except HostError as err:
                self.log.error("manifest.publish-failed", reason=reason, error=str(err))
                failed = True
            else:
                self._manifest_hash = digest
                self.log.info(
                    "manifest.published",
                    reason=reason,
                    path=path,
                    hash=digest,
                    gpus=len(built.topology.gpus),
                    nics=len(built.topology.nics),
                )
        options = Options(slurm_type=self.config.slurm_type)
        for kind in self.config.export_kinds:
            path = target_path(kind, self.config.export_dir(kind))
            try:
                text = render(kind, built.topology, built.placement, summary, options)
                if self.exports.get(kind) == (path, text):
                    continue
                self._write_export(kind, path, text)
            except McpnodeError as err:
                self.log.error("export.failed", kind=kind, path=path, error=str(err))
                failed = True
                continue
            old = self.exports.get(kind)
            self.exports[kind] = (path, text)
            self.log.info("export.written", kind=kind, path=path, reason=reason)
            if old is not None and old[0] != path:
                self._remove_export(kind, old[0], "moved")
        self.metrics.record_publish("failed" if failed else "ok")

    def _write_export(self, kind: str, path: str, text: str) -> None:
        """Write one exporter file; the nfd file with its expiry, and the refresh scheduled.
        Raises McpnodeError (HostError, NfdLabelError)."""
        expires: datetime | None = None
        if kind == "nfd" and self.config.nfd_expiry:
            expires = datetime.now(timezone.utc) + timedelta(seconds=self.config.nfd_expiry)
            text = nfd.with_expiry(text, expires)
            self.timers.schedule(
                "nfd-refresh", self.config.nfd_expiry * NFD_REFRESH_FRACTION, self._refresh_nfd
            )
        self.host.write_file_atomic(path, text.encode(), mode=0o644)
        if kind == "nfd":
            # Only once written: an alert compares the expiry with now (deploy/prometheus/).
            self.metrics.set_nfd_expiry(time.time(), expires.timestamp() if expires else None)

    def _refresh_nfd(self) -> None:
        """Rewrite the feature file with a new expiry, the labels unchanged (`_write_export`
        schedules the next refresh). A failed write is logged and retried at the next one: the
        labels then expire, which is what they should do when the agent cannot keep them."""
        self.timers.fired("nfd-refresh")
        written = self.exports.get("nfd")
        if written is None or "nfd" not in self.config.export_kinds:
            return
        path, text = written
        try:
            self._write_export("nfd", path, text)
        except McpnodeError as err:
            self.log.error("export.failed", kind="nfd", path=path, error=str(err))
            self.timers.schedule(
                "nfd-refresh", self.config.nfd_expiry * NFD_REFRESH_FRACTION, self._refresh_nfd
            )
            return
        self.log.debug("export.refreshed", kind="nfd", path=path)

    def _remove_export(self, kind: str, path: str, why: str) -> None:
        """Remove an exporter file this agent wrote (stop, a kind turned off, a new directory);
        only the kinds in REMOVED_AT_STOP. Never raises: a file that cannot be removed is
        logged, and the nfd one still expires."""
        if kind not in REMOVED_AT_STOP:
            return
        try:
            self.host.remove(path)
        except McpnodeError as err:
            self.log.error("export.remove-failed", kind=kind, path=path, error=str(err))
            return
        self.log.info("export.removed", kind=kind, path=path, reason=why)

    def reconfigure(self, old: AgentConfig) -> None:
        """A reload from `old` to `config`: remove the files of exporters turned off, stop
        refreshing an nfd file without expiry, rewrite one whose expiry changed at the next
        publish."""
        config = self.config
        for kind, (path, _text) in list(self.exports.items()):
            if kind not in config.export_kinds:
                del self.exports[kind]
                self._remove_export(kind, path, "disabled")
        if "nfd" not in config.export_kinds or not config.nfd_expiry:
            self.timers.cancel("nfd-refresh")
            if "nfd" not in config.export_kinds:
                self.metrics.set_nfd_expiry(time.time(), None)
        if config.nfd_expiry != old.nfd_expiry and "nfd" in self.exports:
            # Same path, same labels, another expiry (or none): rewrite it at the publish below.
            self.exports["nfd"] = (self.exports["nfd"][0], "")

    def remove_exports(self) -> None:
        """At stop: the files that vouch for the node in the present tense go."""
        for kind, (path, _text) in self.exports.items():
            self._remove_export(kind, path, "stopped")
        self.exports = {}

    def close_backend(self) -> None:
        if self.backend is not None:
            self.backend.close()
            self.backend = None

    # -- device events ----------------------------------------------------------------------------

    def on_device_event(self, event: DeviceEvent) -> None:
        source: EventSource = "inject"
        if event.source in ("udev", "netlink"):
            source = "udev" if event.source == "udev" else "netlink"
        self.metrics.count_event(source)
        relevant = self._relevant(event)
        log = self.log.info if relevant else self.log.debug
        log(
            "device.event",
            source=event.source,
            action=event.action,
            subsystem=event.subsystem,
            device=event.name,
            detail=event.detail,
        )
        if relevant:
            self._rediscover_reason.append(f"{event.source}:{event.action}:{event.name}")
            self.timers.schedule("rediscover", self.config.debounce, self._rediscover)

    def _relevant(self, event: DeviceEvent) -> bool:
        """Whether an event can change the manifest: any PCI or RDMA device, and network
        interfaces of the NICs discovered (a Kubernetes node churns veths all day)."""
        if event.action == "overrun" or event.subsystem in ("pci", "infiniband"):
            return True
        if "/virtual/" in event.detail:
            return False
        names = {d.name for n in (self.topology.nics if self.topology else ()) for d in n.netdevs}
        return event.source != "netlink" or event.name in names

    def _rediscover(self) -> None:
        reasons, self._rediscover_reason = self._rediscover_reason, []
        start = time.perf_counter()
        before = self.topology
        # A hot-added or removed GPU is only seen by NVML after a fresh init.
        if self.backend is not None:
            self.backend.close()
        try:
            stamp = read_stamp(self.host)  # before discovery (placement/source.py)
            self.backend = open_backend(self.host)
            self.topology = discover(self.host, self.backend)
        except McpnodeError as err:
            self.log.error("rediscover.failed", error=str(err), events=reasons)
            return
        self._stamp = stamp
        self.rediscovered(self.backend, self.topology)
        self.metrics.count_rediscovery()
        old_gpus = {str(g.address) for g in (before.gpus if before else ())}
        new_gpus = {str(g.address) for g in self.topology.gpus}
        old_nics = {str(n.address) for n in (before.nics if before else ())}
        new_nics = {str(n.address) for n in self.topology.nics}
        self.publish("rediscover")
        self.log.info(
            "rediscover",
            events=len(reasons),
            first=reasons[0] if reasons else None,
            gpus_added=sorted(new_gpus - old_gpus),
            gpus_removed=sorted(old_gpus - new_gpus),
            nics_added=sorted(new_nics - old_nics),
            nics_removed=sorted(old_nics - new_nics),
            ms=round((time.perf_counter() - start) * 1000, 1),
        )
        self.ctx.status()
