"""The recorded run `mcpnode.probe/v1` (probe/model.py): the committed runs are what
tools/fixturegen/probegen.py makes and read back unchanged; every bad input is one ProbeDataError
naming the file and the field."""

from __future__ import annotations

import json
from typing import Any

import pytest

from mcpnode.errors import ProbeDataError
from mcpnode.probe.model import MAX_RUN_BYTES, dumps, parse_run
from tests.support.proberoot import RUNS
from tools.fixturegen import probegen

FIXTURES = [c.fixture for c in probegen.CASES]


@pytest.mark.parametrize("fixture", FIXTURES)
def test_committed_runs_are_generated(fixture: str) -> None:
    """`python3 tools/fixturegen/probegen.py --out tests/fixtures/probe` regenerates them byte for
    byte."""
    assert (RUNS / f"{fixture}.json").read_text() == probegen.text(fixture)


@pytest.mark.parametrize("fixture", FIXTURES)
def test_round_trip(fixture: str) -> None:
    text = (RUNS / f"{fixture}.json").read_text()
    run = parse_run(text, "x.json")
    assert dumps(run) == text
    assert run.settings.samples == 5
    assert all(len(c.samples_gbps) == 5 for c in run.host_cases)


def _doc() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((RUNS / "pcie-4x-l40s-2socket.json").read_text())
    return doc


def _set(path: str, value: Any) -> dict[str, Any]:
    doc = _doc()
    *parents, last = path.split(".")
    target: Any = doc
    for p in parents:
        target = target[int(p)] if p.isdigit() else target[p]
    if value is KeyError:
        del target[last]
    elif last.isdigit():
        target[int(last)] = value
    else:
        target[last] = value
    return doc


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("schema", "mcpnode.probe/v2", "schema: mcpnode.probe/v2 is not mcpnode.probe/v1"),
        ("schema", "mcpnode.audit/v1", "schema: 'mcpnode.audit/v1' is not mcpnode.probe/v1"),
        ("schema", KeyError, "schema: None is not"),
        ("settings", KeyError, "settings: missing"),
        ("settings.samples", 0, "settings.samples: not an integer >= 1"),
        ("settings.buffer_bytes", "256M", "settings.buffer_bytes: not an integer >= 1"),
        ("settings.warmup_copies", True, "settings.warmup_copies: not an integer >= 0"),
        ("gpus.0.address", "41:00.0", "gpus[0].address: not a PCI address"),
        ("gpus.1.link_under_load", 16, "gpus[1].link_under_load: not an object"),
        ("gpus.1.link_under_load.width", -1, "gpus[1].link_under_load.width: not an integer"),
        ("gpus.2.name", 7, "gpus[2].name: not a string"),
        ("host_cases.0.direction", "up", "host_cases[0].direction: 'up' is not h2d or d2h"),
        ("host_cases.3.node", -1, "host_cases[3].node: not an integer >= 0"),
        ("host_cases.4.samples_gbps", "fast", "host_cases[4].samples_gbps: not a list"),
        ("host_cases.4.samples_gbps.2", "NaN", "host_cases[4].samples_gbps[2]: not a finite"),
        ("host_cases.4.samples_gbps.2", 0, "host_cases[4].samples_gbps[2]: not positive"),
        ("host_cases.5.latency_us", KeyError, "host_cases[5].latency_us: missing"),
        ("host_cases.5.cpus", 3, "host_cases[5].cpus: not a cpulist string"),
        ("peer_cases.0.can_access", 1, "peer_cases[0].can_access: not true or false"),
        ("peer_cases.0.dst", None, "peer_cases[0].dst: not a PCI address"),
        ("problems", "none", "problems: not a list of strings"),
        ("measured_at", 1700000000, "measured_at: not a string"),
        ("host_cases", {}, "host_cases: not a list of at most"),
    ],
)
def test_bad_fields_named(path: str, value: Any, message: str) -> None:
    text = json.dumps(_set(path, value))
    with pytest.raises(ProbeDataError) as exc:
        parse_run(text, "/mcpnode-probe.json")
    assert str(exc.value).startswith("/mcpnode-probe.json: ")
    assert message in str(exc.value)


def test_infinity_is_refused() -> None:
    """Python's json reads `Infinity`; a sample must still be finite."""
    text = (RUNS / "pcie-4x-l40s-2socket.json").read_text().replace("25.878", "Infinity", 1)
    with pytest.raises(ProbeDataError, match=r"samples_gbps\[0\]: not a finite number"):
        parse_run(text, "f")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "f: not JSON"),
        ("{", "f: not JSON"),
        ("[]", "f: (top): not an object"),
        ("[" * 100000 + "]" * 100000, "f: not JSON"),
        ('"\\ud800"', "f: (top): not an object"),
    ],
)
def test_not_a_run(text: str, message: str) -> None:
    with pytest.raises(ProbeDataError) as exc:
        parse_run(text, "f")
    assert str(exc.value).startswith(message)


def test_size_bound() -> None:
    with pytest.raises(ProbeDataError, match=f"larger than {MAX_RUN_BYTES} bytes"):
        parse_run(b" " * (MAX_RUN_BYTES + 1), "big.json")
