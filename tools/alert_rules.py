"""The Prometheus alert rules in deploy/prometheus/, generated from the one source below.

`python3 -m tools.alert_rules` writes both files; `--check` exits 1 when either differs from
what it would write (tests/deploy/test_alert_rules.py runs the same comparison):
- `mcpnode.rules.yml`: a plain rule file for Prometheus' `rule_files` (and `promtool`),
- `prometheusrule.yaml`: the same groups as a `PrometheusRule` for the Prometheus Operator
  (monitoring.coreos.com/v1), in the `mcpnode` namespace of deploy/kubernetes/.

Every rule uses only metric names the agent exports (mcpnode/agent/metrics.py; docs/exporters.md
lists them) and `up`, which Prometheus itself writes for every scrape. The XID classes are the
audit's own (mcpnode/audit/xid_policy.py, the default `nvidia` policy over the Xid Catalog in
mcpnode/audit/xid_catalog.py): FAIL-class XIDs page, WARN-class XIDs (and XIDs the catalogue
does not list) open a ticket, INFO-class XIDs alert on nothing. A site that set another policy
(`[audit.xid]`) regenerates the rules or edits the regular expressions.

Every alert has a `for:`, a `severity` label (`page` or `ticket`), a summary naming the node
(`instance`, the scraped address: relabel it to the node name in the scrape configuration)
and, where the metric has one, the GPU, NVSwitch, port or key, and a `runbook` annotation: the
first thing to run on the node.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

from mcpnode.audit.xid_catalog import CATALOG, lookup
from mcpnode.audit.xid_policy import DEFAULT, decide

ROOT = Path(__file__).resolve().parent.parent
OUT_DIR = ROOT / "deploy" / "prometheus"
RULES_FILE = "mcpnode.rules.yml"
OPERATOR_FILE = "prometheusrule.yaml"
NAMESPACE = "mcpnode"  # deploy/kubernetes/namespace.yaml

# The window a counter's rise is looked for in. A counter series the agent creates at its first
# event (an XID's {gpu,xid}, a port's flap) has no earlier sample for increase() to compare
# with, so `rising` also takes a series that did not exist WINDOW ago.
WINDOW = "10m"
# DCGM's PCIe replay limit: DCGM_LIMIT_MAX_PCIREPLAY_RATE, "8 replays per minute is the maximum
# recommended by RM" (the audit's gpu.pcie.replay uses the same, mcpnode/audit/gpu_health.py).
PCIE_REPLAYS_PER_MINUTE = 8


def xid_classes() -> dict[str, list[int]]:
    """The catalogued XIDs per status under the audit's default policy, by the catalogue's
    listed immediate action. Xid 154 and the NVLink 5 Xids 144-150 carry their action in the
    message, which the metric does not keep: they are classed by the catalogue's row here, and
    the audit (hence mcpnode_gpu_unhealthy) decides on the message."""
    out: dict[str, list[int]] = {"FAIL": [], "WARN": [], "INFO": []}
    for xid in sorted(CATALOG):
        info = lookup(xid)
        if info.unused:
            continue  # not raised by any GPU the catalogue covers: left to the WARN default
        out[decide(DEFAULT, xid, info.action).status].append(xid)
    return out


def _alternation(numbers: list[int]) -> str:
    return "|".join(str(n) for n in numbers)


def rising(selector: str, window: str = WINDOW) -> str:
    """A counter that rose within `window`, or whose series appeared within it above 0 (the
    agent creates an XID's or a port's series at its first event; at a restart it counts the
    kernel log's backlog again, which alerts only when the series was gone for `window`)."""
    return (
        f"increase({selector}[{window}]) > 0 or ({selector} > 0 unless {selector} offset {window})"
    )


def _rule(
    name: str,
    expr: str,
    for_: str,
    severity: str,
    summary: str,
    description: str,
    runbook: str,
) -> dict[str, Any]:
    return {
        "alert": name,
        "expr": expr,
        "for": for_,
        "labels": {"severity": severity},
        "annotations": {"summary": summary, "description": description, "runbook": runbook},
    }


def groups() -> list[dict[str, Any]]:
    """The rule groups, in the order the files list them."""
    xids = xid_classes()
    fail_xids = f'mcpnode_gpu_xid_total{{xid=~"{_alternation(xids["FAIL"])}"}}'
    not_warn = _alternation(xids["FAIL"] + xids["INFO"])
    warn_xids = f'mcpnode_gpu_xid_total{{xid!~"{not_warn}"}}'
    gpu = [
        _rule(
            "McpnodeGpuXidFailClass",
            rising(fail_xids),
            "0m",
            "page",
            "GPU {{ $labels.gpu }} on {{ $labels.instance }} raised XID {{ $labels.xid }}, "
            "which NVIDIA resolves by a GPU reset or a reboot",
            "NVIDIA's Xid Catalog gives this XID an immediate action that takes the GPU out of "
            "service (RESET_GPU, RESTART_BM, ...); the audit marks the GPU unhealthy.",
            "mcpnode audit --only 'gpu.*' on the node names the XID's action; drain the node's "
            "GPU work, then reset the GPU (nvidia-smi -r -i <gpu>) or reboot.",
        ),
        _rule(
            "McpnodeGpuXidWarnClass",
            rising(warn_xids),
            "0m",
            "ticket",
            "GPU {{ $labels.gpu }} on {{ $labels.instance }} raised XID {{ $labels.xid }}",
            "An XID whose immediate action is an application restart, a support case, or none "
            "given (or an XID the catalogue does not list, `other`): not a reset, but worth a "
            "look if it recurs.",
            "mcpnode audit --only 'gpu.xid' on the node shows the log line and the process; "
            "journalctl -k | grep -i xid for the context.",
        ),
        _rule(
            "McpnodeGpuUnhealthy",
            "mcpnode_gpu_unhealthy == 1",
            "5m",
            "page",
            "GPU {{ $labels.gpu }} on {{ $labels.instance }} is unhealthy: a check of the "
            "agent's audit FAILed for it",
            "The last audit inside the agent's publish FAILed a finding about this GPU (an XID, "
            "a fatal AER, NVLink errors, hardware slowdown, a pending row remap ...). The NFD "
            "label mcpnode.io/gpu-unhealthy-count keeps new pods off the node.",
            "mcpnode audit --status FAIL on the node lists the failed findings with remedies.",
        ),
        _rule(
            "McpnodeGpuNvlinkErrorsRising",
            'delta(mcpnode_gpu_nvlink_errors{counter=~"replay|recovery"}[1h]) > 0',
            "0m",
            "ticket",
            "NVLink {{ $labels.counter }} errors rose on GPU {{ $labels.gpu }} on "
            "{{ $labels.instance }}",
            "DCGM's NVLink health watch fails a GPU on any replay or recovery error; NVML's "
            "counters are read at the agent's discovery (start, rediscovery).",
            "nvidia-smi nvlink -e -i <gpu> shows the counters per link; "
            "mcpnode audit --only 'gpu.nvlink*' judges them.",
        ),
        _rule(
            "McpnodeGpuNvlinkCrcErrorsRising",
            'delta(mcpnode_gpu_nvlink_errors{counter=~"crc_flit|crc_data"}[1h]) > 100',
            "0m",
            "ticket",
            "NVLink {{ $labels.counter }} errors rose by over 100 in an hour on GPU "
            "{{ $labels.gpu }} on {{ $labels.instance }}",
            "CRC errors are corrected by a replay; a hundred in an hour is a link degrading.",
            "nvidia-smi nvlink -e -i <gpu> shows which link; reseat or replace at the next "
            "maintenance if it keeps rising.",
        ),
        _rule(
            "McpnodeGpuPcieReplaysHigh",
            f"delta(mcpnode_gpu_pcie_replays[1h]) > {PCIE_REPLAYS_PER_MINUTE} * 60",
            "0m",
            "ticket",
            "GPU {{ $labels.gpu }} on {{ $labels.instance }} replays PCIe transfers faster "
            f"than {PCIE_REPLAYS_PER_MINUTE} a minute",
            f"Above DCGM's limit of {PCIE_REPLAYS_PER_MINUTE} PCIe replays per minute "
            "(DCGM_LIMIT_MAX_PCIREPLAY_RATE): the link is retrying.",
            "mcpnode audit --only 'gpu.pcie.*' --only 'pcie.*' on the node; lspci -vvv -s <gpu> "
            "for the link's AER status.",
        ),
        _rule(
            "McpnodeNvswitchSxid",
            rising("mcpnode_nvswitch_sxid_total"),
            "0m",
            "ticket",
            "NVSwitch {{ $labels.switch }} on {{ $labels.instance }} raised SXID "
            "{{ $labels.sxid }}",
            "The NVSwitch driver logged an SXID.",
            "journalctl -k | grep -i sxid on the node; mcpnode audit --only 'gpu.sxid'.",
        ),
        _rule(
            "McpnodeIbLinkFlapping",
            rising("mcpnode_ib_link_flaps_total", "1h"),
            "0m",
            "ticket",
            "InfiniBand/RoCE port {{ $labels.port }} on {{ $labels.instance }} went down and "
            "up within the last hour",
            "The port's counters/link_downed rose (Azure NHC's check_ib_link_flapping works from "
            "the same signal).",
            "ibstat and the switch port's logs; mcpnode audit --only 'ib.*' on the node.",
        ),
    ]
    tuning = [
        _rule(
            "McpnodeTuningDrift",
            "mcpnode_tuning_drift_keys > 0",
            "15m",
            "ticket",
            "{{ $value }} tuning keys on {{ $labels.instance }} differ from the applied profile",
            "The agent writes drifted keys back within seconds: drift that lasts means "
            "remediation is off, contested, or failing.",
            "mcpnode verify on the node names the keys; mcpnode apply --dry-run shows the plan.",
        ),
        _rule(
            "McpnodeTuningContested",
            "mcpnode_drift_given_up == 1",
            "5m",
            "ticket",
            "The agent on {{ $labels.instance }} stopped writing back {{ $labels.key }}: "
            "something else keeps changing it",
            "Anti-flap: the key drifted back after each remediation, so another writer "
            "(a sysctl.d file, tuned, a container) owns it.",
            "mcpnode verify on the node; grep -r {{ $labels.key }} /etc/sysctl.d /usr/lib/sysctl.d",
        ),
        _rule(
            "McpnodeTuningComplianceUnknown",
            "mcpnode_tuning_compliance_known == 0",
            "30m",
            "ticket",
            "Tuning compliance on {{ $labels.instance }} is unknown",
            "No active profile, a key that could not be read, or enforcement paused after a "
            "rollback: unknown is never compliant.",
            "mcpnode profiles active and mcpnode verify on the node say which.",
        ),
        _rule(
            "McpnodeGpuProcessMisplaced",
            'mcpnode_gpu_processes{cpus=~"node|off-node"} > 0',
            "15m",
            "ticket",
            "Processes using GPU {{ $labels.gpu }} on {{ $labels.instance }} run outside its "
            "CPU slice ({{ $labels.cpus }}: {{ $value }})",
            "The agent's auto-pin scan found processes using the GPU whose CPUs are not the "
            "GPU's exclusive slice: `node` shares cores with housekeeping or another GPU's "
            "process, `off-node` crosses the socket interconnect.",
            "mcpnode ps on the node names the processes and why; mcpnode pin PID --gpu N moves "
            "one, or add an [[autopin.rule]] that matches it.",
        ),
        _rule(
            "McpnodeAuditFail",
            'mcpnode_audit_findings{status="FAIL"} > 0',
            "15m",
            "ticket",
            "The audit on {{ $labels.instance }} has {{ $value }} FAILed findings",
            "The agent's (or the textfile's) last audit FAILed at least one check.",
            "mcpnode audit --status FAIL on the node lists them with their remedies.",
        ),
    ]
    agent = [
        _rule(
            "McpnodeAgentDown",
            'up{job=~".*mcpnode.*"} == 0',
            "5m",
            "page",
            "The mcpnode agent on {{ $labels.instance }} does not answer scrapes",
            "The endpoint is served from the agent's one event loop: no answer means the agent "
            "is down or its loop is blocked, and nothing keeps the node's tuning, manifest or "
            "labels current.",
            "systemctl status mcpnode and journalctl -u mcpnode on the node.",
        ),
        _rule(
            "McpnodeAgentNotReady",
            "mcpnode_ready == 0",
            "10m",
            "ticket",
            "The mcpnode agent on {{ $labels.instance }} has not applied its profile",
            "mcpnode_ready is 0 from start until the first apply and publish.",
            "journalctl -u mcpnode on the node shows where the start stopped.",
        ),
        _rule(
            "McpnodePublishFailing",
            'mcpnode_publish_last_result{result="failed"} == 1',
            "10m",
            "ticket",
            "The mcpnode agent on {{ $labels.instance }} cannot publish its manifest or "
            "exporter files",
            "The last publish failed to build, or to write the manifest or an exporter file: "
            "launchers and schedulers read stale placement and labels.",
            "journalctl -u mcpnode | grep -e manifest. -e export. on the node names the file.",
        ),
        _rule(
            "McpnodeConfigReloadRejected",
            rising('mcpnode_config_reload_total{result="rejected"}', "15m"),
            "0m",
            "ticket",
            "The mcpnode agent on {{ $labels.instance }} rejected a configuration reload",
            "A SIGHUP found a configuration (or profile) it cannot use; the agent runs on with "
            "the previous one.",
            "mcpnode config check on the node names the file and field.",
        ),
        _rule(
            "McpnodeNfdLabelsExpiring",
            "clamp_min(mcpnode_nfd_expiry_timestamp_seconds - time(), 0) < "
            "(mcpnode_nfd_expiry_timestamp_seconds - mcpnode_nfd_written_timestamp_seconds) / 3",
            "1m",
            "ticket",
            "The NFD labels of {{ $labels.instance }} expire in {{ $value | humanizeDuration }} "
            "(0s: expired)",
            "The agent rewrites the feature file every third of its expiry, so at least two "
            "thirds are always left; less means rewrites failed, and NFD drops the node's "
            "mcpnode.io labels when the expiry passes.",
            "journalctl -u mcpnode | grep export.failed on the node; check the feature file's "
            "directory is writable.",
        ),
    ]
    return [
        {"name": "mcpnode.gpu", "rules": gpu},
        {"name": "mcpnode.tuning", "rules": tuning},
        {"name": "mcpnode.agent", "rules": agent},
    ]


HEADER = "# Generated by `python3 -m tools.alert_rules` from tools/alert_rules.py: edit that.\n"


def _dump(doc: dict[str, Any]) -> str:
    return HEADER + yaml.safe_dump(doc, sort_keys=False, width=1000, allow_unicode=True)


def rendered() -> dict[str, str]:
    """File name -> content, for both files."""
    spec = {"groups": groups()}
    operator = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "mcpnode",
            "namespace": NAMESPACE,
            "labels": {"app.kubernetes.io/name": "mcpnode"},
        },
        "spec": spec,
    }
    return {RULES_FILE: _dump(spec), OPERATOR_FILE: _dump(operator)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m tools.alert_rules", description=__doc__)
    parser.add_argument("--check", action="store_true", help="exit 1 if a file is out of date")
    args = parser.parse_args(argv)
    stale = []
    for name, text in rendered().items():
        path = OUT_DIR / name
        if args.check:
            if not path.is_file() or path.read_text(encoding="utf-8") != text:
                stale.append(name)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    if stale:
        print(f"out of date, run python3 -m tools.alert_rules: {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
