"""deploy/prometheus/: the alert rules are what tools/alert_rules.py generates, the plain file and
the PrometheusRule hold the same groups, every rule names only metrics the agent exports, and
Prometheus' own `promtool` accepts the file (`check rules`) and fires each alert on a synthetic
sick node and none on a healthy one (`test rules`). Without promtool (Debian's `prometheus`
package; `make test` installs it as root) the promtool tests skip with a message."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.promql import exported_names, expr_names
from tools import alert_rules

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "deploy" / "prometheus" / alert_rules.RULES_FILE
OPERATOR = REPO / "deploy" / "prometheus" / alert_rules.OPERATOR_FILE
NAMESPACE_YAML = REPO / "deploy" / "kubernetes" / "namespace.yaml"
# `make test` unpacks Debian's promtool into the venv where none is on PATH (Makefile).
PROMTOOL = shutil.which("promtool") or shutil.which("promtool", path=Path(sys.executable).parent)
NO_PROMTOOL = "promtool not installed (apt-get install prometheus): promtool rule tests skipped"

# The PrometheusRule CRD's fields (prometheus-operator, monitoring.coreos.com_prometheusrules:
# RuleGroup and Rule), and its Duration pattern.
GROUP_KEYS = {"name", "interval", "rules", "limit", "partial_response_strategy", "query_offset"}
RULE_KEYS = {"alert", "record", "expr", "for", "keep_firing_for", "labels", "annotations"}
DURATION = re.compile(r"^(0|(\d+y)?(\d+w)?(\d+d)?(\d+h)?(\d+m)?(\d+s)?(\d+ms)?)$")


def load(path: Path) -> dict[str, Any]:
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(doc, dict)
    return doc


def rules() -> list[dict[str, Any]]:
    return [r for g in load(RULES)["groups"] for r in g["rules"]]


def test_files_are_what_the_generator_writes() -> None:
    for name, text in alert_rules.rendered().items():
        assert (RULES.parent / name).read_text(encoding="utf-8") == text, (
            f"{name} is out of date: python3 -m tools.alert_rules"
        )
    assert alert_rules.main(["--check"]) == 0


def test_prometheusrule_holds_the_same_groups_and_fits_the_crd() -> None:
    operator = load(OPERATOR)
    assert operator["apiVersion"] == "monitoring.coreos.com/v1"
    assert operator["kind"] == "PrometheusRule"
    namespace = load(NAMESPACE_YAML)["metadata"]["name"]
    assert operator["metadata"]["namespace"] == namespace
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", operator["metadata"]["name"])
    assert set(operator) == {"apiVersion", "kind", "metadata", "spec"}
    assert operator["spec"] == load(RULES)
    for group in operator["spec"]["groups"]:
        assert set(group) <= GROUP_KEYS and isinstance(group["name"], str)
        for rule in group["rules"]:
            assert set(rule) <= RULE_KEYS, set(rule) - RULE_KEYS
            assert isinstance(rule["expr"], str)
            assert DURATION.match(rule["for"]), rule["for"]
            for key in ("labels", "annotations"):
                assert all(isinstance(v, str) for v in rule[key].values())


def test_the_crd_is_unknown_to_kubernetes_validate_so_the_check_above_is_the_one() -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    with pytest.raises(kubernetes_validate.SchemaNotFoundError):
        kubernetes_validate.validate(load(OPERATOR), kubernetes_validate.latest_version(), True)


def test_every_alert_has_for_severity_summary_and_runbook() -> None:
    for rule in rules():
        name = rule["alert"]
        assert "for" in rule, name
        assert rule["labels"]["severity"] in ("page", "ticket"), name
        summary = rule["annotations"]["summary"]
        assert "{{ $labels.instance }}" in summary, name
        if re.search(r"mcpnode_gpu_(?!s\b)", rule["expr"]):
            assert "{{ $labels.gpu }}" in summary, name
        assert rule["annotations"]["runbook"].strip(), name
        assert rule["annotations"]["description"].strip(), name


def test_rules_use_only_metrics_the_agent_exports() -> None:
    exported = exported_names()
    used = set()
    for rule in rules():
        names = expr_names(rule["expr"])
        assert names, rule["alert"]
        assert names <= exported, (rule["alert"], names - exported)
        used |= names
    assert "mcpnode_gpu_xid_total" in used and "mcpnode_nfd_expiry_timestamp_seconds" in used


def test_the_name_check_can_fail() -> None:
    assert expr_names('increase(mcpnode_gpu_xids_total{xid="79"}[10m]) > 0') == {
        "mcpnode_gpu_xids_total"
    }
    assert "mcpnode_gpu_xids_total" not in exported_names()


def test_docs_list_every_alert() -> None:
    doc = (REPO / "docs" / "exporters.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"`(Mcpnode[A-Za-z]+)`", doc))
    assert listed == {r["alert"] for r in rules()}


def test_xid_classes_are_the_audit_policy() -> None:
    classes = alert_rules.xid_classes()
    assert 79 in classes["FAIL"] and 48 in classes["FAIL"]  # fallen off the bus; DBE
    assert 13 in classes["WARN"] and 43 in classes["INFO"]
    assert not set(classes["FAIL"]) & set(classes["WARN"])


# -- promtool --------------------------------------------------------------------------------------

SICK, HEALTHY, DOWN = "node-a:9847", "node-b:9847", "node-c:9847"
GPU, GPU2, SWITCH = "0000:3a:00.0", "0000:18:00.0", "0000:07:00.0"
PORT, KEY = "mlx5_0/1", "vm.swappiness"


def series(instance: str, name: str, values: str, **labels: str) -> dict[str, str]:
    labels = {"instance": instance, "job": "mcpnode", **labels}
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return {"series": f"{name}{{{inner}}}", "values": values}


def healthy(instance: str) -> list[dict[str, str]]:
    """A node as it should be for 90 minutes: an old XID from before (the backlog), counters
    that stay below every threshold, drift remediated within minutes, the NFD file rewritten
    every minute with 5 minutes of expiry."""
    s = [
        series(instance, "up", "1x90"),
        series(instance, "mcpnode_ready", "0x2 1x90"),
        series(instance, "mcpnode_gpu_xid_total", "1x90", gpu=GPU2, xid="79"),
        series(instance, "mcpnode_gpu_unhealthy", "0x90", gpu=GPU),
        series(instance, "mcpnode_gpu_nvlink_errors", "0x90", gpu=GPU, counter="replay"),
        series(instance, "mcpnode_gpu_nvlink_errors", "5x90", gpu=GPU, counter="crc_flit"),
        series(instance, "mcpnode_gpu_pcie_replays", "10+1x90", gpu=GPU),
        series(instance, "mcpnode_ib_link_flaps_total", "0x90", port=PORT),
        series(instance, "mcpnode_tuning_drift_keys", "0x10 1x5 0x90"),
        series(instance, "mcpnode_drift_given_up", "0x90", key=KEY),
        series(instance, "mcpnode_tuning_compliance_known", "1x90"),
        series(instance, "mcpnode_audit_findings", "0x90", status="FAIL"),
        series(instance, "mcpnode_gpu_processes", "2x90", gpu=GPU, cpus="slice"),
        series(instance, "mcpnode_gpu_processes", "0x10 1x3 0x90", gpu=GPU, cpus="node"),
        series(instance, "mcpnode_gpu_processes", "0x90", gpu=GPU, cpus="off-node"),
        series(instance, "mcpnode_publish_last_result", "0x90", result="failed"),
        series(instance, "mcpnode_config_reload_total", "0x90", result="rejected"),
        series(instance, "mcpnode_nfd_written_timestamp_seconds", "0+60x90"),
        series(instance, "mcpnode_nfd_expiry_timestamp_seconds", "300+60x90"),
    ]
    return s


def sick() -> list[dict[str, str]]:
    """Node A goes wrong in every way at about 15 minutes in."""
    a = SICK
    return [
        series(a, "up", "1x90"),
        series(a, "mcpnode_ready", "0x90"),
        series(a, "mcpnode_gpu_xid_total", "_x15 1x60", gpu=GPU, xid="79"),
        series(a, "mcpnode_gpu_xid_total", "1x15 2x60", gpu=GPU2, xid="13"),
        series(a, "mcpnode_gpu_xid_total", "_x15 1x60", gpu=GPU2, xid="43"),
        series(a, "mcpnode_gpu_unhealthy", "0x10 1x60", gpu=GPU),
        series(a, "mcpnode_gpu_nvlink_errors", "0x10 2x60", gpu=GPU, counter="replay"),
        series(a, "mcpnode_gpu_nvlink_errors", "0x10 500x60", gpu=GPU, counter="crc_flit"),
        series(a, "mcpnode_gpu_pcie_replays", "0+30x90", gpu=GPU),
        series(a, "mcpnode_nvswitch_sxid_total", "_x15 1x60", switch=SWITCH, sxid="24007"),
        series(a, "mcpnode_ib_link_flaps_total", "0x15 1x60", port=PORT),
        series(a, "mcpnode_tuning_drift_keys", "0x2 2x90"),
        series(a, "mcpnode_drift_given_up", "0x10 1x60", key=KEY),
        series(a, "mcpnode_tuning_compliance_known", "1x2 0x90"),
        series(a, "mcpnode_audit_findings", "0x2 3x90", status="FAIL"),
        series(a, "mcpnode_gpu_processes", "0x90", gpu=GPU, cpus="node"),
        series(a, "mcpnode_gpu_processes", "0x2 1x90", gpu=GPU, cpus="off-node"),
        series(a, "mcpnode_publish_last_result", "0x5 1x90", result="failed"),
        series(a, "mcpnode_config_reload_total", "0x15 1x60", result="rejected"),
        series(a, "mcpnode_nfd_written_timestamp_seconds", "0x90"),
        series(a, "mcpnode_nfd_expiry_timestamp_seconds", "300x90"),
        series(DOWN, "up", "0x90"),
    ]


# alert -> (evaluated at, labels beyond instance/job/severity, summary as Prometheus renders it)
EXPECTED: dict[str, tuple[str, dict[str, str], str]] = {
    "McpnodeGpuXidFailClass": (
        "20m",
        {"gpu": GPU, "xid": "79"},
        f"GPU {GPU} on {SICK} raised XID 79, which NVIDIA resolves by a GPU reset or a reboot",
    ),
    "McpnodeGpuXidWarnClass": (
        "20m",
        {"gpu": GPU2, "xid": "13"},
        f"GPU {GPU2} on {SICK} raised XID 13",
    ),
    "McpnodeGpuUnhealthy": (
        "20m",
        {"gpu": GPU},
        f"GPU {GPU} on {SICK} is unhealthy: a check of the agent's audit FAILed for it",
    ),
    "McpnodeGpuNvlinkErrorsRising": (
        "20m",
        {"gpu": GPU, "counter": "replay"},
        f"NVLink replay errors rose on GPU {GPU} on {SICK}",
    ),
    "McpnodeGpuNvlinkCrcErrorsRising": (
        "20m",
        {"gpu": GPU, "counter": "crc_flit"},
        f"NVLink crc_flit errors rose by over 100 in an hour on GPU {GPU} on {SICK}",
    ),
    "McpnodeGpuPcieReplaysHigh": (
        "20m",
        {"gpu": GPU},
        f"GPU {GPU} on {SICK} replays PCIe transfers faster than 8 a minute",
    ),
    "McpnodeNvswitchSxid": (
        "20m",
        {"switch": SWITCH, "sxid": "24007"},
        f"NVSwitch {SWITCH} on {SICK} raised SXID 24007",
    ),
    "McpnodeIbLinkFlapping": (
        "20m",
        {"port": PORT},
        f"InfiniBand/RoCE port {PORT} on {SICK} went down and up within the last hour",
    ),
    "McpnodeTuningDrift": (
        "20m",
        {},
        f"2 tuning keys on {SICK} differ from the applied profile",
    ),
    "McpnodeTuningContested": (
        "20m",
        {"key": KEY},
        f"The agent on {SICK} stopped writing back {KEY}: something else keeps changing it",
    ),
    "McpnodeTuningComplianceUnknown": ("40m", {}, f"Tuning compliance on {SICK} is unknown"),
    "McpnodeGpuProcessMisplaced": (
        "20m",
        {"gpu": GPU, "cpus": "off-node"},
        f"Processes using GPU {GPU} on {SICK} run outside its CPU slice (off-node: 1)",
    ),
    "McpnodeAuditFail": ("20m", {"status": "FAIL"}, f"The audit on {SICK} has 3 FAILed findings"),
    "McpnodeAgentDown": (
        "20m",
        {},
        f"The mcpnode agent on {DOWN} does not answer scrapes",
    ),
    "McpnodeAgentNotReady": (
        "20m",
        {},
        f"The mcpnode agent on {SICK} has not applied its profile",
    ),
    "McpnodePublishFailing": (
        "20m",
        {"result": "failed"},
        f"The mcpnode agent on {SICK} cannot publish its manifest or exporter files",
    ),
    "McpnodeConfigReloadRejected": (
        "20m",
        {"result": "rejected"},
        f"The mcpnode agent on {SICK} rejected a configuration reload",
    ),
    "McpnodeNfdLabelsExpiring": (
        "20m",
        {},
        f"The NFD labels of {SICK} expire in 0s (0s: expired)",
    ),
}


def fill(template: str, labels: dict[str, str]) -> str:
    """A description or runbook as Prometheus renders it: only `{{ $labels.x }}` is used there."""
    return re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m.group(1)], template)


def promtool_tests() -> dict[str, Any]:
    by_name = {r["alert"]: r for r in rules()}
    assert set(EXPECTED) == set(by_name), set(by_name) ^ set(EXPECTED)
    names = sorted(by_name)
    sick_cases = []
    for name, (at, extra, summary) in EXPECTED.items():
        rule = by_name[name]
        instance = DOWN if name == "McpnodeAgentDown" else SICK
        labels = {"instance": instance, "job": "mcpnode", **extra, **rule["labels"]}
        ann = rule["annotations"]
        sick_cases.append(
            {
                "eval_time": at,
                "alertname": name,
                "exp_alerts": [
                    {
                        "exp_labels": labels,
                        "exp_annotations": {
                            "summary": summary,
                            "description": fill(ann["description"], labels),
                            "runbook": fill(ann["runbook"], labels),
                        },
                    }
                ],
            }
        )
    # Once things settle, the counters' alerts resolve: nothing rose in their windows.
    for name in ("McpnodeGpuXidFailClass", "McpnodeGpuXidWarnClass", "McpnodeNvswitchSxid"):
        sick_cases.append({"eval_time": "40m", "alertname": name, "exp_alerts": []})
    quiet = [
        {"eval_time": at, "alertname": name, "exp_alerts": []}
        for at in ("15m", "30m", "60m", "89m")
        for name in names
    ]
    return {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [
            {"interval": "1m", "input_series": healthy(HEALTHY), "alert_rule_test": quiet},
            {
                "interval": "1m",
                "input_series": sick() + healthy(HEALTHY),
                "alert_rule_test": sick_cases,
            },
        ],
    }


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    if PROMTOOL is None:
        pytest.skip(NO_PROMTOOL)
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=120)


def test_promtool_checks_the_rules() -> None:
    done = promtool("check", "rules", str(RULES))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(rules())} rules found" in done.stdout


def test_promtool_fires_each_alert_on_a_sick_node_and_none_on_a_healthy_one(
    tmp_path: Path,
) -> None:
    spec = tmp_path / "mcpnode.rules.test.yml"
    spec.write_text(yaml.safe_dump(promtool_tests(), sort_keys=False), encoding="utf-8")
    done = promtool("test", "rules", str(spec))
    assert done.returncode == 0, done.stdout + done.stderr


def test_promtool_test_fails_when_an_alert_is_missing(tmp_path: Path) -> None:
    tests = promtool_tests()
    case = tests["tests"][1]["alert_rule_test"][0]
    case["exp_alerts"] = []  # the XID 79 page is expected not to fire: promtool must object
    spec = tmp_path / "wrong.test.yml"
    spec.write_text(yaml.safe_dump(tests, sort_keys=False), encoding="utf-8")
    done = promtool("test", "rules", str(spec))
    assert done.returncode != 0
    assert "McpnodeGpuXidFailClass" in done.stdout + done.stderr
