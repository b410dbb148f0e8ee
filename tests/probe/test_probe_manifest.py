"""The probe in the manifest and the fleet report: the optional `probe` section built from the
kept run (schema-valid, absent when no probe ran, an `error` for an unreadable one), and a fleet
of HGX hosts where the one with the x8 GPU, the one whose firmware names the wrong node and the
one never probed are each named under their probe property."""

from __future__ import annotations

import copy
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from mcpnode.codec.record import replace
from mcpnode.fleet.report import FleetReport
from mcpnode.host import Host
from mcpnode.placement.build import make_manifest
from mcpnode.placement.manifest import content_hash, parse_manifest
from mcpnode.probe.model import HostCase, dumps, parse_run
from mcpnode.probe.section import manifest_section
from tests.fleet.test_fleet_report import report_of, write_fleet
from tests.support import proberoot
from tests.support.schema import validate

HGX = "hgx-h100-8gpu-8nic"
L40S = "pcie-4x-l40s-2socket"
NOW = datetime(2025, 6, 1, 12, 0, 0, tzinfo=timezone.utc)
SCHEMA = json.loads((proberoot.TESTS.parent / "docs" / "manifest-schema.json").read_text())

Manifest = dict[str, Any]


def manifest(root: Path) -> Manifest:
    return make_manifest(Host(root), now=NOW, probe=manifest_section)


@pytest.fixture(scope="module")
def roots(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("probe-manifest")
    return {name: proberoot.build(base / name, name) for name in (HGX, L40S)}


def test_section_is_schema_valid_and_hashed(roots: dict[str, Path]) -> None:
    for name, root in roots.items():
        doc = manifest(root)
        assert validate(doc, SCHEMA) == [], name
        assert parse_manifest(json.dumps(doc)) == doc  # the hash covers the section
    doc = manifest(roots[L40S])
    section = doc["probe"]
    assert (section["measured_at"], section["source"], section["error"]) == (
        "2026-11-30T09:20:41+00:00",
        "/mcpnode-probe.json",
        None,
    )
    gpu2 = section["gpus"][2]
    assert (gpu2["placed_node"], gpu2["fastest_node"], gpu2["placement"], gpu2["pcie"]) == (
        1,
        0,
        "FAIL",
        "PASS",
    )
    assert gpu2["expected_gbps"] == 28.6
    assert gpu2["nodes"][0] == {
        "node": 0,
        "h2d_gbps": 26.15,
        "d2h_gbps": 26.57,
        "h2d_latency_us": 2.3,
        "d2h_latency_us": 2.29,
    }
    assert {p["link"] for p in section["peers"]} == {"PCIe"}
    assert {p["status"] for p in section["peers"]} == {None}
    hgx = manifest(roots[HGX])["probe"]
    assert {p["status"] for p in hgx["peers"]} == {"PASS"}
    assert hgx["gpus"][5]["pcie"] == "FAIL"


def test_no_probe_no_section() -> None:
    """A host where no probe ran publishes exactly what it did before the field existed."""
    root = proberoot.HOSTS / HGX
    with_hook = make_manifest(Host(root), now=NOW, probe=manifest_section)
    assert "probe" not in with_hook
    assert with_hook == make_manifest(Host(root), now=NOW)


def test_unreadable_kept_run_is_an_error_in_the_section(tmp_path: Path) -> None:
    root = proberoot.build(tmp_path / "r", L40S, "{not json")
    section = manifest(root)["probe"]
    assert section["measured_at"] is None and section["gpus"] == []
    assert section["error"].startswith("/mcpnode-probe.json: not JSON")
    assert validate(manifest(root), SCHEMA) == []


def test_schema_refuses_an_unknown_probe_field(roots: dict[str, Path]) -> None:
    doc = copy.deepcopy(manifest(roots[L40S]))
    doc["probe"]["gpus"][0]["h2d"] = 1.0
    assert validate(doc, SCHEMA) == [
        "$.probe.gpus[0]: Additional properties are not allowed ('h2d' was unexpected)"
    ]


# -- fleet -------------------------------------------------------------------------------------


def _healthy_hgx_run() -> str:
    """The recorded HGX run with GPU 5 trained x16 like the others."""
    run = parse_run((proberoot.RUNS / f"{HGX}.json").read_text(), HGX)
    gpu5 = run.gpus[5].address

    def mend(c: HostCase) -> HostCase:
        if c.gpu != gpu5:
            return c
        return replace(c, samples_gbps=tuple(s / 0.49 for s in c.samples_gbps))

    gpus = tuple(
        replace(g, link_under_load=replace(g.link_under_load, width=16))
        if g.address == gpu5 and g.link_under_load is not None
        else g
        for g in run.gpus
    )
    return dumps(replace(run, gpus=gpus, host_cases=tuple(mend(c) for c in run.host_cases)))


def _wrong_node_run() -> str:
    """GPU 0 (node 0 by sysfs) measured fastest from node 1: the two nodes' figures swapped."""
    run = parse_run(_healthy_hgx_run(), HGX)
    gpu0 = run.gpus[0].address
    swapped = tuple(replace(c, node=1 - c.node) if c.gpu == gpu0 else c for c in run.host_cases)
    return dumps(replace(run, host_cases=swapped))


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> FleetReport:
    base = tmp_path_factory.mktemp("probe-fleet")
    healthy = manifest(proberoot.build(base / "healthy", HGX, _healthy_hgx_run()))
    x8 = manifest(proberoot.build(base / "x8", HGX))
    wrong = manifest(proberoot.build(base / "wrong", HGX, _wrong_node_run()))
    never = make_manifest(Host(proberoot.HOSTS / HGX), now=NOW)
    docs = {f"gpu-{i:02d}": healthy for i in range(1, 7)}
    docs |= {"gpu-07": x8, "gpu-08": wrong, "gpu-09": never}
    for doc in docs.values():
        assert doc["content_hash"] == content_hash(doc)
    return report_of(write_fleet(base / "fleet", docs))


def _prop(report: FleetReport, name: str) -> Any:
    return next(p for p in report.properties if p.name == name)


def test_fleet_names_each_probe_outlier(fleet: FleetReport) -> None:
    pcie = _prop(fleet, "probe_pcie")
    assert (pcie.majority, pcie.majority_hosts) == ("0-7:PASS", 7)
    assert [(o.host, o.value) for o in pcie.outliers] == [
        ("gpu-07", "0-4:PASS,5:FAIL,6-7:PASS"),
        ("gpu-09", None),
    ]
    (gpu,) = pcie.outliers[0].gpus
    assert (gpu.index, gpu.value, gpu.fleet) == (5, "FAIL", "PASS")
    node = _prop(fleet, "probe_node")
    assert node.majority == "0-3:0,4-7:1" == _prop(fleet, "gpu_numa").majority
    assert [(o.host, o.value) for o in node.outliers] == [
        ("gpu-08", "0:1,1-3:0,4-7:1"),
        ("gpu-09", None),
    ]
    nvlink = _prop(fleet, "probe_nvlink")
    assert nvlink.majority == "0-7:PASS" and [o.host for o in nvlink.outliers] == ["gpu-09"]
    audit = _prop(fleet, "audit_failed")
    assert audit.outliers == ()  # the probe is not part of the published audit
