"""deploy/kubernetes/: every manifest validates against the Kubernetes OpenAPI schemas, offline
(kubernetes-validate bundles them), strictly (an unknown or misspelt field fails); the
kustomization lists exactly the files there; and the DaemonSet agrees with the code: the
ConfigMap is a configuration the agent accepts, the probes and ports follow its metrics
address, every file the agent writes is on a writable host mount, every file the kubelet
audit reads is mounted, and the container's arguments parse as the CLI's `agent` command."""

from __future__ import annotations

import copy
from pathlib import Path, PurePosixPath
from typing import Any

import kubernetes_validate
import pytest
import yaml

from mcpnode.agent.config import parse_config, split_listen
from mcpnode.audit import kubelet
from tests.deploy.test_systemd_units import agent_write_paths

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
# The oldest Kubernetes release still in wide use whose schemas are bundled, and the newest.
VERSIONS = ("1.29.0", kubernetes_validate.latest_version())


def documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def manifests() -> list[Path]:
    return sorted(p for p in DEPLOY.glob("*.yaml") if p.name != "kustomization.yaml")


def resource(kind: str) -> dict[str, Any]:
    for path in manifests():
        for doc in documents(path):
            if doc["kind"] == kind:
                return doc
    raise AssertionError(f"no {kind} in {DEPLOY}")


def pod_spec() -> dict[str, Any]:
    spec: dict[str, Any] = resource("DaemonSet")["spec"]["template"]["spec"]
    return spec


def agent_container() -> dict[str, Any]:
    [container] = pod_spec()["containers"]
    return dict(container)


def agent_config_text() -> str:
    text: str = resource("ConfigMap")["data"]["mcpnode.toml"]
    return text


def validate(doc: dict[str, Any], version: str) -> None:
    kubernetes_validate.validate(doc, version, strict=True)


# -- schemas ------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("path", manifests(), ids=lambda p: p.name)
def test_manifest_validates(path: Path, version: str) -> None:
    docs = documents(path)
    assert docs, f"{path.name}: no resource"
    for doc in docs:
        validate(doc, version)


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (lambda d: d["spec"]["template"]["spec"].__setitem__("hostNetwork", "yes"), "type"),
        (lambda d: d["spec"]["template"]["spec"].__setitem__("hostNetwrok", True), "misspelt"),
        (lambda d: d["spec"]["template"]["spec"]["containers"][0].pop("name"), "required"),
        (lambda d: d["spec"].pop("selector"), "required"),
        (
            lambda d: d["spec"]["template"]["spec"]["volumes"][1]["hostPath"].__setitem__(
                "path", 7
            ),
            "type",
        ),
    ],
    ids=["bool-as-string", "misspelt-field", "container-without-name", "no-selector", "int-path"],
)
def test_a_broken_daemonset_fails(change: Any, why: str) -> None:
    """The validator rejects what the API server would (so the test above can fail)."""
    doc = copy.deepcopy(resource("DaemonSet"))
    change(doc)
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(doc, VERSIONS[-1])


def test_kustomization_lists_every_manifest() -> None:
    kust = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    assert kust["kind"] == "Kustomization"
    assert sorted(kust["resources"]) == [p.name for p in manifests()]
    assert kust["namespace"] == resource("Namespace")["metadata"]["name"]
    image = agent_container()["image"].split(":")[0]
    assert [i["name"] for i in kust["images"]] == [image]


# -- agreement with the code -----------------------------------------------------------------


def test_configmap_is_a_configuration_the_agent_accepts() -> None:
    """The real parser (what `mcpnode config check` runs); an error raises ConfigError."""
    config = parse_config(agent_config_text(), "configmap.yaml:mcpnode.toml")
    assert "nfd" in config.export_kinds
    assert config.metrics_listen is not None and config.metrics_listen.startswith("0.0.0.0:")


def test_ports_and_probes_follow_the_metrics_address() -> None:
    config = parse_config(agent_config_text(), "configmap.yaml:mcpnode.toml")
    assert config.metrics_listen is not None
    _host, port = split_listen(config.metrics_listen)
    container = agent_container()
    [cport] = container["ports"]
    assert (cport["name"], cport["containerPort"]) == ("metrics", port)
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/metrics", "port": "metrics"}
    [sport] = resource("Service")["spec"]["ports"]
    assert (sport["port"], sport["targetPort"]) == (port, "metrics")


def test_host_namespaces_and_privilege() -> None:
    spec = pod_spec()
    assert spec["hostNetwork"] is True  # net.* sysctls are per network namespace
    assert spec["hostPID"] is True
    ctx = agent_container()["securityContext"]
    assert ctx["privileged"] is True and ctx["runAsUser"] == 0
    assert ctx["readOnlyRootFilesystem"] is True


def test_asks_the_nvidia_runtime_for_nvml_without_taking_a_gpu() -> None:
    container = agent_container()
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert env["NVIDIA_DRIVER_CAPABILITIES"] == "utility"
    assert "nvidia.com/gpu" not in str(container["resources"])


def test_scheduled_on_gpu_nodes_despite_their_taint() -> None:
    spec = pod_spec()
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    keys = {e["key"] for t in terms["nodeSelectorTerms"] for e in t["matchExpressions"]}
    assert keys == {"feature.node.kubernetes.io/pci-10de.present", "nvidia.com/gpu.present"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec[
        "tolerations"
    ]
    assert spec["priorityClassName"] == "system-node-critical"


def mounts() -> dict[str, bool]:
    """mountPath -> read-only, each backed by a hostPath or ConfigMap volume of the pod."""
    volumes = {v["name"]: v for v in pod_spec()["volumes"]}
    out = {}
    for m in agent_container()["volumeMounts"]:
        assert m["name"] in volumes, f"mount {m['name']} has no volume"
        out[m["mountPath"]] = bool(m.get("readOnly", False))
    return out


def covering(path: str) -> tuple[str, bool] | None:
    best = None
    for mount, ro in mounts().items():
        if PurePosixPath(path).is_relative_to(mount) and (
            best is None or len(mount) > len(best[0])
        ):
            best = (mount, ro)
    return best


def test_every_file_the_agent_writes_is_on_a_writable_host_mount() -> None:
    config = parse_config(agent_config_text(), "configmap.yaml:mcpnode.toml")
    enabled = {f'[export] kinds = ["{k}"]' for k in config.export_kinds}
    for path, why in agent_write_paths().items():
        if why.startswith("[export]") and why not in enabled:
            continue  # that exporter is off in the ConfigMap
        got = covering(path)
        assert got is not None, f"{path} ({why}) is not on a host mount"
        assert got[1] is False, f"{path} ({why}) is on the read-only mount {got[0]}"


def test_every_file_the_kubelet_audit_reads_is_mounted() -> None:
    wanted = (
        kubelet.DEFAULT_CONFIG,
        kubelet.ENV_FILES[0],
        kubelet.ENV_FILES[1],
        *kubelet.UNIT_DIRS[1:],
    )
    for path in wanted:
        got = covering(path)
        assert got is not None, f"{path} is not mounted"
        assert got[1] is True, f"{path}: the audit only reads, mount {got[0]} read-only"
    # The kubelet's kubeconfig holds credentials and is never read: not mounted either.
    assert covering("/etc/kubernetes/kubelet.conf") is None


def test_container_args_parse_as_the_agent_command() -> None:
    from mcpnode.cli.main import cli

    args = agent_container()["args"]
    assert args[0] == "agent"
    cmd = cli.commands["agent"]
    ctx = cmd.make_context("agent", list(args[1:]))
    assert ctx.params["config_path"] == "/etc/mcpnode/mcpnode.toml"
    assert covering(ctx.params["config_path"]) == ("/etc/mcpnode", True)
