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

The parts, each with one job: enforce.py (apply, drift, PM QoS, the journal changed under
the agent, the state file), publish.py (discovery, manifest, exporters, rediscovery after a
device event), pinning.py (the auto-pin scan), reload.py (SIGHUP coalescing, the bounded
read), health.py (XIDs, NVML events, IB link flaps), http.py (the metrics endpoint). This
file wires them to the loop and owns the lifecycle: start, READY=1, the watchdog, reload,
stop.

The parts share one context (part.py). How the agent shares the state lock with an operator's
`mcpnode apply` or `rollback`, and never fights them, is enforce.py's to say.

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
from pathlib import Path
from typing import TYPE_CHECKING

import structlog

from mcpnode import __version__
from mcpnode.agent.config import AgentConfig, ConfigError, load_config
from mcpnode.agent.enforce import Enforcer
from mcpnode.agent.health import AgentHealth
from mcpnode.agent.loop import Loop, Timers
from mcpnode.agent.notify import Notifier
from mcpnode.agent.part import AgentContext
from mcpnode.agent.pinning import Pinning
from mcpnode.agent.publish import Publisher
from mcpnode.agent.reload import ReloadCoalescer, read_config_bounded
from mcpnode.agent.sources import UDEV_CONTROL, Source
from mcpnode.audit.xid import XidEvent
from mcpnode.errors import LockBusy, McpnodeError
from mcpnode.exitcodes import EXIT_AGENT_FAILED, EXIT_CONFIG, EXIT_OK
from mcpnode.host import Host
from mcpnode.logs import EventLog
from mcpnode.topology.model import Topology
from mcpnode.topology.nvml import GpuBackend
from mcpnode.tuning.profile import load_profile

if TYPE_CHECKING:
    from mcpnode.agent.http import MetricsServer
    from mcpnode.agent.metrics import AgentMetrics


class StartupFailed(McpnodeError):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


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
        log: EventLog | None = None,
    ) -> None:
        from mcpnode.agent.metrics import AgentMetrics

        self.host = host
        self.live = live
        self.config_path = config_path
        self.profiles_dir = profiles_dir
        self.notifier = notifier if notifier is not None else Notifier()
        self.inject_fd = inject_fd
        self.clock = clock
        self.log: EventLog = log if log is not None else structlog.get_logger("mcpnode.agent")
        self.config = AgentConfig()
        self.metrics: AgentMetrics = AgentMetrics()
        self.loop = Loop(self.log, clock, on_latency=self.metrics.observe_loop_latency)
        self.timers = Timers(self.loop)
        self.server: MetricsServer | None = None
        self.sources: list[Source] = []
        self.health: AgentHealth | None = None  # XIDs, NVML events, IB flaps (agent/health.py)
        self.exit_code = EXIT_OK
        self.parts = AgentContext(
            host,
            live,
            self.log,
            self.metrics,
            self.loop,
            self.timers,
            clock,
            profiles_dir,
            self._status,
        )
        self.publisher = Publisher(
            self.parts,
            observed_xids=self._observed_xids,
            rediscovered=self._rediscovered,
            keepalive=self.notifier.keepalive,
        )
        self.pinning = Pinning(
            self.parts,
            built=lambda: self.publisher.built,
            backend=lambda: self.publisher.backend,
            pinned_more=self._pinned_more,
        )
        self.enforcer = Enforcer(
            self.parts,
            topology=lambda: self.publisher.topology,
            pinned=lambda: self.pinning.pinned,
            publish=self.publisher.publish,
        )
        self.reloads = ReloadCoalescer(self.loop, clock, self.log, self.reload)

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
            config = load_config(self.host, self.config_path)
            self._set_config(config)
            profile = load_profile(config.profile, self.host, self.profiles_dir)
        except ConfigError as err:
            raise StartupFailed(EXIT_CONFIG, f"configuration rejected: {err}") from err
        except McpnodeError as err:
            raise StartupFailed(
                EXIT_CONFIG, f"{self.config_path}: tuning.profile: {type(err).__name__}: {err}"
            ) from err
        self._configure_logging()
        self.enforcer.configure(config, profile)
        self.log.info(
            "agent.start",
            version=__version__,
            pid=os.getpid(),
            root=self.host.root,
            config=config.file,
            profile=config.profile,
            drift_mode=config.drift_mode,
            drift_interval_s=config.drift_interval,
        )
        try:
            self.publisher.discover()
        except McpnodeError as err:
            raise StartupFailed(EXIT_AGENT_FAILED, f"discovery: {err}") from err
        try:
            self.enforcer.start()
        except LockBusy as err:
            raise StartupFailed(EXIT_AGENT_FAILED, f"the state lock: {err}") from err
        except McpnodeError as err:
            raise StartupFailed(EXIT_AGENT_FAILED, f"recovering the tuning journal: {err}") from err
        self.publisher.publish("start")
        self._start_metrics()
        self._start_sources()
        assert self.publisher.topology is not None
        self.health = AgentHealth(
            self.parts,
            interval=config.health_interval,
            nvml_events=config.nvml_events,
            publish=self.publisher.publish,
        )
        self.health.start(self.publisher.backend, self.publisher.topology)
        self.enforcer.schedule_drift()
        if config.autopin:
            self.pinning.start()
        if self.notifier.watchdog_interval is not None:
            self.timers.schedule("watchdog", 0.0, self._watchdog_tick)
        self.metrics.set_ready(True)
        self.notifier.ready(self.status_line())
        self.log.info("agent.ready", status=self.status_line())

    def _set_config(self, config: AgentConfig) -> None:
        """The configuration every part works from, from now on."""
        self.config = config
        self.enforcer.config = self.publisher.config = self.pinning.config = config

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

    def _start_sources(self) -> None:
        from mcpnode.agent.sources import InjectSource, LinkSource, SignalSource, UdevSource

        on_event = self.publisher.on_device_event
        self._add_source(SignalSource(self._on_signal))
        group = self.config.udev_source
        if group == "auto":
            group = "udev" if self.live.exists(UDEV_CONTROL) else "kernel"
        if group != "off":
            try:
                self._add_source(UdevSource(on_event, group))
            except Exception as err:  # libudev missing, EPERM on netlink: run without it
                self.log.error(
                    "udev.unavailable", group=group, error=f"{type(err).__name__}: {err}"
                )
        try:
            self._add_source(LinkSource(on_event))
        except OSError as err:
            self.log.error("netlink.unavailable", error=str(err))
        if self.inject_fd is not None:
            inject = InjectSource(self.inject_fd, on_event, self._on_bad_inject)
            self.sources.append(inject)

            def on_inject() -> None:
                inject.on_readable()
                if inject.closed:  # EOF stays readable forever: stop watching it
                    self.loop.remove_reader(inject)
                    self.log.info("inject.closed")

            self.loop.add_reader(inject, on_inject, inject.name)

    def _add_source(self, source: Source) -> None:
        self.sources.append(source)
        self.loop.add_reader(source, source.on_readable, source.name)

    # -- what the parts tell the agent ------------------------------------------------------------

    def _watchdog_tick(self) -> None:
        self.notifier.watchdog()
        interval = self.notifier.watchdog_interval
        if interval is not None:
            self.timers.schedule("watchdog", interval, self._watchdog_tick)

    def _status(self) -> None:
        self.notifier.status(self.status_line())

    def _pinned_more(self) -> None:
        self._status()
        self.enforcer.write_state()

    def _observed_xids(self) -> tuple[XidEvent, ...]:
        return self.health.observed_xids() if self.health else ()

    def _rediscovered(self, backend: GpuBackend | None, topology: Topology) -> None:
        if self.health is not None:
            self.health.restart(backend, topology)

    def _on_bad_inject(self, why: str) -> None:
        self.log.warning("inject.bad-event", error=why)

    def _on_signal(self, signum: int) -> None:
        import signal

        self.metrics.count_event("signal")
        if signum == signal.SIGHUP:
            self.reloads.request()
        elif signum in (signal.SIGTERM, signal.SIGINT):
            self.stop(signal.Signals(signum).name)

    # -- reload and stop --------------------------------------------------------------------------

    def reload(self) -> bool:
        """Re-read config and profile; apply the difference. A bad config keeps the old one."""
        self.notifier.reloading()
        old = self.config
        try:
            config, profile = read_config_bounded(self.host, self.config_path, self.profiles_dir)
        except Exception as err:  # a bomb, RecursionError, a timeout: never fatal, never kept
            self.metrics.count_config_reload("rejected")
            detail = " ".join(f"{type(err).__name__}: {err}".split())[:500]
            self.log.error("config.rejected", error=detail, kept=old.file, profile=old.profile)
            self.notifier.ready(self.status_line())
            return False
        self._set_config(config)
        self._configure_logging()
        if self.health is not None:
            self.health.interval = config.health_interval
        self.enforcer.reconfigure(config, profile)
        if config.metrics_listen != old.metrics_listen:
            if self.server is not None:
                self.server.close()
                self.server = None
            self._start_metrics()
        self.pinning.reconfigure(old)
        self.enforcer.schedule_drift()
        self.enforcer.write_state()
        self.publisher.reconfigure(old)
        self.publisher.publish("reload")
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

    def stop(self, why: str) -> None:
        self.notifier.stopping(f"stopping ({why})")
        self.log.info("agent.stopping", signal=why, rollback=self.config.rollback)
        if not self.enforcer.stop():
            self.exit_code = EXIT_AGENT_FAILED
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
        self.publisher.close_backend()
        self.enforcer.close()
        self.publisher.remove_exports()
        self.metrics.set_ready(False)
        self.notifier.close()
        self.loop.close()

    # -- status -----------------------------------------------------------------------------------

    def status_line(self) -> str:
        topo = self.publisher.topology
        gpus = len(topo.gpus) if topo else 0
        nics = len(topo.nics) if topo else 0
        return (
            f"{self.enforcer.summary()}; {gpus} GPU(s), {nics} NIC(s); "
            f"pinned {self.pinning.pinned}; drift {self.config.drift_mode} every "
            f"{self.config.drift_interval:g}s"
        )
