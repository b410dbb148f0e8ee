"""The kubelet alignment area (mcpnode/audit/kubelet.py) on roots built here: a committed host
fixture copied to tmp (tests/support/auditroot.py) with a kubelet's files laid over it in kubeadm's
layout, and a manifest published by the real manifest code, so the housekeeping CPUs compared
are the ones mcpnode's placement plan reserves on that host."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from mcpnode.audit import kubelet
from mcpnode.audit.model import AuditReport, Status
from mcpnode.audit.run import run_audit
from mcpnode.host import Host
from mcpnode.placement.build import build_all, make_manifest
from mcpnode.placement.manifest import MANIFEST_PATH, dumps
from tests.support import auditroot
from tests.support.fixtures import RootFactory

HOST = auditroot.HGX  # 2 sockets with SMT: first-core housekeeping is two cores' threads
CONFIG = "var/lib/kubelet/config.yaml"
KUBEADM_DROPIN = "etc/systemd/system/kubelet.service.d/10-kubeadm.conf"

# kubeadm's drop-in as `kubeadm init/join` installs it (kubernetes/release, 10-kubeadm.conf),
# with two long lines continued by a backslash (systemd joins them, so does the collector).
KUBEADM_UNIT = """\
# Note: This dropin only works with kubeadm and kubelet v1.11+
[Service]
Environment="KUBELET_KUBECONFIG_ARGS=\\
 --bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf \\
 --kubeconfig=/etc/kubernetes/kubelet.conf"
Environment="KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml"
EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env
EnvironmentFile=-/etc/default/kubelet
ExecStart=
ExecStart=/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS \\
 $KUBELET_EXTRA_ARGS
"""
KUBEADM_FLAGS = (
    'KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=unix:///var/run/containerd/'
    'containerd.sock --pod-infra-container-image=registry.k8s.io/pause:3.9"\n'
)
HEAD = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"


def aligned_config(reserved: str) -> str:
    return HEAD + (
        "cgroupDriver: systemd\n"
        "cpuManagerPolicy: static\n"
        "cpuManagerPolicyOptions:\n"
        '  full-pcpus-only: "true"\n'
        "topologyManagerPolicy: single-numa-node\n"
        "topologyManagerScope: pod\n"
        f'reservedSystemCPUs: "{reserved}"\n'
        "memoryManagerPolicy: Static\n"
        "reservedMemory:\n"
        "  - numaNode: 0\n"
        "    limits: {memory: 1100Mi}\n"
    )


# One copy of the fixture per module (copying the HGX tree is most of a test's cost); each
# test starts from it with every kubelet-related tree and the manifest removed, then writes
# its own files. Discovery and the manifest are the real ones.
_BASE: dict[str, Any] = {}
RESET = (
    "var/lib/kubelet",
    "etc/systemd/system",
    "usr/lib/systemd",
    "lib/systemd",
    "etc/default",
    "etc/sysconfig",
    "etc/kubernetes",
    "run/mcpnode",
)


@pytest.fixture(scope="module", autouse=True)
def _base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    root = auditroot.build(tmp_path_factory.mktemp("kubelet-node"), HOST)
    with Host(root) as h:
        text = dumps(make_manifest(h))
    _BASE.update(root=root, manifest=text, hk=json.loads(text)["placement"]["housekeeping_cpus"])
    yield
    _BASE.clear()


def node(_tmp: Path, files: dict[str, str | None], *, manifest: bool = True) -> Path:
    """The HGX fixture with the kubelet's files; the manifest published as the agent would."""
    root: Path = _BASE["root"]
    for rel in RESET:
        shutil.rmtree(root / rel, ignore_errors=True)
    for rel, text in files.items():
        if text is not None:
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
    if manifest:
        (root / "run/mcpnode").mkdir(parents=True)
        (root / MANIFEST_PATH.lstrip("/")).write_text(_BASE["manifest"])
    return root


def housekeeping(_tmp: Path) -> str:
    """What mcpnode's placement reserves on HOST (from the real plan, not hard-coded)."""
    cpus: str = _BASE["hk"]
    assert cpus  # first-core on a host with CPUs reserves something
    return cpus


def audit(root: Path) -> AuditReport:
    with Host(root) as h:
        return run_audit(h, only=["kubelet"])


def by_id(report: AuditReport) -> dict[str, Any]:
    assert report.problems == ()  # the area never crashes into a SKIP kubelet.audit
    return {f.id: f for f in report.findings}


def status(report: AuditReport) -> dict[str, str]:
    return {fid: f.status.value for fid, f in by_id(report).items()}


def kubeadm(config: str | None, **extra: str | None) -> dict[str, str | None]:
    files: dict[str, str | None] = {
        KUBEADM_DROPIN: KUBEADM_UNIT,
        "var/lib/kubelet/kubeadm-flags.env": KUBEADM_FLAGS,
        "etc/default/kubelet": "KUBELET_EXTRA_ARGS=\n",
    }
    if config is not None:
        files[CONFIG] = config
    files.update(extra)
    return files


# -- applicability ----------------------------------------------------------------------------


def test_no_kubelet_is_one_skip_naming_where_it_looked(tmp_path: Path) -> None:
    report = audit(node(tmp_path, {}, manifest=False))
    [f] = report.findings
    assert (f.id, f.status) == ("kubelet.config", Status.SKIP)
    assert "not a Kubernetes node" in f.summary
    assert "/var/lib/kubelet/config.yaml" in f.evidence[0].value


def test_aligned_kubeadm_node_passes_everything(tmp_path: Path) -> None:
    hk = housekeeping(tmp_path)
    report = audit(node(tmp_path, kubeadm(aligned_config(hk))))
    assert status(report) == {
        "kubelet.config": "PASS",
        "kubelet.cpu-manager": "PASS",
        "kubelet.cpu-manager.options": "PASS",
        "kubelet.reserved-cpus": "PASS",
        "kubelet.topology-manager": "PASS",
        "kubelet.topology-manager.scope": "PASS",
        "kubelet.memory-manager": "PASS",
    }
    f = by_id(report)["kubelet.reserved-cpus"]
    assert hk in f.summary
    assert any("manifest.json" in e.value for e in f.evidence)
    assert "/var/lib/kubelet/config.yaml" in by_id(report)["kubelet.config"].summary


def test_report_matches_the_audit_schema(tmp_path: Path) -> None:
    from mcpnode.cli import render_audit
    from tests.support.schema import validate

    schema = json.loads((auditroot.TESTS.parent / "docs" / "audit-schema.json").read_text())
    report = audit(node(tmp_path, kubeadm(aligned_config("0-3"))))
    doc = render_audit.report_json(report)
    assert validate(doc, schema) == []
    assert {f["area"] for f in doc["findings"]} == {"kubelet"}


def test_defaults_warn_and_say_how(tmp_path: Path) -> None:
    """An empty KubeletConfiguration: every manager at its default."""
    report = audit(node(tmp_path, kubeadm(HEAD)))
    assert status(report) == {
        "kubelet.config": "PASS",
        "kubelet.cpu-manager": "WARN",
        "kubelet.reserved-cpus": "SKIP",
        "kubelet.topology-manager": "WARN",
        "kubelet.topology-manager.scope": "SKIP",
        "kubelet.memory-manager": "INFO",
    }
    cpu = by_id(report)["kubelet.cpu-manager"]
    assert cpu.evidence[0].source == "kubelet default"
    assert "cpuManagerPolicy: static" in (cpu.remedy or "")
    assert housekeeping(tmp_path) in (cpu.remedy or "")
    assert "cpu_manager_state" in (cpu.remedy or "")


def test_a_node_without_gpus_has_nothing_to_align(audit_root: RootFactory) -> None:
    root = audit_root(auditroot.NO_GPU, files=kubeadm(HEAD))
    report = audit(root)
    assert status(report) == {
        "kubelet.config": "PASS",
        "kubelet.cpu-manager": "SKIP",
        "kubelet.reserved-cpus": "SKIP",
        "kubelet.topology-manager": "SKIP",
        "kubelet.memory-manager": "SKIP",
    }
    cpu = by_id(report)["kubelet.cpu-manager"]
    assert "no GPU on this node" in cpu.summary
    assert cpu.evidence[0].value == "cpuManagerPolicy: none"


# -- the reserved CPUs --------------------------------------------------------------------------


def test_reserved_cpus_differ_names_both_sides(tmp_path: Path) -> None:
    hk = housekeeping(tmp_path)
    report = audit(node(tmp_path, kubeadm(aligned_config("0-3"))))
    f = by_id(report)["kubelet.reserved-cpus"]
    assert f.status is Status.FAIL
    assert "kubelet reserves 0-3" in f.summary and f"mcpnode keeps {hk}" in f.summary
    assert "exclusively to pods" in f.summary or "never gives them to pods" in f.summary
    assert f'reservedSystemCPUs: "{hk}"' in (f.remedy or "")
    assert 'housekeeping = "0-3"' in (f.remedy or "")


def test_static_without_reserved_cpus_fails(tmp_path: Path) -> None:
    config = HEAD + "cpuManagerPolicy: static\nkubeReserved: {cpu: 500m}\n"
    f = by_id(audit(node(tmp_path, kubeadm(config))))["kubelet.reserved-cpus"]
    assert f.status is Status.FAIL
    assert "picks its reserved CPUs itself" in f.summary


def test_housekeeping_unknown_is_a_fail_not_a_pass(tmp_path: Path) -> None:
    """No manifest and no plan passed: could not verify."""
    hk = housekeeping(tmp_path)
    f = by_id(audit(node(tmp_path, kubeadm(aligned_config(hk)), manifest=False)))[
        "kubelet.reserved-cpus"
    ]
    assert f.status is Status.FAIL
    assert "unknown" in f.summary and "no manifest published" in f.summary


def test_manifest_build_compares_with_the_plan_it_publishes(tmp_path: Path) -> None:
    """The audit inside the manifest takes the housekeeping from the plan (AuditContext), so
    the first publish on a node is right without an earlier manifest."""
    hk = housekeeping(tmp_path)
    root = node(tmp_path, kubeadm(aligned_config(hk)), manifest=False)
    with Host(root) as h:
        built = build_all(h)
    [f] = [f for f in built.audit.findings if f.id == "kubelet.reserved-cpus"]
    assert f.status is Status.PASS
    assert any("placement plan" in e.value for e in f.evidence)
    with Host(root) as h:
        built = build_all(h, housekeeping="none")
    [f] = [f for f in built.audit.findings if f.id == "kubelet.reserved-cpus"]
    assert f.status is Status.FAIL and "mcpnode keeps (none)" in f.summary


def test_reserved_cpus_not_a_cpulist(tmp_path: Path) -> None:
    f = by_id(audit(node(tmp_path, kubeadm(aligned_config("0-x")))))["kubelet.reserved-cpus"]
    assert f.status is Status.FAIL
    assert "/var/lib/kubelet/config.yaml" in f.summary and "not a cpulist" in f.summary


def test_full_pcpus_only_missing_with_smt_warns(tmp_path: Path) -> None:
    hk = housekeeping(tmp_path)
    config = aligned_config(hk).replace('  full-pcpus-only: "true"\n', '  x: "y"\n')
    f = by_id(audit(node(tmp_path, kubeadm(config))))["kubelet.cpu-manager.options"]
    assert f.status is Status.WARN and "SMT" in f.summary


# -- where settings come from ----------------------------------------------------------------


def test_flags_override_the_config_file(tmp_path: Path) -> None:
    hk = housekeeping(tmp_path)
    extra = f'KUBELET_EXTRA_ARGS="--cpu-manager-policy=static --reserved-cpus {hk}"\n'
    files = kubeadm(HEAD + "cpuManagerPolicy: none\n", **{"etc/default/kubelet": extra})
    report = audit(node(tmp_path, files))
    got = by_id(report)
    assert got["kubelet.cpu-manager"].status is Status.PASS
    assert got["kubelet.reserved-cpus"].status is Status.PASS
    sources = [e.source for e in got["kubelet.cpu-manager"].evidence]
    assert sources == ["/etc/default/kubelet (KUBELET_EXTRA_ARGS: --cpu-manager-policy)"]


def test_unquoted_flag_line_keeps_every_flag(tmp_path: Path) -> None:
    """An EnvironmentFile value without quotes runs to the end of the line."""
    hk = housekeeping(tmp_path)
    extra = (
        f"KUBELET_EXTRA_ARGS=--node-ip=10.0.0.7 --cpu-manager-policy static --reserved-cpus={hk}\n"
    )
    files = kubeadm(HEAD, **{"etc/default/kubelet": extra})
    got = by_id(audit(node(tmp_path, files)))
    assert got["kubelet.cpu-manager"].status is Status.PASS
    assert got["kubelet.reserved-cpus"].status is Status.PASS


def test_config_flag_points_elsewhere(tmp_path: Path) -> None:
    hk = housekeeping(tmp_path)
    unit = KUBEADM_UNIT.replace("/var/lib/kubelet/config.yaml", "/etc/kubernetes/kubelet.yaml")
    files = kubeadm(
        None, **{KUBEADM_DROPIN: unit, "etc/kubernetes/kubelet.yaml": aligned_config(hk)}
    )
    report = audit(node(tmp_path, files))
    assert by_id(report)["kubelet.reserved-cpus"].status is Status.PASS
    assert "/etc/kubernetes/kubelet.yaml" in by_id(report)["kubelet.config"].summary


def test_config_flag_naming_a_missing_file_fails(tmp_path: Path) -> None:
    f = by_id(audit(node(tmp_path, kubeadm(None))))["kubelet.config"]
    assert f.status is Status.FAIL
    assert "/var/lib/kubelet/config.yaml" in f.summary and "absent" in f.summary


def test_config_dir_drop_ins_merge_in_name_order(tmp_path: Path) -> None:
    hk = housekeeping(tmp_path)
    extra = 'KUBELET_EXTRA_ARGS="--config-dir=/etc/kubernetes/kubelet.conf.d"\n'
    files = kubeadm(
        HEAD + "cpuManagerPolicy: none\ncpuManagerPolicyOptions: {a: b}\n",
        **{
            "etc/default/kubelet": extra,
            "etc/kubernetes/kubelet.conf.d/10-cpu.conf": HEAD
            + 'cpuManagerPolicy: static\nreservedSystemCPUs: "0"\n',
            "etc/kubernetes/kubelet.conf.d/20-cpu.conf": HEAD
            + f'reservedSystemCPUs: "{hk}"\ncpuManagerPolicyOptions: {{full-pcpus-only: "true"}}\n',
            "etc/kubernetes/kubelet.conf.d/notes.txt": "ignored: not *.conf\n",
        },
    )
    got = by_id(audit(node(tmp_path, files)))
    assert got["kubelet.cpu-manager"].status is Status.PASS
    assert got["kubelet.reserved-cpus"].status is Status.PASS
    [opts] = got["kubelet.cpu-manager.options"].evidence
    assert opts.value == "cpuManagerPolicyOptions: a=b,full-pcpus-only=true"
    assert opts.source.endswith("20-cpu.conf")


def test_kubeconfig_is_never_read(tmp_path: Path) -> None:
    """/etc/kubernetes/kubelet.conf holds credentials: it must not reach evidence or snapshots."""
    secret = "client-key-data: c2VjcmV0\n"
    root = node(tmp_path, kubeadm(HEAD, **{"etc/kubernetes/kubelet.conf": secret}))
    with Host(root) as h, h.recording() as rec:
        report = run_audit(h, only=["kubelet"])
    assert "/etc/kubernetes/kubelet.conf" not in rec.files
    assert "c2VjcmV0" not in json.dumps([str(f) for f in report.findings])


# -- bad input: one FAIL naming the file, never a traceback -----------------------------------

BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{b}: &{b} [{', '.join(['*' + a] * 9)}]\n" for a, b in zip("abcdefgh", "bcdefghi", strict=True)
)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (HEAD + BOMB, "aliases"),
        (HEAD + "x: " + "[" * 5000 + "]" * 5000 + "\n", "nest"),
        ("- just\n- a list\n", "mapping, not list"),
        ("apiVersion: v1\nkind: Pod\n", "expected KubeletConfiguration"),
        (HEAD + "cpuManagerPolicy: [static]\n", "cpuManagerPolicy: expected a str"),
        (HEAD + "cpuManagerPolicyOptions: {full-pcpus-only: true}\n", "string keys and values"),
        (HEAD + "cpuManagerPolicy: static\n  bad: indent\n", "not usable YAML"),
        (HEAD + "---\n" + HEAD, "single document"),
        (HEAD + "x: !!python/object/apply:os.system [true]\n", "constructor"),
        (HEAD + "#" * (kubelet.MAX_CONFIG_BYTES + 1) + "\n", "larger than 1048576 bytes"),
        (HEAD + "x: \x00\x01\n", "not usable YAML"),
    ],
)
def test_bad_config_is_one_fail_naming_the_file(tmp_path: Path, text: str, words: str) -> None:
    report = audit(node(tmp_path, kubeadm(text), manifest=False))
    [f] = report.findings
    assert (f.id, f.status) == ("kubelet.config", Status.FAIL)
    assert f.summary.startswith("kubelet configuration not checked: /var/lib/kubelet/config.yaml")
    assert words in f.summary
    assert "\n" not in f.summary and len(f.summary) < 300


def test_config_path_that_is_a_directory(tmp_path: Path) -> None:
    root = node(tmp_path, kubeadm(None), manifest=False)
    (root / CONFIG).mkdir(parents=True)
    [f] = audit(root).findings
    assert f.status is Status.FAIL and "unreadable" in f.summary


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("cpuManagerPolicy", "dynamic"),
        ("topologyManagerPolicy", "numa"),
        ("memoryManagerPolicy", "static"),  # the kubelet's spelling is "Static"
    ],
)
def test_unknown_policy_fails(tmp_path: Path, field: str, value: str) -> None:
    hk = housekeeping(tmp_path)
    config = HEAD + f'cpuManagerPolicy: static\nreservedSystemCPUs: "{hk}"\n{field}: {value}\n'
    report = audit(node(tmp_path, kubeadm(config)))
    failed = [f for f in report.findings if f.status is Status.FAIL]
    assert len(failed) == 1 and value in failed[0].summary


def test_memory_static_without_reserved_memory(tmp_path: Path) -> None:
    f = by_id(audit(node(tmp_path, kubeadm(HEAD + "memoryManagerPolicy: Static\n"))))[
        "kubelet.memory-manager"
    ]
    assert f.status is Status.FAIL and "reservedMemory" in f.summary


def test_unparseable_flag_file(tmp_path: Path) -> None:
    files = kubeadm(HEAD, **{"etc/default/kubelet": 'KUBELET_EXTRA_ARGS="--cpu-manager-policy\n'})
    [f] = audit(node(tmp_path, files, manifest=False)).findings
    assert f.status is Status.FAIL and "/etc/default/kubelet" in f.summary


def test_flag_without_value(tmp_path: Path) -> None:
    files = kubeadm(HEAD, **{"etc/default/kubelet": 'KUBELET_EXTRA_ARGS="--reserved-cpus"\n'})
    [f] = audit(node(tmp_path, files, manifest=False)).findings
    assert f.status is Status.FAIL and "--reserved-cpus has no value" in f.summary


def test_corrupt_manifest_makes_housekeeping_unknown(tmp_path: Path) -> None:
    hk = housekeeping(tmp_path)
    root = node(tmp_path, kubeadm(aligned_config(hk)), manifest=False)
    (root / "run/mcpnode").mkdir(parents=True, exist_ok=True)
    (root / "run/mcpnode/manifest.json").write_text('{"placement": {"housekeeping_cpus": 7}}')
    f = by_id(audit(root))["kubelet.reserved-cpus"]
    assert f.status is Status.FAIL and "unusable" in f.summary


@pytest.mark.parametrize(
    ("plant", "why"),
    [
        (lambda m: os.chown(m, 65534, 65534), "is owned by uid 65534, not root"),
        (lambda m: os.chmod(m, 0o666), "is group- and world-writable (mode 0666)"),
        (lambda m: os.chmod(m.parent, 0o1777), "is group- or world-writable (mode 1777"),
    ],
    ids=["nobody", "0666", "dir-1777"],
)
def test_an_untrusted_manifest_is_not_the_housekeeping(
    tmp_path: Path, plant: Callable[[Path], None], why: str
) -> None:
    """The same manifest that passes above, planted where root does not control it: the
    reserved CPUs cannot be compared (FAIL, unknown), never compared with a planted value."""
    hk = housekeeping(tmp_path)
    root = node(tmp_path, kubeadm(aligned_config(hk)))
    plant(root / MANIFEST_PATH.lstrip("/"))
    f = by_id(audit(root))["kubelet.reserved-cpus"]
    assert f.status is Status.FAIL and "refusing to trust it" in f.summary and why in f.summary
