"""Ansible local facts: JSON with sorted keys, nulls for unknowns, the placement per GPU."""

from __future__ import annotations

import json

import pytest

from mcpnode.audit.model import AuditReport, Finding, Status
from mcpnode.placement.exporters import ansible
from mcpnode.placement.exporters.inputs import summarize
from tests.support.exportcase import AUDIT, FIXTURES, placement, topology


def keys_sorted(doc: object) -> bool:
    if isinstance(doc, dict):
        return list(doc) == sorted(doc) and all(keys_sorted(v) for v in doc.values())
    if isinstance(doc, list):
        return all(keys_sorted(v) for v in doc)
    return True


@pytest.mark.parametrize("fixture", FIXTURES)
def test_json_with_stable_key_order(fixture: str) -> None:
    text = ansible.render(topology(fixture), placement(fixture), AUDIT)
    doc = json.loads(text)
    assert keys_sorted(json.loads(text, object_pairs_hook=dict))
    assert doc["schema"] == ansible.SCHEMA
    assert doc["gpu_count"] == len(doc["gpus"]) == len(topology(fixture).gpus)
    assert text.endswith("}\n")


def test_hgx_facts() -> None:
    doc = json.loads(
        ansible.render(topology("hgx-h100-8gpu-8nic"), placement("hgx-h100-8gpu-8nic"), AUDIT)
    )
    g0 = doc["gpus"][0]
    assert g0["uuid"] == "GPU-70fd9812-8b04-5bc6-aadd-bfb8416c6269"
    assert g0["placement"]["local_cpus"] == "0-47,96-143"
    assert g0["placement"]["nics"][0]["rdma"] == "mlx5_0"
    assert g0["placement"]["env"]["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert g0["placement"]["nvlink_peers"] == [1, 2, 3, 4, 5, 6, 7]
    assert doc["audit"]["counts"]["FAIL"] == 2
    assert doc["audit"]["drift_keys"] == ["net.core.somaxconn", "vm.swappiness"]


def test_no_gpu_no_audit() -> None:
    doc = json.loads(ansible.render(topology("no-gpu-host"), placement("no-gpu-host"), None))
    assert doc["gpus"] == [] and doc["audit"] is None
    assert doc["driver_version"] is None  # unknown is null, never ""


def test_summarize_counts_and_drift() -> None:
    report = AuditReport(
        findings=(
            Finding("tuning.drift", Status.FAIL, "x", subject="vm.swappiness"),
            Finding("tuning.drift", Status.FAIL, "y", subject="net.core.somaxconn"),
            Finding("gpu.ecc", Status.PASS, "ok"),
            Finding("kernel.modules", Status.WARN, "w"),
        ),
        host="h",
        kernel="k",
        generated_at="2025-01-01T00:00:00+00:00",
        profile="base",
    )
    s = summarize(report)
    assert s.counts == (("PASS", 1), ("WARN", 1), ("FAIL", 2), ("SKIP", 0), ("INFO", 0))
    assert s.drift_keys == ("net.core.somaxconn", "vm.swappiness")
    assert s.tuning_compliant is False and s.profile == "base"


def test_summarize_compliance_unknown_when_not_checked() -> None:
    skipped = AuditReport(
        findings=(Finding("tuning.drift", Status.SKIP, "no key read"),),
        host=None,
        kernel=None,
        generated_at="t",
    )
    assert summarize(skipped).tuning_compliant is None
    passed = AuditReport(
        findings=(Finding("tuning.drift", Status.PASS, "3 keys match"),),
        host=None,
        kernel=None,
        generated_at="t",
    )
    assert summarize(passed).tuning_compliant is True
