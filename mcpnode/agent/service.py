"""`mcpnode agent`: the long-running service. One thread, one loop (loop.py).

Lifecycle (docs/service.md and docs/architecture.md say the same for operators):
  start   config -> profile -> recover an interrupted apply -> discover -> apply the profile
          -> state file -> publish manifest + exporters -> metrics -> event sources -> READY=1
  loop    drift timer (verify; remediate or report; FlapGuard), process-scan timer (auto-pin),
          watchdog timer, udev/netlink/injected device events (debounced rediscovery and
          republish), signals
  SIGHUP  RELOADING=1 -> new config and profile (a bad one is rejected, the old kept) ->
          apply the difference -> republish -> READY=1. SIGHUPs are coalesced: one reload at
          once, the next no sooner than RELOAD_MIN_INTERVAL_S after it, however many arrive;
          reading the config and profile is bounded by RELOAD_TIMEOUT_S, so a bomb is rejected
          and never stalls the loop (and its watchdog) for longer.
  SIGTERM STOPPING=1 -> rollback when configured -> exit 0

The state lock (tuning/lock.py) is held only while the agent writes: at start (recover, apply,
state file), for each remediation, at reload and at stop; so an operator's `mcpnode apply` or
`rollback` runs between the agent's cycles. The agent notices when the journal changed under it
(its identity differs from the one the agent last wrote): an operator's apply is *adopted* (the
agent enforces that profile from then on, logged as `journal.adopted`), an operator's rollback
*pauses* enforcement (`journal.rolled-back`) until `systemctl reload mcpnode`. It never fights
the operator. A remediation that finds the lock held is retried at the next interval.

Exit codes (mcpnode/exitcodes.py): 0 clean stop; 78 (EX_CONFIG) a configuration or profile
that cannot be used at start, so the node is never left running untuned on defaults nobody
chose (tuned#851); 1 any other failure at start (unreadable journal, unusable root) or an
incomplete rollback at stop.

Every effect is logged as one structlog event with fields: each write (tuning/apply.py),
`drift`, `drift.remediated`, `drift.contested`, `pin`, `rediscover`, `manifest.published`,
`config.reloaded` / `config.rejected`, `journal.adopted` / `journal.rolled-back`,
`lock.busy`; hardware health (agent/health.py): `gpu.xid`, `gpu.sxid`, `ib.link-flap`, each
followed by a republish.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import structlog

from mcpnode import __version__
from mcpnode.agent.config import AgentConfig, ConfigError, load_config
from mcpnode.agent.drift import FlapGuard
from mcpnode.agent.health import AgentHealth
from mcpnode.agent.loop import Loop, Timer
from mcpnode.agent.notify import Notifier
from mcpnode.agent.sources import UDEV_CONTROL, DeviceEvent
from mcpnode.errors import HostError, LockBusy, McpnodeError
from mcpnode.exitcodes import EXIT_AGENT_FAILED, EXIT_CONFIG, EXIT_OK
from mcpnode.host import FileStat, Host
from mcpnode.placement.build import Built, build_all
from mcpnode.placement.exporters import nfd
from mcpnode.placement.exporters.inputs import summarize
from mcpnode.placement.exporters.write import Options, render, target_path
from mcpnode.placement.manifest import content_hash, publish
from mcpnode.placement.plan import plan_placement
from mcpnode.placement.source import Stamp, cpu_partition, publication, read_stamp
from mcpnode.probe.section import manifest_section
from mcpnode.topology.discover import discover
from mcpnode.topology.model import Topology
from mcpnode.topology.nvml import GpuBackend, open_backend
from mcpnode.tuning.agentstate import AGENT_STATE_PATH, AgentState, write_agent_state
from mcpnode.tuning.apply import ApplyResult, apply_profile, recover, rollback
from mcpnode.tuning.errors import ApplyFailed
from mcpnode.tuning.journal import Journal, JournalStore
from mcpnode.tuning.partition import CpuPartition, needs_partition
from mcpnode.tuning.paths import CPU_DMA_LATENCY, FORCE_LATENCY_KEY
from mcpnode.tuning.profile import Profile, load_profile
from mcpnode.tuning.values import Exact
from mcpnode.tuning.verify import VerifyReport, verify

# How long the agent waits for an operator's run to release the state lock. At start and stop
# it can wait (TimeoutStartSec/TimeoutStopSec are minutes); inside the loop it must not block
# (the watchdog, metrics and device events share the thread): a remediation takes the lock
# only if it is free now and otherwise tries again at the next drift interval.
START_LOCK_WAIT_S = 30.0
STOP_LOCK_WAIT_S = 30.0
LOOP_LOCK_WAIT_S = 0.0
RELOAD_LOCK_WAIT_S = 1.0
# SIGHUP handling: a storm of signals gives one reload now and at most one more per interval.
RELOAD_MIN_INTERVAL_S = 1.0
RELOAD_TIMEOUT_S = 5.0
# Exporter files that describe the agent's own, live judgement of the node (labels a scheduler
# selects on, series an alert fires on): removed when the agent stops, so a node nobody tunes
# any more does not go on advertising `tuning-compliant=true`. The others describe hardware and
# must survive a restart (slurmd reads gres lines at its own start; facts are read by the next
# Ansible run).
REMOVED_AT_STOP = ("nfd", "prom")
# The NFD feature file is rewritten every third of its expiry: one missed rewrite (a loop
# blocked by NVML for tens of seconds) still leaves a valid file behind.
NFD_REFRESH_FRACTION = 1 / 3


class ReloadTimeout(McpnodeError):
    """Reading the configuration and profile took longer than RELOAD_TIMEOUT_S."""


class StartupFailed(McpnodeError):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class Agent:
    def __init__(
        self,
        host: Host,
        live: Host,
        config_path: str,
        *,
        profiles_dir: Path | None = None,
        notifier: Notifier | None = None,
        inject_fd: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        log: Any | None = None,
    ) -> None:
        self.host = host
        self.live = live
        self.config_path = config_path
        self.profiles_dir = profiles_dir
        self.notifier = notifier if notifier is not None else Notifier()
        self.inject_fd = inject_fd
        self.clock = clock
        self.log = log if log is not None else structlog.get_logger("mcpnode.agent")
        self.store = JournalStore(host, command="mcpnode agent", wait_s=LOOP_LOCK_WAIT_S)
        self.config = AgentConfig()
        self.profile: Profile | None = None
        self.loop = Loop(self.log, clock, on_latency=self._on_latency)
        self.metrics: Any = None
        self.server: Any = None
        self.pinner: Any = None
        self.backend: GpuBackend | None = None
        self.topology: Topology | None = None
        self.built: Built | None = None
        self.guard = FlapGuard(3, 600.0)
        self.sources: list[Any] = []
        self.started_at = _now()
        self.exit_code = EXIT_OK
        self._manifest_hash: str | None = None
        self._latency: tuple[int | None, int | None] = (None, None)  # PM QoS (µs, fd) held
        # The freshness facts read before the discovery the manifest is built from.
        self._stamp = Stamp(None, None, None)
        # kind -> (logical path, text as rendered, without the nfd expiry): what was written.
        self._exports: dict[str, tuple[str, str]] = {}
        self._drifted: frozenset[str] = frozenset()
        self._last_apply = "none"
        self._apply_error: str | None = None  # the last apply failure, logged once
        self._unappliable: dict[str, str] = {}  # key -> why the kernel refused it
        self._pinned = 0
        self._timers: dict[str, Timer] = {}
        self._rediscover_reason: list[str] = []
        # The journal as this agent last left it (identity after its own save): anything else
        # there was written by another run.
        self._journal_seen: FileStat | None = None
        self._profile_source = "config"  # or "adopted": applied by an operator, taken over
        self._paused: str | None = None  # why enforcement stopped (an operator's rollback)
        self._apply_pending = False  # an apply that could not get the lock: retried next tick
        self._lock_busy: str | None = None  # the last holder reported, logged once
        self._state_dirty = False  # the state file could not be written (lock busy)
        self._reload_timer: Timer | None = None
        self._reload_last = float("-inf")
        self._reloads_coalesced = 0
        self.health: AgentHealth | None = None  # XIDs, NVML events, IB flaps (agent/health.py)

    # -- start ------------------------------------------------------------------------------------

    def run(self) -> int:
        """Start, serve until SIGTERM/SIGINT, stop. Returns the process exit code."""
        try:
            self._start()
        except StartupFailed as err:
            self.log.error("agent.start-failed", error=str(err), exit=err.code)
            self.notifier.notify(f"STATUS=start failed: {' '.join(str(err).split())}")
            self._close()
            return err.code
        try:
            self.loop.run()
        finally:
            self._close()
        return self.exit_code

    def _start(self) -> None:
        try:
            self.config = load_config(self.host, self.config_path)
            self.profile = load_profile(self.config.profile, self.host, self.profiles_dir)
        except ConfigError as err:
            raise StartupFailed(EXIT_CONFIG, f"configuration rejected: {err}") from err
        except McpnodeError as err:
            raise StartupFailed(
                EXIT_CONFIG, f"{self.config_path}: tuning.profile: {type(err).__name__}: {err}"
            ) from err
        self._configure_logging()
        self.guard = FlapGuard(self.config.max_remediations, self.config.flap_window)
        from mcpnode.agent.metrics import AgentMetrics

        self.metrics = AgentMetrics()
        self.log.info(
            "agent.start",
            version=__version__,
            pid=os.getpid(),
            root=self.host.root,
            config=self.config.file,
            profile=self.config.profile,
            drift_mode=self.config.drift_mode,
            drift_interval_s=self.config.drift_interval,
        )
        try:
            self._stamp = read_stamp(self.host)
            self.backend = open_backend(self.host)
            self.topology = discover(self.host, self.backend)
        except McpnodeError as err:
            raise StartupFailed(EXIT_AGENT_FAILED, f"discovery: {err}") from err
        try:
            with self.store.lock.hold(START_LOCK_WAIT_S):
                recovered = recover(self.host, self.store, self.log)
                if recovered:
                    self.log.warning("agent.recovered", keys=[o.key for o in recovered])
                # Starting is applying the configured profile: what an earlier run left in the
                # journal is the starting point, not something to adopt.
                self._journal_seen = self.store.identity()
                self._hold_latency()
                self._apply("start")
                self._write_state()
        except LockBusy as err:
            raise StartupFailed(EXIT_AGENT_FAILED, f"the state lock: {err}") from err
        except McpnodeError as err:
            raise StartupFailed(EXIT_AGENT_FAILED, f"recovering the tuning journal: {err}") from err
        self._publish("start")
        self._start_metrics()
        self._start_sources()
        self.health = AgentHealth(
            self.host,
            self.loop,
            self.log,
            self.metrics,
            interval=self.config.health_interval,
            nvml_events=self.config.nvml_events,
            publish=self._publish,
            schedule=self._schedule,
        )
        self.health.start(self.backend, self.topology)
        self._schedule("drift", self.config.drift_interval, self._drift_tick)
        if self.config.autopin:
            self._start_pinner()
            self._schedule("pin", 0.0, self._pin_tick)
        if self.notifier.watchdog_interval is not None:
            self._schedule("watchdog", 0.0, self._watchdog_tick)
        self.metrics.set_ready(True)
        self.notifier.ready(self.status_line())
        self.log.info("agent.ready", status=self.status_line())

    def _configure_logging(self) -> None:
        from mcpnode.logs import configure_logging

        configure_logging(self.config.log_format, self.config.log_level)

    def _start_metrics(self) -> None:
        address = self.config.metrics_address
        if address is None:
            return
        from mcpnode.agent.http import MetricsServer

        try:
            self.server = MetricsServer(self.loop, self.metrics, address[0], address[1], self.log)
        except McpnodeError as err:
            # Metrics are for watching the agent; the node's tuning must not depend on a port.
            self.log.error("metrics.unavailable", listen=self.config.metrics_listen, error=str(err))
            self.server = None
            return

    def _start_sources(self) -> None:
        from mcpnode.agent.sources import InjectSource, LinkSource, SignalSource, UdevSource

        self._add_source(SignalSource(self._on_signal))
        group = self.config.udev_source
        if group == "auto":
            group = "udev" if self.live.exists(UDEV_CONTROL) else "kernel"
        if group != "off":
            try:
                self._add_source(UdevSource(self._on_device_event, group))
            except Exception as err:  # libudev missing, EPERM on netlink: run without it
                self.log.error(
                    "udev.unavailable", group=group, error=f"{type(err).__name__}: {err}"
                )
        try:
            self._add_source(LinkSource(self._on_device_event))
        except OSError as err:
            self.log.error("netlink.unavailable", error=str(err))
        if self.inject_fd is not None:
            inject = InjectSource(self.inject_fd, self._on_device_event, self._on_bad_inject)
            self.sources.append(inject)

            def on_inject() -> None:
                inject.on_readable()
                if inject.closed:  # EOF stays readable forever: stop watching it
                    self.loop.remove_reader(inject)
                    self.log.info("inject.closed")

            self.loop.add_reader(inject, on_inject, inject.name)

    def _add_source(self, source: Any) -> None:
        self.sources.append(source)
        self.loop.add_reader(source, source.on_readable, source.name)

    def _start_pinner(self) -> None:
        from mcpnode.agent.autopin import AutoPinner

        self.pinner = AutoPinner(
            self.live,
            self.config.pin_rules,
            self.config.pin_scope,
            self.log,
            migrate=self.config.pin_migrate,
        )

    # -- timers -----------------------------------------------------------------------------------

    def _schedule(self, name: str, delay: float, callback: Callable[[], None]) -> None:
        old = self._timers.get(name)
        if old is not None:
            old.cancel()
        self._timers[name] = self.loop.call_later(delay, callback, name)

    def _on_latency(self, name: str, late_s: float) -> None:
        if self.metrics is not None:
            self.metrics.observe_loop_latency(name, late_s)

    def _watchdog_tick(self) -> None:
        self.notifier.watchdog()
        interval = self.notifier.watchdog_interval
        if interval is not None:
            self._schedule("watchdog", interval, self._watchdog_tick)

    def _drift_tick(self) -> None:
        try:
            self._check_journal()
            if self._state_dirty:
                self._write_state()
            if self._paused is None and self._apply_pending:
                self._apply("retry")
            if self._paused is None:
                self.reconcile()
            else:
                self.metrics.set_compliance(None, None)  # nothing enforced: unknown
        finally:
            self._schedule("drift", self.config.drift_interval, self._drift_tick)

    # -- the journal changed under the agent --------------------------------------------------

    def _check_journal(self) -> None:
        """Adopt what another run did to the journal since this agent last wrote it: one
        lstat per interval, the journal read only when its identity changed."""
        seen = self.store.identity()
        if seen == self._journal_seen:
            return
        try:
            journal = self.store.load()
        except McpnodeError as err:
            self.log.error("journal.unreadable", journal=self.store.shown, error=str(err))
            self._journal_seen = seen
            return
        self._journal_seen = seen
        self._adopt(journal)

    def _adopt(self, journal: Journal | None) -> None:
        assert self.profile is not None
        if journal is None:
            if self._paused is None:
                self._paused = "the tuning was rolled back by another mcpnode run"
                self.log.warning(
                    "journal.rolled-back",
                    journal=self.store.shown,
                    profile=self.profile.name,
                    action="enforcement paused until `systemctl reload mcpnode`",
                )
                self._changed_state()
            return
        applied = journal.applied
        if journal.state != "applied" or applied is None:
            return  # a run stopped half-way: the next apply (under the lock) recovers it
        if applied.by == "agent" and applied.profile == self.profile.name:
            return  # this agent's own kind of write (another agent instance, same profile)
        if (
            applied.profile == self.profile.name
            and applied.hash == self.profile.content_hash
            and self._paused is None
        ):
            return  # an operator re-applied the profile the agent enforces: nothing to adopt
        try:
            profile = load_profile(applied.profile, self.host, self.profiles_dir)
        except McpnodeError as err:
            self._paused = f"profile {applied.profile!r}, applied by {applied.by}, cannot be loaded"
            self.log.error("journal.adopt-failed", profile=applied.profile, error=str(err))
            self._changed_state()
            return
        previous = self.profile.name
        self.profile, self._profile_source, self._paused = profile, "adopted", None
        self.guard = FlapGuard(self.config.max_remediations, self.config.flap_window)
        self._drifted = frozenset()
        self._unappliable = {}
        self.log.warning(
            "journal.adopted",
            profile=profile.name,
            previous=previous,
            by=applied.by,
            at=applied.at,
            hint="an operator applied it; the agent enforces it now (reload to return to the "
            "configured profile)",
        )
        self._changed_state()

    def _changed_state(self) -> None:
        self._write_state()
        self.notifier.status(self.status_line())
        self._publish("journal")

    def reconcile(self) -> VerifyReport | None:
        """One drift cycle: verify, then remediate or report. Returns the verify report."""
        assert self.profile is not None
        start = time.perf_counter()
        self.metrics.count_event("timer")
        try:
            partition = self._partition()
            managed = self.store.managed_irqs() if partition is not None else frozenset()
            report = verify(self.host, self.profile, partition, managed)
        except McpnodeError as err:
            self.log.error("drift.verify-failed", error=str(err))
            return None
        drifted = frozenset(d.key for d in report.drift)
        for d in report.drift:
            if (
                d.key in self._drifted
                or self.guard.is_contested(d.key)
                or d.key in self._unappliable
            ):
                continue
            self.metrics.count_drift_detected(d.key)
            self.log.warning(
                "drift",
                key=d.key,
                expected=d.expected,
                actual=d.actual,
                mode=self.config.drift_mode,
            )
        contested_before = self.guard.held()
        drifted_before = self._drifted
        remediated: frozenset[str] = frozenset()
        if self.config.drift_mode == "remediate" and report.drift:
            remediated = self._remediate(report)
        self.metrics.observe_reconcile(time.perf_counter() - start)
        # After remediation: the keys written back comply now; what is left decides.
        left = drifted - remediated
        compliant = False if left else (None if report.unknown_reason is not None else True)
        self.metrics.set_compliance(self.profile.name, compliant)
        changed = drifted != self._drifted or self.guard.held() != contested_before
        self._drifted = drifted - remediated
        self.metrics.set_drift_state(drifted, self.guard.held())
        if changed:
            self.notifier.status(self.status_line())
        if self.guard.held() != contested_before:
            self._write_state()
            self._publish("contested")
        elif self._drifted != drifted_before:
            # The manifest and the exporters carry the keys in drift (node_exporter's textfile,
            # NFD's compliance label): keep them true when the set changes, not only on device
            # events. In remediate mode a fixed key never stays, so this is report mode's path.
            self._publish("drift")
        return report

    def _partition(self) -> CpuPartition | None:
        """The housekeeping CPUs and GPU slices `[irq]` places against: the agent's own
        discovery and its configured housekeeping, the same plan it publishes. None when the
        profile has no `[irq]` (nothing is computed then)."""
        if self.profile is None or self.topology is None:
            return None
        if not needs_partition(s.key for s in self.profile.settings):
            return None
        placement = plan_placement(self.topology, self.config.housekeeping)
        nodes = {n.id: n.cpus for n in self.topology.numa_nodes}
        return cpu_partition(placement, nodes, "the agent's discovery")

    def _remediate(self, report: VerifyReport) -> frozenset[str]:
        """Re-apply the drifted keys the guard allows; returns the keys written back."""
        assert self.profile is not None
        now = self.clock()
        fix = []
        for d in report.drift:
            if self.guard.is_contested(d.key) or d.key in self._unappliable:
                continue
            if self.guard.may_remediate(d.key, now):
                fix.append(d.key)
                continue
            c = self.guard.give_up(d.key, now, d.actual)
            self.log.error(
                "drift.contested",
                key=d.key,
                remediations=c.remediations,
                window_s=c.window_s,
                value=d.actual,
                hint="another owner keeps changing this key; remediation stopped until reload",
            )
        if not fix:
            return frozenset()
        result = self._apply("drift", hold=self.guard.held())
        if result is None:
            return frozenset()
        # apply_profile raises on the first failed write, so every outcome here was written.
        for o in result.writes:
            self.guard.remediated(o.key, now)
            self.metrics.count_drift_remediated(o.key)
            self.log.info("drift.remediated", key=o.key, old=o.old, new=o.new)
        return frozenset(o.key for o in result.writes)

    def _pin_tick(self) -> None:
        try:
            if self.pinner is not None and self.built is not None:
                self.metrics.count_event("timer")
                result = self.pinner.scan(self.built.topology, self.built.placement, self.backend)
                for event in result.pinned:
                    self.metrics.count_pin(event.rule)
                self._pinned = result.tracked
                self.metrics.set_pinned_processes(result.tracked)
                if result.pinned:
                    self.notifier.status(self.status_line())
                    self._write_state()
        finally:
            if self.config.autopin:
                self._schedule("pin", self.config.pin_interval, self._pin_tick)

    # -- effects ----------------------------------------------------------------------------------

    def _apply(self, reason: str, hold: frozenset[str] = frozenset()) -> ApplyResult | None:
        """Apply the profile, holding `hold` and every key that already failed to write.

        A write the kernel refuses (ENOENT for a qdisc whose module is missing: seen on a real
        H200 guest, kernel 6.18, `net.core.default_qdisc = fq` without sch_fq) makes apply undo
        the whole run. Retrying that every drift interval would rewrite every key twice per
        interval forever, and the node would stay untuned for one impossible key. So the key
        is set aside as unappliable (logged once, in STATUS, held until a reload) and the rest
        of the profile is applied without it. Each failure either ends the run or sets aside a
        key not set aside before, so the loop ends."""
        assert self.profile is not None
        wait = RELOAD_LOCK_WAIT_S if reason == "reload" else LOOP_LOCK_WAIT_S
        try:
            with self.store.lock.hold(wait):
                # Under the lock: whatever another run did since the last look is adopted
                # first, never overwritten (its journal is the truth now).
                self._check_journal()
                if self._paused is not None and reason not in ("start", "reload"):
                    self._apply_pending = False
                    return None
                result = self._apply_locked(reason, hold)
                self._journal_seen = self.store.identity()
        except LockBusy as err:
            self._apply_pending = True
            if str(err) != self._lock_busy:
                self.log.warning(
                    "lock.busy", reason=reason, error=str(err), action="retried next interval"
                )
            self._lock_busy = str(err)
            self.notifier.status(self.status_line())
            return None
        self._apply_pending, self._lock_busy = False, None
        return result

    def _apply_locked(self, reason: str, hold: frozenset[str]) -> ApplyResult | None:
        assert self.profile is not None
        while True:
            try:
                result = apply_profile(
                    self.host,
                    self.profile,
                    self.store,
                    persist=self.config.persist and reason != "drift",
                    hold=hold | frozenset(self._unappliable),
                    by="agent",
                    log=self.log,
                    partition=self._partition(),
                )
                break
            except ApplyFailed as err:
                key = err.failure.key
                if key in self._unappliable or not err.undo_complete:
                    self._apply_failed(reason, str(err))
                    return None
                self._unappliable[key] = err.failure.error or "write failed"
                self.log.error(
                    "apply.key-unappliable",
                    reason=reason,
                    key=key,
                    value=err.failure.new,
                    error=err.failure.error,
                    hint=err.hint,
                    action="applying the rest of the profile without it until a reload",
                )
            except McpnodeError as err:
                self._apply_failed(reason, str(err))
                return None
        # Every write succeeded (apply_profile raises otherwise); keys set aside show in STATUS.
        self._last_apply, self._apply_error = "ok", None
        self.metrics.record_apply("ok", len(result.writes))
        if reason != "drift" or result.writes:
            self.log.info(
                "apply",
                reason=reason,
                profile=self.profile.name,
                writes=len(result.writes),
                restored=sum(1 for r in result.restores if r.action == "set"),
                unchanged=sum(1 for i in result.plan.items if i.action == "ok"),
                unappliable=sorted(self._unappliable),
            )
        return result

    def _apply_failed(self, reason: str, error: str) -> None:
        assert self.profile is not None
        self.metrics.record_apply("failed", 0)
        # The drift timer retries every interval: say it once per distinct error (then at
        # debug), not an error line every 1.5 s for as long as the journal stays unreadable.
        log = self.log.error if error != self._apply_error else self.log.debug
        self._last_apply, self._apply_error = "failed", error
        log("apply.failed", reason=reason, profile=self.profile.name, error=error)

    def _hold_latency(self) -> None:
        """Hold the profile's PM QoS `force_latency` (Host.hold_cpu_latency) for as long as the
        agent runs, as tuned's daemon does; a changed value on reload replaces the request, a
        profile without one withdraws it. Failing to hold it is logged, never fatal: verify then
        reports the key in drift."""
        setting = self.profile.setting(FORCE_LATENCY_KEY) if self.profile is not None else None
        want = (
            int(setting.desired.text)
            if setting is not None and isinstance(setting.desired, Exact)
            else None
        )
        if want == self._latency[0]:
            return
        if self._latency[1] is not None:
            os.close(self._latency[1])
            self.log.info("pm-qos.released", microseconds=self._latency[0])
        self._latency = (None, None)
        if want is None:
            return
        try:
            fd = self.host.hold_cpu_latency(want)
        except McpnodeError as err:
            self.log.error("pm-qos.unavailable", microseconds=want, error=str(err))
            return
        self._latency = (want, fd)
        self.log.info("pm-qos.held", microseconds=want, path=CPU_DMA_LATENCY)

    def _write_state(self) -> None:
        """Write /run/mcpnode/agent.json under the state lock (taken only if free now, or
        already held by this cycle); when it is busy, the next drift tick writes it."""
        profile = self.profile.name if self.profile is not None else self.config.profile
        state = AgentState(
            pid=os.getpid(),
            profile=None if self._paused is not None else profile,
            config=self.config.file,
            drift_mode=self.config.drift_mode,
            started_at=self.started_at,
            updated_at=_now(),
            contested=self.guard.contested(),
            pinned=self._pinned,
            profile_source=self._profile_source,
            paused=self._paused,
        )
        try:
            with self.store.lock.hold(LOOP_LOCK_WAIT_S):
                write_agent_state(self.host, state)
            self._state_dirty = False
        except LockBusy:
            self._state_dirty = True
        except HostError as err:
            self.log.error("state.write-failed", path=AGENT_STATE_PATH, error=str(err))

    def _publish(self, reason: str) -> None:
        """Build the manifest and the configured exporters from one discovery and one audit;
        write each file only when its content changed (readers watching mtimes stay quiet)."""
        assert self.topology is not None
        try:
            built = build_all(
                self.host,
                housekeeping=self.config.housekeeping,
                profiles_dir=self.profiles_dir,
                topology=self.topology,
                probe=manifest_section,
                observed_xids=self.health.observed_xids() if self.health else (),
                expect=self.config.expect,
                expect_source=self.config.file if self.config.expect else None,
            )
        except McpnodeError as err:
            self.log.error("manifest.build-failed", reason=reason, error=str(err))
            return
        self.built = built
        self.metrics.set_inventory(len(built.topology.gpus), len(built.topology.nics))
        self.metrics.set_audit_findings(built.audit.findings)
        digest = content_hash(built.manifest)
        if digest != self._manifest_hash:
            try:
                path = publish(self.host, built.manifest, publication(self._stamp, os.getpid()))
            except HostError as err:
                self.log.error("manifest.publish-failed", reason=reason, error=str(err))
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
        summary = summarize(built.audit)
        options = Options(slurm_type=self.config.slurm_type)
        for kind in self.config.export_kinds:
            path = target_path(kind, self.config.export_dir(kind))
            try:
                text = render(kind, built.topology, built.placement, summary, options)
                if self._exports.get(kind) == (path, text):
                    continue
                self._write_export(kind, path, text)
            except McpnodeError as err:
                self.log.error("export.failed", kind=kind, path=path, error=str(err))
                continue
            old = self._exports.get(kind)
            self._exports[kind] = (path, text)
            self.log.info("export.written", kind=kind, path=path, reason=reason)
            if old is not None and old[0] != path:
                self._remove_export(kind, old[0], "moved")

    def _write_export(self, kind: str, path: str, text: str) -> None:
        """Write one exporter file; the nfd file with its expiry, and the refresh scheduled.
        Raises McpnodeError (HostError, NfdLabelError)."""
        if kind == "nfd" and self.config.nfd_expiry:
            expires = datetime.now(timezone.utc) + timedelta(seconds=self.config.nfd_expiry)
            text = nfd.with_expiry(text, expires)
            self._schedule(
                "nfd-refresh", self.config.nfd_expiry * NFD_REFRESH_FRACTION, self._refresh_nfd
            )
        self.host.write_file_atomic(path, text.encode(), mode=0o644)

    def _refresh_nfd(self) -> None:
        """Rewrite the feature file with a new expiry, the labels unchanged (`_write_export`
        schedules the next refresh). A failed write is logged and retried at the next one: the
        labels then expire, which is what they should do when the agent cannot keep them."""
        self._timers.pop("nfd-refresh", None)
        written = self._exports.get("nfd")
        if written is None or "nfd" not in self.config.export_kinds:
            return
        path, text = written
        try:
            self._write_export("nfd", path, text)
        except McpnodeError as err:
            self.log.error("export.failed", kind="nfd", path=path, error=str(err))
            self._schedule(
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

    # -- events -----------------------------------------------------------------------------------

    def _on_device_event(self, event: DeviceEvent) -> None:
        source_name = event.source if event.source in ("udev", "netlink") else "inject"
        self.metrics.count_event(source_name)
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
            self._schedule("rediscover", self.config.debounce, self._rediscover)

    def _relevant(self, event: DeviceEvent) -> bool:
        """Whether an event can change the manifest: any PCI or RDMA device, and network
        interfaces of the NICs discovered (a Kubernetes node churns veths all day)."""
        if event.action == "overrun" or event.subsystem in ("pci", "infiniband"):
            return True
        if "/virtual/" in event.detail:
            return False
        names = {d.name for n in (self.topology.nics if self.topology else ()) for d in n.netdevs}
        return event.source != "netlink" or event.name in names

    def _on_bad_inject(self, why: str) -> None:
        self.log.warning("inject.bad-event", error=why)

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
        if self.health is not None:
            self.health.restart(self.backend, self.topology)
        self.metrics.count_rediscovery()
        old_gpus = {str(g.address) for g in (before.gpus if before else ())}
        new_gpus = {str(g.address) for g in self.topology.gpus}
        old_nics = {str(n.address) for n in (before.nics if before else ())}
        new_nics = {str(n.address) for n in self.topology.nics}
        self._publish("rediscover")
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
        self.notifier.status(self.status_line())

    def _on_signal(self, signum: int) -> None:
        import signal

        self.metrics.count_event("signal")
        if signum == signal.SIGHUP:
            self._request_reload()
        elif signum in (signal.SIGTERM, signal.SIGINT):
            self.stop(signal.Signals(signum).name)

    def _request_reload(self) -> None:
        """Coalesce SIGHUPs: one reload pending at most, no sooner than RELOAD_MIN_INTERVAL_S
        after the last one started (a `systemctl reload` loop, or a storm, costs a reload a
        second, never one per signal)."""
        if self._reload_timer is not None and not self._reload_timer.cancelled:
            self._reloads_coalesced += 1
            return
        delay = max(0.0, self._reload_last + RELOAD_MIN_INTERVAL_S - self.clock())
        self._reload_timer = self.loop.call_later(delay, self._reload_due, "reload")

    def _reload_due(self) -> None:
        self._reload_timer = None
        self._reload_last = self.clock()
        coalesced, self._reloads_coalesced = self._reloads_coalesced, 0
        if coalesced:
            self.log.info("config.reload-coalesced", signals=coalesced + 1)
        self.reload()

    # -- reload and stop --------------------------------------------------------------------------

    def reload(self) -> bool:
        """Re-read config and profile; apply the difference. A bad config keeps the old one."""
        self.notifier.reloading()
        old = self.config
        try:
            config, profile = self._read_config_bounded()
        except Exception as err:  # a bomb, RecursionError, a timeout: never fatal, never kept
            self.metrics.count_config_reload("rejected")
            detail = " ".join(f"{type(err).__name__}: {err}".split())[:500]
            self.log.error("config.rejected", error=detail, kept=old.file, profile=old.profile)
            self.notifier.ready(self.status_line())
            return False
        self.config, self.profile = config, profile
        self._profile_source, self._paused = "config", None
        self._configure_logging()
        if self.health is not None:
            self.health.interval = config.health_interval
        # The operator reloads after fixing the other owner of a contested key: start afresh.
        self.guard = FlapGuard(config.max_remediations, config.flap_window)
        self._drifted = frozenset()
        self._unappliable = {}
        # A reload means "enforce the configuration": not whatever another run applied since.
        self._journal_seen = self.store.identity()
        self._hold_latency()
        self._apply("reload")
        if config.metrics_listen != old.metrics_listen:
            if self.server is not None:
                self.server.close()
                self.server = None
            self._start_metrics()
        if config.autopin and (
            not old.autopin
            or config.pin_rules != old.pin_rules
            or config.pin_migrate != old.pin_migrate
        ):
            self._start_pinner()
            self._schedule("pin", 0.0, self._pin_tick)
        elif not config.autopin and old.autopin:
            self.pinner = None
            timer = self._timers.pop("pin", None)
            if timer is not None:
                timer.cancel()
        self._schedule("drift", config.drift_interval, self._drift_tick)
        self._write_state()
        for kind, (path, _text) in list(self._exports.items()):
            if kind not in config.export_kinds:
                del self._exports[kind]
                self._remove_export(kind, path, "disabled")
        if "nfd" not in config.export_kinds or not config.nfd_expiry:
            timer = self._timers.pop("nfd-refresh", None)
            if timer is not None:
                timer.cancel()
        if config.nfd_expiry != old.nfd_expiry and "nfd" in self._exports:
            # Same path, same labels, another expiry (or none): rewrite it at the publish below.
            self._exports["nfd"] = (self._exports["nfd"][0], "")
        self._publish("reload")
        self.metrics.count_config_reload("ok")
        self.log.info(
            "config.reloaded",
            config=config.file,
            profile=config.profile,
            previous_profile=old.profile,
            drift_mode=config.drift_mode,
        )
        self.notifier.ready(self.status_line())
        return True

    def _read_config_bounded(self) -> tuple[AgentConfig, Profile]:
        """The config and its profile, in at most RELOAD_TIMEOUT_S of wall time (SIGALRM on this,
        the main thread: parsing is pure Python, interruptible between bytecodes)."""
        import signal

        def expired(_signum: int, _frame: Any) -> None:
            raise ReloadTimeout(f"reading the configuration took over {RELOAD_TIMEOUT_S:g} s")

        previous = signal.signal(signal.SIGALRM, expired)
        signal.setitimer(signal.ITIMER_REAL, RELOAD_TIMEOUT_S)
        try:
            config = load_config(self.host, self.config_path)
            return config, load_profile(config.profile, self.host, self.profiles_dir)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)

    def stop(self, why: str) -> None:
        self.notifier.stopping(f"stopping ({why})")
        self.log.info("agent.stopping", signal=why, rollback=self.config.rollback)
        if self.config.rollback == "on-stop":
            try:
                with self.store.lock.hold(STOP_LOCK_WAIT_S):
                    result = rollback(self.host, self.store, self.log)
            except McpnodeError as err:
                self.log.error("rollback.failed", error=str(err))
                self.exit_code = EXIT_AGENT_FAILED
            else:
                self.log.info("rollback", profile=result.profile, restored=len(result.outcomes))
        self.loop.stop()

    def _close(self) -> None:
        if self.health is not None:
            self.health.close()
            self.health = None
        for source in self.sources:
            self.loop.remove_reader(source)
            with contextlib.suppress(Exception):
                source.close()
        self.sources = []
        if self.server is not None:
            self.server.close()
            self.server = None
        if self.backend is not None:
            self.backend.close()
            self.backend = None
        if self._latency[1] is not None:
            os.close(self._latency[1])  # withdraws the PM QoS request
            self._latency = (None, None)
        with contextlib.suppress(McpnodeError):
            self.host.remove(AGENT_STATE_PATH)
        for kind, (path, _text) in self._exports.items():
            self._remove_export(kind, path, "stopped")
        self._exports = {}
        if self.metrics is not None:
            self.metrics.set_ready(False)
        self.notifier.close()
        self.loop.close()

    # -- status -----------------------------------------------------------------------------------

    def status_line(self) -> str:
        topo = self.topology
        gpus = len(topo.gpus) if topo else 0
        nics = len(topo.nics) if topo else 0
        contested = len(self.guard.held())
        if self._paused is not None:
            tuning = f"PAUSED ({self._paused}; `systemctl reload mcpnode` resumes)"
        elif self._lock_busy is not None:
            tuning = "waiting for the state lock (another mcpnode run holds it)"
        elif self._unappliable:
            tuning = f"{len(self._unappliable)} key(s) cannot be applied"
        elif self._last_apply == "failed":
            tuning = "apply FAILED"
        elif self._drifted:
            tuning = f"{len(self._drifted)} key(s) drifted"
        else:
            tuning = "in profile"
        extra = f", {contested} contested" if contested else ""
        name = self.profile.name if self.profile is not None else self.config.profile
        adopted = " (adopted)" if self._profile_source == "adopted" else ""
        return (
            f"profile {name}{adopted}: {tuning}{extra}; {gpus} GPU(s), {nics} NIC(s); "
            f"pinned {self._pinned}; drift {self.config.drift_mode} every "
            f"{self.config.drift_interval:g}s"
        )
