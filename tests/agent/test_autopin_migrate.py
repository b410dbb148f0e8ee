"""Auto-pin moves memory too when `[autopin] migrate` (or the rule's own `migrate`) says so:
migrate_pages(2) after the pin, numa_maps before and after in the `pin.migrated` event. Real
child processes on this machine (one NUMA node: the move is node 0 to itself, the path and the
report are what is checked); the config parser's new keys."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from structlog.testing import CapturingLogger

from mcpnode.agent.autopin import AutoPinner
from mcpnode.agent.config import ConfigError, PinRule, parse_config
from mcpnode.host import Host
from mcpnode.placement.plan import plan_placement
from mcpnode.topology.discover import discover_host
from tests.agent.test_agent_autopin import WORKER, listing, needs_machine
from tests.support import placeroot
from tests.support.pinchild import start_child, stop


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return placeroot.build(tmp_path_factory.mktemp("placed"))


@needs_machine
@pytest.mark.parametrize(
    ("default", "rule_says", "migrated"),
    [(True, None, True), (False, None, False), (False, True, True), (True, False, False)],
)
def test_autopin_migrates_when_asked(
    root: Path, default: bool, rule_says: bool | None, migrated: bool
) -> None:
    topo = discover_host(Host(root))
    placement = plan_placement(topo)
    rules = (PinRule("workers", cmdline=re.compile(re.escape(WORKER) + r"\b"), migrate=rule_says),)
    worker = start_child(WORKER)
    try:
        log = CapturingLogger()
        pinner = AutoPinner(Host("/"), rules, "slice", log, migrate=default)
        result = pinner.scan(topo, placement, listing(root, [worker.pid]))
    finally:
        stop(worker)
    assert [e.pid for e in result.pinned] == [worker.pid]
    events = {c.args[0]: c.kwargs for c in log.calls}
    assert ("pin.migrated" in events) is migrated
    if migrated:
        got = events["pin.migrated"]
        assert (got["pid"], got["to_nodes"], got["not_moved_pages"]) == (worker.pid, "0", 0)
        assert got["before"]["0"] > 0 and got["after"]["0"] > 0


def test_config_migrate_keys(tmp_path: Path) -> None:
    base = '[autopin]\nenabled = true\n{top}[[autopin.rule]]\nname = "w"\nexe = "python3"\n{rule}'
    cfg = parse_config(base.format(top="migrate = true\n", rule="migrate = false\n"), "c.toml")
    assert cfg.pin_migrate is True and cfg.pin_rules[0].migrate is False
    assert parse_config(base.format(top="", rule=""), "c.toml").pin_rules[0].migrate is None
    with pytest.raises(ConfigError, match=r"autopin\.rule\[0\]\.migrate: must be true or false"):
        parse_config(base.format(top="", rule='migrate = "yes"\n'), "c.toml")
