"""The node_exporter textfile: parsed back with prometheus_client's own parser, series per
recorded host, nothing for unknown facts, written as prometheus_client's `generate_latest`
writes the same families, and prometheus_client never imported."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from mcpnode.placement.exporters import prom
from mcpnode.placement.exporters.inputs import AuditSummary
from tests.support import promref
from tests.support.exportcase import AUDIT, FIXTURES, placement, topology

REPO = Path(__file__).resolve().parents[2]
AUDITS = {
    "audit": AUDIT,
    "no-audit": None,
    "compliance-unknown": dataclasses.replace(AUDIT, tuning_compliant=None),
    "not-compliant": dataclasses.replace(AUDIT, tuning_compliant=False, profile='we"ird\\\np'),
    "no-profile": dataclasses.replace(AUDIT, tuning_compliant=True, profile=None),
}


def samples(fixture: str, audit: object = AUDIT) -> dict[str, list[tuple[dict[str, str], float]]]:
    text = prom.render(topology(fixture), placement(fixture), AUDIT if audit is AUDIT else None)
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            assert s.timestamp is None  # the textfile collector rejects timestamps
            out.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out


@pytest.mark.parametrize("fixture", FIXTURES)
def test_parses_and_counts_gpus(fixture: str) -> None:
    got = samples(fixture)
    n = len(topology(fixture).gpus)
    assert len(got.get("mcpnode_gpu_info", [])) == n
    assert len(got.get("mcpnode_placement_slice_cpus", [])) == n
    assert len(got.get("mcpnode_nic_info", [])) == len(topology(fixture).nics)
    assert {lb["status"] for lb, _ in got["mcpnode_audit_findings"]} == {
        "PASS",
        "WARN",
        "FAIL",
        "SKIP",
        "INFO",
    }
    assert got["mcpnode_tuning_drift_keys"] == [({}, 2.0)]


def test_hgx_series() -> None:
    got = samples("hgx-h100-8gpu-8nic")
    info = {lb["gpu"]: lb for lb, v in got["mcpnode_gpu_info"]}
    assert info["0"] == {
        "gpu": "0",
        "uuid": "GPU-70fd9812-8b04-5bc6-aadd-bfb8416c6269",
        "name": "NVIDIA H100 80GB HBM3",
        "bus_id": "0000:18:00.0",
        "numa_node": "0",
    }
    assert info["7"]["numa_node"] == "1"
    width = {(lb["gpu"], lb["kind"]): v for lb, v in got["mcpnode_gpu_pcie_link_width"]}
    assert width["0", "current"] == 16 and width["0", "max"] == 16
    gen = {(lb["gpu"], lb["kind"]): v for lb, v in got["mcpnode_gpu_pcie_link_gen"]}
    assert gen["3", "max"] == 5
    assert {v for _, v in got["mcpnode_gpu_nvlink_up"]} == {18}
    slices = {lb["gpu"]: v for lb, v in got["mcpnode_placement_slice_cpus"]}
    assert set(slices) == {str(i) for i in range(8)} and all(v > 0 for v in slices.values())
    nics = {lb["gpu"]: (lb["rdma"], lb["bucket"]) for lb, _ in got["mcpnode_placement_nic_info"]}
    assert nics["0"] == ("mlx5_0", "PIX")
    assert got["mcpnode_audit_findings"][2] == ({"status": "FAIL"}, 2.0)
    assert got["mcpnode_tuning_compliant"] == [({"profile": "throughput"}, 0.0)]


def test_l40s_idle_link_reports_gen1_current_gen4_max() -> None:
    gen = {
        (lb["gpu"], lb["kind"]): v
        for lb, v in samples("pcie-4x-l40s-2socket")["mcpnode_gpu_pcie_link_gen"]
    }
    assert gen["0", "current"] == 1 and gen["0", "max"] == 4


def test_without_audit_there_are_no_audit_series() -> None:
    got = samples("hgx-h100-8gpu-8nic", audit=None)
    for name in ("mcpnode_audit_findings", "mcpnode_tuning_drift_keys", "mcpnode_tuning_compliant"):
        assert name not in got


def test_no_gpu_host_has_no_gpu_series() -> None:
    got = samples("no-gpu-host")
    assert "mcpnode_gpu_info" not in got and "mcpnode_gpu_nvlink_up" not in got
    assert len(got["mcpnode_nic_info"]) == 2


@pytest.mark.parametrize("audit", sorted(AUDITS))
@pytest.mark.parametrize("fixture", FIXTURES)
def test_written_as_prometheus_client_writes_it(fixture: str, audit: str) -> None:
    summary: AuditSummary | None = AUDITS[audit]
    families = prom.families(topology(fixture), placement(fixture), summary)
    reference = promref.text(promref.Reference(families)).decode()
    assert prom.render(topology(fixture), placement(fixture), summary) == reference


def test_rendering_does_not_import_prometheus_client() -> None:
    # The agent writes this file: prometheus_client's package would bring its HTTP servers and
    # ssl into the agent's memory (mcpnode/codec/promtext.py).
    code = (
        "import sys; from mcpnode.placement.exporters import prom;"
        "from tests.support.exportcase import AUDIT, placement, topology;"
        "f = 'hgx-h100-8gpu-8nic'; text = prom.render(topology(f), placement(f), AUDIT);"
        "print('mcpnode_gpu_info' in text, 'prometheus_client' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO
    )
    assert out.stdout.split() == ["True", "False"]
