"""The agent's enforcement of its tuning profile: apply at start and reload, the drift timer
(verify, then remediate or report, with the anti-flap guard of drift.py), the PM QoS hold, the
agent state file, and what happens when the journal changed under the agent.

The state lock (state/lock.py) is held only while the agent writes: at start (recover, apply,
state file), for each remediation, at reload and at stop; so an operator's `mcpnode apply` or
`rollback` runs between the agent's cycles. The agent notices when the journal changed under it
(its identity differs from the one the agent last wrote): an operator's apply is *adopted* (the
agent enforces that profile from then on, logged as `journal.adopted`), an operator's rollback
*pauses* enforcement (`journal.rolled-back`) until `systemctl reload mcpnode`. It never fights
the operator. A remediation that finds the lock held is retried at the next interval.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from mcpnode.agent.config import AgentConfig
from mcpnode.agent.drift import FlapGuard
from mcpnode.agent.part import AgentPart
from mcpnode.errors import HostError, LockBusy, McpnodeError
from mcpnode.host import FileStat, Host
from mcpnode.logs import EventLog
from mcpnode.placement.plan import plan_placement
from mcpnode.placement.source import cpu_partition
from mcpnode.state.agentstate import AGENT_STATE_PATH, AgentState, write_agent_state
from mcpnode.topology.model import Topology
from mcpnode.tuning.apply import ApplyResult, apply_profile, recover, rollback
from mcpnode.tuning.errors import ApplyFailed
from mcpnode.tuning.journal import Journal, JournalStore
from mcpnode.tuning.partition import CpuPartition, needs_partition
from mcpnode.tuning.paths import CPU_DMA_LATENCY, FORCE_LATENCY_KEY
from mcpnode.tuning.profile import Profile, load_profile
from mcpnode.tuning.values import Exact
from mcpnode.tuning.verify import VerifyReport, verify

if TYPE_CHECKING:
    pass

# How long the agent waits for an operator's run to release the state lock. At start and stop
# it can wait (TimeoutStartSec/TimeoutStopSec are minutes); inside the loop it must not block
# (the watchdog, metrics and device events share the thread): a remediation takes the lock
# only if it is free now and otherwise tries again at the next drift interval.
START_LOCK_WAIT_S = 30.0
STOP_LOCK_WAIT_S = 30.0
LOOP_LOCK_WAIT_S = 0.0
RELOAD_LOCK_WAIT_S = 1.0


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class LatencyHold:
    """The profile's PM QoS `force_latency` (Host.hold_cpu_latency), held for as long as the
    agent runs, as tuned's daemon does: the request lasts while its file descriptor is open."""

    def __init__(self, host: Host, log: EventLog) -> None:
        self.host = host
        self.log = log
        self._held: tuple[int | None, int | None] = (None, None)  # (µs, fd)

    def hold(self, profile: Profile | None) -> None:
        """Hold `profile`'s value; a changed value replaces the request, a profile without one
        withdraws it. Failing to hold it is logged, never fatal: verify then reports the key
        in drift."""
        setting = profile.setting(FORCE_LATENCY_KEY) if profile is not None else None
        want = (
            int(setting.desired.text)
            if setting is not None and isinstance(setting.desired, Exact)
            else None
        )
        if want == self._held[0]:
            return
        if self._held[1] is not None:
            os.close(self._held[1])
            self.log.info("pm-qos.released", microseconds=self._held[0])
        self._held = (None, None)
        if want is None:
            return
        try:
            fd = self.host.hold_cpu_latency(want)
        except McpnodeError as err:
            self.log.error("pm-qos.unavailable", microseconds=want, error=str(err))
            return
        self._held = (want, fd)
        self.log.info("pm-qos.held", microseconds=want, path=CPU_DMA_LATENCY)

    def close(self) -> None:
        if self._held[1] is not None:
            os.close(self._held[1])  # withdraws the PM QoS request
            self._held = (None, None)


@dataclass(eq=False)
class Enforcer(AgentPart):
    """Keeps the host in its tuning profile. `config` is the agent's configuration (replaced at
    reload by `reconfigure`); `topology` answers the agent's current discovery, `pinned` how
    many processes it pins (both for what it writes), `publish` republishes. Call from the loop
    thread only."""

    topology: Callable[[], Topology | None]
    pinned: Callable[[], int]
    publish: Callable[[str], None]

    def __post_init__(self) -> None:
        super().__post_init__()
        self.store = JournalStore(self.host, command="mcpnode agent", wait_s=LOOP_LOCK_WAIT_S)
        self.profile: Profile | None = None
        self.started_at = now_iso()
        self.latency = LatencyHold(self.host, self.log)
        self.guard = FlapGuard(3, 600.0)
        self.drifted: frozenset[str] = frozenset()
        self.last_apply = "none"
        self.apply_error: str | None = None  # the last apply failure, logged once
        self.unappliable: dict[str, str] = {}  # key -> why the kernel refused it
        # The journal as this agent last left it (identity after its own save): anything else
        # there was written by another run.
        self.journal_seen: FileStat | None = None
        self.profile_source = "config"  # or "adopted": applied by an operator, taken over
        self.paused: str | None = None  # why enforcement stopped (an operator's rollback)
        self.apply_pending = False  # an apply that could not get the lock: retried next tick
        self.lock_busy: str | None = None  # the last holder reported, logged once
        self.state_dirty = False  # the state file could not be written (lock busy)

    # -- start, reload, stop ----------------------------------------------------------------------

    def configure(self, config: AgentConfig, profile: Profile) -> None:
        self.config, self.profile = config, profile
        self.guard = FlapGuard(config.max_remediations, config.flap_window)

    def start(self) -> None:
        """Recover an interrupted apply, hold PM QoS, apply the profile, write the state file:
        under the state lock, waiting START_LOCK_WAIT_S for it. Raises LockBusy, McpnodeError."""
        with self.store.lock.hold(START_LOCK_WAIT_S):
            recovered = recover(self.host, self.store, self.log)
            if recovered:
                self.log.warning("agent.recovered", keys=[o.key for o in recovered])
            # Starting is applying the configured profile: what an earlier run left in the
            # journal is the starting point, not something to adopt.
            self.journal_seen = self.store.identity()
            self.latency.hold(self.profile)
            self.apply("start")
            self.write_state()

    def reconfigure(self, config: AgentConfig, profile: Profile) -> None:
        """A reload: enforce the new configuration's profile, afresh."""
        self.config, self.profile = config, profile
        self.profile_source, self.paused = "config", None
        # The operator reloads after fixing the other owner of a contested key: start afresh.
        self.guard = FlapGuard(config.max_remediations, config.flap_window)
        self.drifted = frozenset()
        self.unappliable = {}
        # A reload means "enforce the configuration": not whatever another run applied since.
        self.journal_seen = self.store.identity()
        self.latency.hold(self.profile)
        self.apply("reload")

    def schedule_drift(self) -> None:
        self.timers.schedule("drift", self.config.drift_interval, self.drift_tick)

    def stop(self) -> bool:
        """Roll back when `rollback = "on-stop"`; False when that rollback failed."""
        if self.config.rollback != "on-stop":
            return True
        try:
            with self.store.lock.hold(STOP_LOCK_WAIT_S):
                result = rollback(self.host, self.store, self.log)
        except McpnodeError as err:
            self.log.error("rollback.failed", error=str(err))
            return False
        self.log.info("rollback", profile=result.profile, restored=len(result.outcomes))
        return True

    # -- the drift timer --------------------------------------------------------------------------

    def drift_tick(self) -> None:
        try:
            self.check_journal()
            if self.state_dirty:
                self.write_state()
            if self.paused is None and self.apply_pending:
                self.apply("retry")
            if self.paused is None:
                self.reconcile()
            else:
                self.metrics.set_compliance(None, None)  # nothing enforced: unknown
        finally:
            self.schedule_drift()

    def check_journal(self) -> None:
        """Adopt what another run did to the journal since this agent last wrote it: one
        lstat per interval, the journal read only when its identity changed."""
        seen = self.store.identity()
        if seen == self.journal_seen:
            return
        try:
            journal = self.store.load()
        except McpnodeError as err:
            self.log.error("journal.unreadable", journal=self.store.shown, error=str(err))
            self.journal_seen = seen
            return
        self.journal_seen = seen
        self._adopt(journal)

    def _adopt(self, journal: Journal | None) -> None:
        assert self.profile is not None
        if journal is None:
            if self.paused is None:
                self.paused = "the tuning was rolled back by another mcpnode run"
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
            and self.paused is None
        ):
            return  # an operator re-applied the profile the agent enforces: nothing to adopt
        try:
            profile = load_profile(applied.profile, self.host, self.ctx.profiles_dir)
        except McpnodeError as err:
            self.paused = f"profile {applied.profile!r}, applied by {applied.by}, cannot be loaded"
            self.log.error("journal.adopt-failed", profile=applied.profile, error=str(err))
            self._changed_state()
            return
        previous = self.profile.name
        self.profile, self.profile_source, self.paused = profile, "adopted", None
        self.guard = FlapGuard(self.config.max_remediations, self.config.flap_window)
        self.drifted = frozenset()
        self.unappliable = {}
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
        self.write_state()
        self.ctx.status()
        self.publish("journal")

    def reconcile(self) -> VerifyReport | None:
        """One drift cycle: verify, then remediate or report. Returns the verify report."""
        assert self.profile is not None
        start = time.perf_counter()
        self.metrics.count_event("timer")
        try:
            # One oneshot() pass: the keys' directories (/proc/sys/net/ipv4, ...) are resolved
            # once per cycle instead of component by component for every key, several times
            # (what an idle agent spent its CPU on). Nothing is cached past the cycle.
            with self.host.oneshot():
                partition = self.partition()
                managed = self.store.managed_irqs() if partition is not None else frozenset()
                report = verify(self.host, self.profile, partition, managed)
        except McpnodeError as err:
            self.log.error("drift.verify-failed", error=str(err))
            return None
        drifted = frozenset(d.key for d in report.drift)
        for d in report.drift:
            if d.key in self.drifted or self.guard.is_contested(d.key) or d.key in self.unappliable:
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
        drifted_before = self.drifted
        remediated: frozenset[str] = frozenset()
        if self.config.drift_mode == "remediate" and report.drift:
            remediated = self._remediate(report)
        self.metrics.observe_reconcile(time.perf_counter() - start)
        # After remediation: the keys written back comply now; what is left decides.
        left = drifted - remediated
        compliant = False if left else (None if report.unknown_reason is not None else True)
        self.metrics.set_compliance(self.profile.name, compliant)
        changed = drifted != self.drifted or self.guard.held() != contested_before
        self.drifted = drifted - remediated
        self.metrics.set_drift_state(drifted, self.guard.held())
        if changed:
            self.ctx.status()
        if self.guard.held() != contested_before:
            self.write_state()
            self.publish("contested")
        elif self.drifted != drifted_before:
            # The manifest and the exporters carry the keys in drift (node_exporter's textfile,
            # NFD's compliance label): keep them true when the set changes, not only on device
            # events. In remediate mode a fixed key never stays, so this is report mode's path.
            self.publish("drift")
        return report

    def partition(self) -> CpuPartition | None:
        """The housekeeping CPUs and GPU slices `[irq]` places against: the agent's own
        discovery and its configured housekeeping, the same plan it publishes. None when the
        profile has no `[irq]` (nothing is computed then)."""
        topology = self.topology()
        if self.profile is None or topology is None:
            return None
        if not needs_partition(s.key for s in self.profile.settings):
            return None
        placement = plan_placement(topology, self.config.housekeeping)
        nodes = {n.id: n.cpus for n in topology.numa_nodes}
        return cpu_partition(placement, nodes, "the agent's discovery")

    def _remediate(self, report: VerifyReport) -> frozenset[str]:
        """Re-apply the drifted keys the guard allows; returns the keys written back."""
        assert self.profile is not None
        now = self.ctx.clock()
        fix = []
        for d in report.drift:
            if self.guard.is_contested(d.key) or d.key in self.unappliable:
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
        result = self.apply("drift", hold=self.guard.held())
        if result is None:
            return frozenset()
        # apply_profile raises on the first failed write, so every outcome here was written.
        for o in result.writes:
            self.guard.remediated(o.key, now)
            self.metrics.count_drift_remediated(o.key)
            self.log.info("drift.remediated", key=o.key, old=o.old, new=o.new)
        return frozenset(o.key for o in result.writes)

    # -- apply ------------------------------------------------------------------------------------

    def apply(self, reason: str, hold: frozenset[str] = frozenset()) -> ApplyResult | None:
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
                self.check_journal()
                if self.paused is not None and reason not in ("start", "reload"):
                    self.apply_pending = False
                    return None
                result = self._apply_locked(reason, hold)
                self.journal_seen = self.store.identity()
        except LockBusy as err:
            self.apply_pending = True
            if str(err) != self.lock_busy:
                self.log.warning(
                    "lock.busy", reason=reason, error=str(err), action="retried next interval"
                )
            self.lock_busy = str(err)
            self.ctx.status()
            return None
        self.apply_pending, self.lock_busy = False, None
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
                    hold=hold | frozenset(self.unappliable),
                    by="agent",
                    log=self.log,
                    partition=self.partition(),
                )
                break
            except ApplyFailed as err:
                key = err.failure.key
                if key in self.unappliable or not err.undo_complete:
                    self._apply_failed(reason, str(err))
                    return None
                self.unappliable[key] = err.failure.error or "write failed"
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
        self.last_apply, self.apply_error = "ok", None
        self.metrics.record_apply("ok", len(result.writes))
        if reason != "drift" or result.writes:
            self.log.info(
                "apply",
                reason=reason,
                profile=self.profile.name,
                writes=len(result.writes),
                restored=sum(1 for r in result.restores if r.action == "set"),
                unchanged=sum(1 for i in result.plan.items if i.action == "ok"),
                unappliable=sorted(self.unappliable),
            )
        return result

    def _apply_failed(self, reason: str, error: str) -> None:
        assert self.profile is not None
        self.metrics.record_apply("failed", 0)
        # The drift timer retries every interval: say it once per distinct error (then at
        # debug), not an error line every 1.5 s for as long as the journal stays unreadable.
        log = self.log.error if error != self.apply_error else self.log.debug
        self.last_apply, self.apply_error = "failed", error
        log("apply.failed", reason=reason, profile=self.profile.name, error=error)

    # -- what the agent says about it -------------------------------------------------------------

    def write_state(self) -> None:
        """Write /run/mcpnode/agent.json under the state lock (taken only if free now, or
        already held by this cycle); when it is busy, the next drift tick writes it."""
        profile = self.profile.name if self.profile is not None else self.config.profile
        state = AgentState(
            pid=os.getpid(),
            profile=None if self.paused is not None else profile,
            config=self.config.file,
            drift_mode=self.config.drift_mode,
            started_at=self.started_at,
            updated_at=now_iso(),
            contested=self.guard.contested(),
            pinned=self.pinned(),
            profile_source=self.profile_source,
            paused=self.paused,
        )
        try:
            with self.store.lock.hold(LOOP_LOCK_WAIT_S):
                write_agent_state(self.host, state)
            self.state_dirty = False
        except LockBusy:
            self.state_dirty = True
        except HostError as err:
            self.log.error("state.write-failed", path=AGENT_STATE_PATH, error=str(err))

    def close(self) -> None:
        """At stop: withdraw the PM QoS request and remove the state file (the agent no
        longer vouches for anything)."""
        self.latency.close()
        with contextlib.suppress(McpnodeError):
            self.host.remove(AGENT_STATE_PATH)

    def summary(self) -> str:
        """The tuning part of the STATUS line: profile, then what stands in its way."""
        contested = len(self.guard.held())
        if self.paused is not None:
            tuning = f"PAUSED ({self.paused}; `systemctl reload mcpnode` resumes)"
        elif self.lock_busy is not None:
            tuning = "waiting for the state lock (another mcpnode run holds it)"
        elif self.unappliable:
            tuning = f"{len(self.unappliable)} key(s) cannot be applied"
        elif self.last_apply == "failed":
            tuning = "apply FAILED"
        elif self.drifted:
            tuning = f"{len(self.drifted)} key(s) drifted"
        else:
            tuning = "in profile"
        extra = f", {contested} contested" if contested else ""
        name = self.profile.name if self.profile is not None else self.config.profile
        adopted = " (adopted)" if self.profile_source == "adopted" else ""
        return f"profile {name}{adopted}: {tuning}{extra}"
