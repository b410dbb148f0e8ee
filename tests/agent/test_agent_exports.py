"""The agent's exporter files, in process on a copy of the HGX H100 fixture: written where
`[export] <kind>_dir` says, the NFD feature file carrying an expiry that the agent refreshes
before it passes, files of a kind turned off or moved removed at reload, and the live ones
(nfd, prom) removed when the agent stops while the hardware ones (slurm, ansible) stay.

The loop runs on a fake monotonic clock so a refresh due in 100 s is reached at once; the
expiry itself is wall-clock time (UTC), as nfd-worker compares it. The agent stopped by SIGTERM
as a real process is in test_agent_e2e.py."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from mcpnode.agent.service import Agent
from mcpnode.placement.exporters import nfd
from tests.support import auditroot
from tests.support.fixtures import RootFactory

CONFIG = """
[drift]
interval = 5
[devices]
udev_source = "off"
[metrics]
listen = ""
[export]
kinds = ["nfd", "prom", "slurm"]
prom_dir = "/srv/textfile"
nfd_expiry = 300
slurm_type = "short"
"""

NFD = "etc/kubernetes/node-feature-discovery/features.d/mcpnode"
PROM = "srv/textfile/mcpnode.prom"
SLURM = "etc/slurm/gres-mcpnode.conf"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Log:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def __getattr__(self, level: str) -> Any:
        return lambda event, **kw: self.events.append((event, kw))

    def named(self, name: str) -> list[dict[str, Any]]:
        return [kw for event, kw in self.events if event == name]


class Notifier:
    """sd_notify's surface, recording nothing: no NOTIFY_SOCKET here."""

    watchdog_interval = None

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


@pytest.fixture
def started(audit_root: RootFactory) -> Iterator[tuple[Agent, Path, Clock, Log]]:
    from mcpnode.host import Host

    root = audit_root(auditroot.HGX, files={"etc/mcpnode/mcpnode.toml": CONFIG})
    clock, log = Clock(), Log()
    agent = Agent(
        Host(root),
        Host("/"),
        "/etc/mcpnode/mcpnode.toml",
        notifier=Notifier(),  # type: ignore[arg-type]
        clock=clock,
        log=log,
    )
    agent._start()
    try:
        yield agent, root, clock, log
    finally:
        agent._close()


def expiry(root: Path) -> datetime:
    found = nfd.expiry_of((root / NFD).read_text())
    assert found is not None
    return found


def test_written_where_configured_with_an_expiry(
    started: tuple[Agent, Path, Clock, Log],
) -> None:
    agent, root, _clock, _log = started
    assert (root / PROM).is_file()
    assert not (root / "var/lib/node_exporter/textfile_collector/mcpnode.prom").exists()
    assert "Type=h100 " in (root / SLURM).read_text()  # slurm_type = "short"
    left = expiry(root) - datetime.now(timezone.utc)
    assert timedelta(seconds=290) < left <= timedelta(seconds=300)
    refresh = agent.timers["nfd-refresh"]
    assert refresh.when - agent.clock() == pytest.approx(100.0)


def test_refreshed_before_it_expires(started: tuple[Agent, Path, Clock, Log]) -> None:
    agent, root, clock, log = started
    before = (root / NFD).stat().st_ino
    labels = [ln for ln in (root / NFD).read_text().splitlines() if not ln.startswith("#")]
    clock.now += 100.0
    agent.loop.run_once(max_wait=0)
    assert (root / NFD).stat().st_ino != before  # rewritten (a rename over it)
    assert [ln for ln in (root / NFD).read_text().splitlines() if not ln.startswith("#")] == (
        labels
    )
    assert expiry(root) - datetime.now(timezone.utc) > timedelta(seconds=290)
    assert log.named("export.refreshed") == [{"kind": "nfd", "path": "/" + NFD}]
    assert agent.timers["nfd-refresh"].when - clock() == pytest.approx(100.0)  # and again


def test_a_failed_refresh_is_retried(started: tuple[Agent, Path, Clock, Log]) -> None:
    agent, root, clock, log = started
    features = root / NFD
    features.unlink()
    features.mkdir()  # the rename onto a directory fails, even for root
    clock.now += 100.0
    agent.loop.run_once(max_wait=0)
    failed = log.named("export.failed")
    assert failed and failed[-1]["kind"] == "nfd"
    assert "nfd-refresh" in agent.timers
    features.rmdir()
    clock.now += 100.0
    agent.loop.run_once(max_wait=0)
    assert expiry(root) > datetime.now(timezone.utc)


def test_reload_removes_what_is_turned_off_or_moved(
    started: tuple[Agent, Path, Clock, Log],
) -> None:
    agent, root, _clock, log = started
    (root / "etc/mcpnode/mcpnode.toml").write_text(
        CONFIG.replace('kinds = ["nfd", "prom", "slurm"]', 'kinds = ["prom", "slurm"]').replace(
            "/srv/textfile", "/srv/other"
        )
    )
    assert agent.reload() is True
    assert not (root / NFD).exists()  # turned off: its labels must not stay behind
    assert "nfd-refresh" not in agent.timers
    assert not (root / PROM).exists() and (root / "srv/other/mcpnode.prom").is_file()
    reasons = {(e["kind"], e["reason"]) for e in log.named("export.removed")}
    assert reasons == {("nfd", "disabled"), ("prom", "moved")}


def test_stop_removes_the_live_files_and_keeps_the_hardware_ones(
    started: tuple[Agent, Path, Clock, Log],
) -> None:
    agent, root, _clock, log = started
    agent._close()
    assert not (root / NFD).exists() and not (root / PROM).exists()
    assert (root / SLURM).is_file()  # slurmd reads gres lines at its own restart
    assert {e["kind"] for e in log.named("export.removed")} == {"nfd", "prom"}


def test_no_expiry_when_configured_off(audit_root: RootFactory) -> None:
    from mcpnode.host import Host

    config = CONFIG.replace("nfd_expiry = 300", "nfd_expiry = 0")
    root = audit_root(auditroot.HGX, files={"etc/mcpnode/mcpnode.toml": config})
    agent = Agent(
        Host(root),
        Host("/"),
        "/etc/mcpnode/mcpnode.toml",
        notifier=Notifier(),  # type: ignore[arg-type]
        clock=Clock(),
        log=Log(),
    )
    agent._start()
    try:
        assert nfd.expiry_of((root / NFD).read_text()) is None
        assert "nfd-refresh" not in agent.timers
    finally:
        agent._close()
