"""The container area: version parsing and the CVE table, the YAML subset reader, the config
parsers, and collect + check over recorded roots.

Committed roots live in tests/fixtures/audit/container/<case>/: `root/` is what Host reads
(etc files, /dev nodes and /dev/char links, `mcpnode-snapshot.json` holding the toolkit's
`--version` answers), `context.json` the AuditContext fields, `expected.json` the golden
findings. Regenerate goldens after an intended change with
`MCPNODE_UPDATE_GOLDEN=1 pytest tests/audit/test_audit_container.py` and review the diff. Variants
that differ from a committed root by one file are built in tmp_path.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from mcpnode.audit import container
from mcpnode.audit.container.config import (
    CdiSpec,
    ConfigError,
    parse_cdi_spec,
    parse_containerd,
    parse_crio,
    parse_daemon_json,
    parse_toolkit_config,
)
from mcpnode.audit.container.facts import MAX_CDI_BYTES, Parsed
from mcpnode.audit.container.version import (
    Version,
    advisories_for,
    parse_cli_versions,
    parse_named_version,
    parse_version,
)
from mcpnode.audit.context import AuditContext
from mcpnode.audit.facts import FileRead
from mcpnode.audit.model import Finding, Status
from mcpnode.cli.render_audit import finding_json
from mcpnode.codec.reading import Unreadable
from mcpnode.codec.record import replace
from mcpnode.host import Host
from mcpnode.topology.discover import discover_host
from mcpnode.topology.model import Topology
from tests.support import minihost

CASES_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "audit" / "container"
CASES = sorted(p.name for p in CASES_DIR.iterdir() if (p / "root").is_dir())


# -- helpers ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def topology(tmp_path_factory: pytest.TempPathFactory) -> Topology:
    """Any topology will do: the container area reads only the context's counts."""
    root = minihost.build(tmp_path_factory.mktemp("mini"))
    with Host(root) as host:
        return discover_host(host)


def make_ctx(topology: Topology, **fields: Any) -> AuditContext:
    base: dict[str, Any] = {
        "gpu_count_sysfs": 2,
        "gpu_count_nvml": 2,
        "driver_version": "550.54.15",
        "cgroup_mode": "v2",
        "is_root": True,
    }
    return AuditContext(topology=topology, **{**base, **fields})


def run_root(root: Path, ctx: AuditContext) -> list[Finding]:
    with Host(root) as host:
        return container.check(container.collect(host, ctx), ctx)


def statuses(findings: list[Finding]) -> dict[str, str]:
    """id (with `@subject` when set) -> status, for compact assertions."""
    out = {}
    for f in findings:
        key = f.id if f.subject is None else f"{f.id}@{f.subject}"
        assert key not in out, f"duplicate finding {key}"
        out[key] = f.status.value
    return out


def one(findings: list[Finding], fid: str, subject: str | None = None) -> Finding:
    hits = [f for f in findings if f.id == fid and (subject is None or f.subject == subject)]
    assert len(hits) == 1, f"{fid}: {[f.summary for f in hits]}"
    return hits[0]


def ctk_out(v: str) -> str:
    return f"NVIDIA Container Toolkit CLI version {v}\ncommit: 0f8a3b1c\n"


def runtime_out(v: str) -> str:
    return (
        f"NVIDIA Container Runtime version {v}\ncommit: 0f8a3b1c\nspec: 1.2.0\n\n"
        "runc version 1.1.12\ncommit: v1.1.12-0-g51d5e94\nspec: 1.0.2-dev\n"
    )


def cli_out(c: str, lib: str | None = None) -> str:
    return (
        f"cli-version: {c}\nlib-version: {lib or c}\nbuild date: 2025-05-30T13:47+00:00\n"
        "build revision: 0f8a3b1c\nbuild compiler: x86_64-linux-gnu-gcc-7 7.5.0\n"
    )


def answer(stdout: str, rc: int = 0) -> dict[str, Any]:
    return {"found": True, "returncode": rc, "stdout": stdout, "stderr": "", "reason": None}


def absent(name: str) -> dict[str, Any]:
    return {
        "found": False,
        "returncode": None,
        "stdout": "",
        "stderr": "",
        "reason": f"{name} not found on PATH",
    }


def toolkit(v: str, cli: str | None = None, lib: str | None = None) -> dict[str, Any]:
    return {
        "nvidia-ctk --version": answer(ctk_out(v)),
        "nvidia-container-runtime --version": answer(runtime_out(v)),
        "nvidia-container-cli --version": answer(cli_out(cli or v, lib)),
    }


def build_root(tmp: Path, commands: dict[str, Any] | None, files: dict[str, str]) -> Path:
    root = tmp / "root"
    root.mkdir()
    if commands is not None:
        (root / "mcpnode-snapshot.json").write_text(json.dumps({"commands": commands}))
    for rel, text in files.items():
        minihost.put(root, rel, text)
    return root


MODE_CDI = '[nvidia-container-runtime]\nmode = "cdi"\n'
DOCKER_NVIDIA = '{"runtimes": {"nvidia": {"path": "nvidia-container-runtime"}}}'


# -- versions --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1.17.8", Version(1, 17, 8)),
        ("v1.18.0", Version(1, 18, 0)),
        (" 1.16.2\n", Version(1, 16, 2)),
        ("1.16", Version(1, 16, 0)),
        ("1.18.0-rc.1", Version(1, 18, 0, 0, ((1, 0, "rc"), (0, 1, "")))),
        ("1.18.0~rc.1", Version(1, 18, 0, 0, ((1, 0, "rc"), (0, 1, "")))),
        ("", None),
        ("1", None),
        ("1.x.2", None),
        ("latest", None),
        ("1.17.8 (build)", None),
    ],
)
def test_parse_version(text: str, expected: Version | None) -> None:
    assert parse_version(text) == expected


@pytest.mark.parametrize(
    ("a", "b", "order"),
    [
        ("1.17.7", "1.17.8", -1),
        ("1.17.8", "1.17.8", 0),
        ("1.17.10", "1.17.9", 1),
        ("1.18.0", "1.17.99", 1),
        ("2.0.0", "1.99.99", 1),
        ("1.17.8-rc.1", "1.17.8", -1),  # a pre-release precedes its release
        ("1.17.8-rc.1", "1.17.7", 1),
        ("1.18.0-rc.2", "1.18.0-rc.10", -1),  # numeric fields compare as numbers
        ("1.18.0-1", "1.18.0-rc", -1),  # numbers before words (semver)
        ("1.18.0-rc", "1.18.0-rc.1", -1),  # fewer fields first
    ],
)
def test_version_order(a: str, b: str, order: int) -> None:
    va, vb = parse_version(a), parse_version(b)
    assert va is not None and vb is not None
    assert ((va > vb) - (va < vb)) == order


def test_version_str_round_trips() -> None:
    for text in ("1.17.8", "1.18.0-rc.1", "1.18.0-1"):
        v = parse_version(text)
        assert v is not None and str(v) == text


@pytest.mark.parametrize(
    ("version", "cves"),
    [
        ("1.16.1", {"CVE-2024-0132", "CVE-2024-0133", "CVE-2024-0134", "CVE-2024-0135",
                    "CVE-2024-0136", "CVE-2024-0137", "CVE-2025-23359", "CVE-2025-23266",
                    "CVE-2025-23267"}),
        ("1.16.2", {"CVE-2024-0134", "CVE-2024-0135", "CVE-2024-0136", "CVE-2024-0137",
                    "CVE-2025-23359", "CVE-2025-23266", "CVE-2025-23267"}),
        ("1.17.3", {"CVE-2025-23359", "CVE-2025-23266", "CVE-2025-23267"}),
        ("1.17.7", {"CVE-2025-23266", "CVE-2025-23267"}),
        ("1.17.8-rc.1", {"CVE-2025-23266", "CVE-2025-23267"}),
        ("1.17.8", set()),
        ("1.18.0", set()),
    ],
)  # fmt: skip
def test_advisories(version: str, cves: set[str]) -> None:
    v = parse_version(version)
    assert v is not None
    assert {a.cve for a in advisories_for(v)} == cves


@pytest.mark.parametrize(
    ("text", "name", "raw"),
    [
        (ctk_out("1.17.8"), "NVIDIA Container Toolkit CLI", "1.17.8"),
        (runtime_out("1.17.8"), "NVIDIA Container Runtime", "1.17.8"),  # not runc's 1.1.12
        ("NVIDIA Container Runtime Hook version 1.16.1\ncommit: x\n", "NVIDIA Container "
         "Runtime Hook", "1.16.1"),
        ("\nNVIDIA Container Toolkit CLI version v1.18.0-rc.1\n", "NVIDIA Container Toolkit "
         "CLI", "v1.18.0-rc.1"),
    ],
)  # fmt: skip
def test_parse_named_version(text: str, name: str, raw: str) -> None:
    got = parse_named_version(text)
    assert got is not None
    assert (got.name, got.raw, got.version) == (name, raw, parse_version(raw))


@pytest.mark.parametrize(
    "text", ["", "runc version 1.1.12\n", "nvidia-ctk: command not found\n", "version 1.2.3"]
)
def test_parse_named_version_none(text: str) -> None:
    assert parse_named_version(text) is None


def test_parse_named_version_unreadable_token() -> None:
    got = parse_named_version("NVIDIA Container Toolkit CLI version devel\n")
    assert got is not None and got.raw == "devel" and got.version is None


@pytest.mark.parametrize(
    ("text", "cli", "lib"),
    [
        (cli_out("1.17.8"), "1.17.8", "1.17.8"),
        (cli_out("1.17.8", "1.17.4"), "1.17.8", "1.17.4"),
        ("cli-version:1.8.1\n", "1.8.1", None),
        ("  lib-version :  1.18.0  \n", None, "1.18.0"),
    ],
)
def test_parse_cli_versions(text: str, cli: str | None, lib: str | None) -> None:
    got = parse_cli_versions(text)
    assert got is not None
    assert (got.cli_raw, got.lib_raw) == (cli, lib)


def test_parse_cli_versions_none() -> None:
    assert parse_cli_versions("nvidia-container-cli: unrecognized option\n") is None


# -- CDI YAML: PyYAML's safe loader inside codec/yaml_bounded.py's bounds ----------------------

CDI_HEAD = "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\n"


@pytest.mark.parametrize(
    ("text", "names"),
    [
        # What Go's encoders write (nvidia-ctk, the device plugin): compact sequences of mappings.
        (CDI_HEAD + 'devices:\n- name: "0"\n  containerEdits:\n    deviceNodes:\n'
         "    - path: /dev/nvidia0\n- name: all\n", ("0", "all")),
        (CDI_HEAD + 'devices:\n  - name: "0"\n  - name: "1"\n', ("0", "1")),
        ("---\n" + CDI_HEAD + 'devices: [{name: "0"}, {name: GPU-aaa}]  # flow\n...\n',
         ("0", "GPU-aaa")),
        # Beyond what the encoders write, still a spec the registry reads: anchors for shared
        # edits, a block scalar, single quotes.
        (CDI_HEAD + "devices:\n- name: '0'\n  containerEdits: &e\n    env: [A=1]\n"
         "- name: '1'\n  containerEdits: *e\n- name: |-\n    all\n", ("0", "1", "all")),
    ],
)  # fmt: skip
def test_cdi_yaml_forms(text: str, names: tuple[str, ...]) -> None:
    assert parse_cdi_spec(text, is_json=False).device_names == names


def test_cdi_yaml_bounds() -> None:
    """An alias bomb and nesting past the bound are refused unread (unsupported: WARN, "not
    checked"), quickly; a Python tag is refused by the safe loader as invalid."""
    levels = ["l0: &l0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 9):  # nine levels of nine aliases: 9^9 leaves from a few hundred bytes
        levels.append(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]")
    bomb = CDI_HEAD + "\n".join(levels) + '\ndevices: [{name: "0"}]\n'
    deep = CDI_HEAD + "devices: " + "[" * 200 + "]" * 200 + "\n"
    for text in (bomb, deep):
        with pytest.raises(ConfigError) as err:
            parse_cdi_spec(text, is_json=False)
        assert err.value.unsupported and "not checked" in str(err.value)
    with pytest.raises(ConfigError) as err:
        parse_cdi_spec(CDI_HEAD + "devices: !!python/object:os.system [x]\n", is_json=False)
    assert not err.value.unsupported and "not valid YAML" in str(err.value)


# -- config parsers ---------------------------------------------------------------------------


def test_daemon_json() -> None:
    cfg = parse_daemon_json(
        '{"default-runtime": "nvidia", "runtimes": {"nvidia": {"path": "/usr/bin/ncr"}, '
        '"runsc": {}}, "features": {"cdi": true}, '
        '"exec-opts": ["native.cgroupdriver = systemd"]}'
    )
    assert cfg.runtimes == ("nvidia", "runsc")
    assert (cfg.nvidia_path, cfg.default_runtime, cfg.cdi_feature, cfg.cgroup_driver) == (
        "/usr/bin/ncr",
        "nvidia",
        True,
        "systemd",
    )
    empty = parse_daemon_json("  \n")
    assert empty.runtimes == () and empty.default_runtime is None


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('{"runtimes": {"nvidia": {"path": "x",}}}', "not valid JSON"),
        ("[]", "not a JSON object"),
        ('{"runtimes": []}', '"runtimes" is not an object'),
        ('{"runtimes": {"nvidia": "x"}}', '"runtimes.nvidia" is not an object'),
        ('{"default-runtime": 1}', '"default-runtime" is not a string'),
    ],
)
def test_daemon_json_errors(text: str, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        parse_daemon_json(text)


@pytest.mark.parametrize(
    ("text", "table", "binary", "default"),
    [
        (
            'version = 3\n[plugins."io.containerd.cri.v1.runtime".containerd]\n'
            'default_runtime_name = "nvidia"\n'
            '[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.nvidia]\n'
            'runtime_type = "io.containerd.runc.v2"\n'
            '[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.nvidia.options]\n'
            'BinaryName = "/usr/bin/nvidia-container-runtime"\n',
            'plugins."io.containerd.cri.v1.runtime".containerd.runtimes.nvidia',
            "/usr/bin/nvidia-container-runtime",
            "nvidia",
        ),
        (
            'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n'
            'runtime_type = "io.containerd.runc.v2"\n'
            '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]\n'
            'BinaryName = "nvidia-container-runtime"\n',
            'plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia',
            "nvidia-container-runtime",
            None,
        ),
        (
            "[plugins.cri.containerd.runtimes.nvidia]\n"
            'runtime_type = "io.containerd.runtime.v1.linux"\n'
            'runtime_engine = "/usr/bin/nvidia-container-runtime"\n',
            "plugins.cri.containerd.runtimes.nvidia",
            "/usr/bin/nvidia-container-runtime",
            None,
        ),
    ],
)
def test_containerd_layouts(text: str, table: str, binary: str, default: str | None) -> None:
    cfg = parse_containerd(text)
    assert cfg.nvidia is not None
    assert (cfg.nvidia.table, cfg.nvidia.binary, cfg.default_runtime) == (table, binary, default)


def test_containerd_imports_and_errors() -> None:
    cfg = parse_containerd('version = 2\nimports = ["/etc/containerd/conf.d/*.toml"]\n')
    assert cfg.imports == ("/etc/containerd/conf.d/*.toml",) and cfg.nvidia is None
    assert cfg.version == 2
    with pytest.raises(ConfigError, match="imports"):
        parse_containerd("imports = [1]\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        parse_containerd("[plugins\n")


def test_crio_and_toolkit_config() -> None:
    cfg = parse_crio(
        '[crio.runtime]\ndefault_runtime = "nvidia"\n'
        '[crio.runtime.runtimes.nvidia]\nruntime_path = "/usr/bin/nvidia-container-runtime"\n'
    )
    assert cfg.has_nvidia and cfg.nvidia_path == "/usr/bin/nvidia-container-runtime"
    assert cfg.default_runtime == "nvidia" and cfg.runtimes == ("nvidia",)
    assert not parse_crio('[crio.runtime]\ndefault_runtime = "crun"\n').has_nvidia
    tk = parse_toolkit_config(
        '[nvidia-container-runtime]\nmode = "legacy"\n[features]\n'
        "disable-cuda-compat-lib-hook = true\n[nvidia-container-cli]\nno-cgroups = true\n"
    )
    assert (tk.mode, tk.mode_set, tk.disable_cuda_compat_lib_hook, tk.no_cgroups) == (
        "legacy",
        True,
        True,
        True,
    )
    default = parse_toolkit_config("[nvidia-container-cli]\nldconfig = '@/sbin/ldconfig'\n")
    assert (default.mode, default.mode_set) == ("auto", False)
    with pytest.raises(ConfigError, match="mode"):
        parse_toolkit_config("[nvidia-container-runtime]\nmode = 1\n")


def spec_yaml(names: list[str], lib: str = "550.54.15", kind: str = "nvidia.com/gpu") -> str:
    devices = "".join(
        f'- name: "{n}"\n  containerEdits:\n    deviceNodes:\n    - path: /dev/nvidia0\n'
        for n in names
    )
    return (
        f"cdiVersion: 0.5.0\nkind: {kind}\ncontainerEdits:\n  mounts:\n"
        f"  - hostPath: /usr/lib/libcuda.so.{lib}\n    containerPath: /usr/lib/libcuda.so.{lib}\n"
        f"devices:\n{devices}"
    )


@pytest.mark.parametrize(
    ("names", "count"),
    [
        (["0", "1", "all"], 2),
        (["0", "GPU-aaa", "1", "GPU-bbb", "all"], 2),  # index and uuid strategies together
        (["GPU-aaa", "GPU-bbb", "GPU-ccc", "all"], 3),
        (["0", "0:0", "0:1", "1", "all"], 2),  # MIG devices are not GPUs
        (["MIG-aaa", "MIG-bbb"], 2),  # nothing else to go by
    ],
)
def test_cdi_gpu_count(names: list[str], count: int) -> None:
    spec = parse_cdi_spec(spec_yaml(names), is_json=False)
    assert spec.device_names == tuple(names)
    assert spec.gpu_count == count
    assert spec.driver_versions == ("550.54.15",)


def test_cdi_json_and_driver_versions() -> None:
    doc = {
        "cdiVersion": "0.6.0",
        "kind": "nvidia.com/gpu",
        "devices": [{"name": "0"}],
        "containerEdits": {
            "hooks": [{"args": ["x", "--link", "libnvidia-ml.so.570.86.15::/x"]}],
            "mounts": [
                {"hostPath": "/lib/libcuda.so.570.86.15"},
                {"hostPath": "/lib/libcuda.so.1"},
            ],
        },
    }
    spec = parse_cdi_spec(json.dumps(doc), is_json=True)
    assert spec == CdiSpec("0.6.0", "nvidia.com/gpu", ("0",), ("570.86.15",))


@pytest.mark.parametrize(
    ("text", "is_json", "fragment", "unsupported"),
    [
        ("cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: 0\n", False,
         "devices[0].name", False),
        ("cdiVersion: 0.5.0\nkind: gpu\ndevices:\n- name: a\n", False, '"kind"', False),
        ("kind: nvidia.com/gpu\ndevices:\n- name: a\n", False, '"cdiVersion"', False),
        ("cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices: []\n", False, '"devices"', False),
        ("- a\n", False, "not a mapping", False),
        ("cdiVersion: 0.5.0\n  kind: x\n", False, "not valid YAML", False),
        ("cdiVersion: 0.5.0\n  kind: x\n", False, "at line 2", False),
        (CDI_HEAD + "devices: [{name: a}]\n---\nkind: b\n", False, "single document", False),
        # YAML 1.1, as the registry's decoder reads it: 0.5 is a number, not a version string.
        ("cdiVersion: 0.5\nkind: nvidia.com/gpu\ndevices: [{name: a}]\n", False,
         '"cdiVersion"', False),
        ('{"cdiVersion": "0.5.0",}', True, "not valid JSON", False),
    ],
)  # fmt: skip
def test_cdi_spec_errors(text: str, is_json: bool, fragment: str, unsupported: bool) -> None:
    with pytest.raises(ConfigError) as err:
        parse_cdi_spec(text, is_json)
    assert fragment in str(err.value) and err.value.unsupported is unsupported


# -- committed roots: golden findings ---------------------------------------------------------

# The finding that case exists for, beyond the golden (so the intent survives a regeneration).
KEY_STATUS: dict[str, dict[str, str]] = {
    "toolkit-1.16.1": {"container.toolkit.version": "FAIL"},
    "toolkit-1.17.7": {"container.toolkit.version": "FAIL", "container.toolkit.mode": "PASS"},
    "toolkit-1.17.8": {
        "container.toolkit.version": "PASS",
        "container.toolkit.mode": "INFO",
        "container.devchar.symlinks": "PASS",
    },
    "cli-lib-mismatch": {
        "container.toolkit.cli_lib": "FAIL",
        "container.toolkit.match": "WARN",
        "container.toolkit.version": "FAIL",
    },
    "toolkit-1.18-cli-differs": {
        "container.toolkit.cli_lib": "PASS",
        "container.toolkit.match": "FAIL",
    },
    # docker's default driver on cgroup v2 is systemd: nothing to disagree with
    "docker-with-nvidia": {"container.runtime.docker": "PASS", "container.cgroup.driver": "PASS"},
    "docker-without-nvidia": {"container.runtime.docker": "WARN"},
    "containerd-confd": {"container.runtime.containerd": "PASS"},
    "containerd-configd": {"container.runtime.containerd": "PASS"},
    "containerd-not-imported": {"container.runtime.containerd": "FAIL"},
    "crio-dropin": {"container.runtime.crio": "PASS"},
    "crio-wrong-dir": {"container.runtime.crio": "FAIL"},
    "legacy-no-devchar": {"container.devchar.symlinks": "FAIL"},
    "cdi-good": {
        "container.cdi.present": "PASS",
        "container.cdi.spec@/etc/cdi/nvidia.yaml": "PASS",
        "container.cdi.spec@/etc/cdi/example-fpga.json": "PASS",
        "container.cdi.devices@/etc/cdi/nvidia.yaml": "PASS",
        "container.cdi.driver@/etc/cdi/nvidia.yaml": "PASS",
    },
    "cdi-unparseable": {
        "container.cdi.spec@/var/run/cdi/nvidia.yaml": "FAIL",
        "container.cdi.present": "FAIL",
    },
    "cdi-wrong-count": {
        "container.cdi.devices@/var/run/cdi/nvidia.yaml": "FAIL",
        "container.cdi.driver@/var/run/cdi/nvidia.yaml": "FAIL",
    },
    "malformed-configs": {
        "container.runtime.docker": "FAIL",
        "container.runtime.containerd@/etc/containerd/config.toml": "FAIL",
        "container.toolkit.mode": "FAIL",
    },
    "no-gpu-no-toolkit": {"container.toolkit.present": "SKIP"},
    "gpu-no-toolkit": {"container.toolkit.present": "INFO"},
    "gpu-no-toolkit-docker": {"container.toolkit.present": "WARN"},
    "cgroup-driver-mismatch": {"container.cgroup.driver": "FAIL"},
    "cgroup-driver-systemd": {"container.cgroup.driver": "PASS"},
    "docker-info-cgroupfs-v2": {"container.cgroup.driver": "WARN"},
}


def case_findings(case: str, topology: Topology) -> list[Finding]:
    d = CASES_DIR / case
    ctx = make_ctx(topology, **json.loads((d / "context.json").read_text()))
    return run_root(d / "root", ctx)


def test_every_case_has_an_intent() -> None:
    assert set(CASES) == set(KEY_STATUS)


@pytest.mark.parametrize("case", CASES)
def test_case_golden(case: str, topology: Topology) -> None:
    findings = case_findings(case, topology)
    got = [finding_json(f) for f in findings]
    path = CASES_DIR / case / "expected.json"
    if os.environ.get("MCPNODE_UPDATE_GOLDEN"):
        path.write_text(json.dumps(got, indent=2) + "\n")
    assert path.exists(), f"no golden for {case}: run with MCPNODE_UPDATE_GOLDEN=1"
    assert json.loads(path.read_text()) == got, f"{case} differs from {path}"
    st = statuses(findings)
    for key, status in KEY_STATUS[case].items():
        assert st.get(key) == status, f"{case}: {key} is {st.get(key)}, expected {status}"


@pytest.mark.parametrize("case", CASES)
def test_every_finding_is_complete(case: str, topology: Topology) -> None:
    """Ids under container., evidence on every finding, a remedy on every FAIL and WARN."""
    for f in case_findings(case, topology):
        assert f.id.startswith("container.") and f.area == "container"
        assert f.evidence, f"{case}: {f.id} has no evidence"
        assert all(e.source and e.value for e in f.evidence), f"{case}: {f.id}"
        if f.status in (Status.FAIL, Status.WARN):
            assert f.remedy, f"{case}: {f.id} has no remedy"
        assert "\n" not in f.summary


def test_critical_wording_and_mitigation(topology: Topology) -> None:
    old = one(case_findings("toolkit-1.16.1", topology), "container.toolkit.version")
    assert old.summary.startswith("CRITICAL:") and "CVE-2024-0132" in old.summary
    assert old.summary.count("CVE-2024-0132") == 1
    assert "disable-cuda-compat-lib-hook" not in (old.remedy or "")  # no such hook before 1.17.5
    recent = one(case_findings("toolkit-1.17.7", topology), "container.toolkit.version")
    assert not recent.summary.startswith("CRITICAL")
    assert "CVE-2025-23266" in recent.summary and "CVE-2025-23267" in recent.summary
    assert "disable-cuda-compat-lib-hook = true" in (recent.remedy or "")
    assert any("disable-cuda-compat-lib-hook = true" in e.value for e in recent.evidence)


def test_parse_failures_name_the_file(topology: Topology) -> None:
    findings = case_findings("malformed-configs", topology)
    docker = one(findings, "container.runtime.docker")
    assert docker.summary.startswith("/etc/docker/daemon.json does not parse: not valid JSON")
    toml = one(findings, "container.runtime.containerd")
    assert "/etc/containerd/config.toml" in toml.summary and "line 2" in toml.summary
    mode = one(findings, "container.toolkit.mode")
    assert "/etc/nvidia-container-runtime/config.toml" in mode.summary


def test_devchar_lists_the_missing_nodes(topology: Topology) -> None:
    f = one(case_findings("legacy-no-devchar", topology), "container.devchar.symlinks")
    missing = next(e.value for e in f.evidence if e.source == "nodes without a link")
    assert "/dev/nvidia0" in missing and "/dev/nvidia-caps/nvidia-cap1" in missing
    assert "create-dev-char-symlinks --create-all" in (f.remedy or "")


# -- variants built in tmp_path ----------------------------------------------------------------


def test_devchar_partial_on_cgroup_v1_is_warn(tmp_path: Path, topology: Topology) -> None:
    src = CASES_DIR / "toolkit-1.17.8" / "root"
    root = tmp_path / "root"
    shutil.copytree(src, root, symlinks=True)
    (root / "dev" / "char" / "195:1").unlink()  # nvidia1 loses its link
    ctx = make_ctx(topology, cgroup_mode="v1")
    f = one(run_root(root, ctx), "container.devchar.symlinks")
    assert f.status is Status.WARN and "1 of 8" in f.summary
    f = one(run_root(root, make_ctx(topology)), "container.devchar.symlinks")
    assert f.status is Status.FAIL


def test_devchar_no_nvidia_nodes(tmp_path: Path, topology: Topology) -> None:
    root = build_root(tmp_path, toolkit("1.17.8"), {"dev/null": ""})
    f = one(run_root(root, make_ctx(topology)), "container.devchar.symlinks")
    assert f.status is Status.SKIP and "no /dev/nvidia*" in f.summary


def test_devchar_no_dev_char_dir(tmp_path: Path, topology: Topology) -> None:
    root = build_root(tmp_path, toolkit("1.17.8"), {"dev/nvidia0": "", "dev/nvidiactl": ""})
    f = one(run_root(root, make_ctx(topology)), "container.devchar.symlinks")
    assert f.status is Status.FAIL and "2 of 2" in f.summary
    assert any(e.source == "/dev/char" and e.value == "absent" for e in f.evidence)


@pytest.mark.parametrize(
    ("daemon", "runtime_found", "status", "fragment"),
    [
        ('{"default-runtime": "nvidia"}', True, "FAIL", "refuses to start"),
        (DOCKER_NVIDIA, False, "WARN", "not installed"),
        ('{"default-runtime": "nvidia", "runtimes": {"nvidia": {"path": "x"}}}', False, "FAIL",
         "every container"),
        ('{"runtimes": {"nvidia": {"path": "x"}}, "features": {"cdi": true}}', True, "PASS",
         "--runtime=nvidia"),
        ("", True, "WARN", "no nvidia runtime"),
    ],
)  # fmt: skip
def test_docker_rules(
    tmp_path: Path,
    topology: Topology,
    daemon: str,
    runtime_found: bool,
    status: str,
    fragment: str,
) -> None:
    commands = toolkit("1.17.8")
    if not runtime_found:
        commands["nvidia-container-runtime --version"] = absent("nvidia-container-runtime")
    root = build_root(tmp_path, commands, {"etc/docker/daemon.json": daemon})
    f = one(run_root(root, make_ctx(topology)), "container.runtime.docker")
    assert (f.status.value, fragment in f.summary) == (status, True), f.summary


def test_docker_without_nvidia_on_a_host_without_gpus(tmp_path: Path, topology: Topology) -> None:
    root = build_root(tmp_path, toolkit("1.17.8"), {"etc/docker/daemon.json": "{}"})
    ctx = make_ctx(topology, gpu_count_sysfs=0, gpu_count_nvml=None)
    assert one(run_root(root, ctx), "container.runtime.docker").status is Status.SKIP


def test_broken_daemon_json_fails_even_without_toolkit(tmp_path: Path, topology: Topology) -> None:
    commands = {
        k: absent(k.split()[0])
        for k in ("nvidia-ctk --version", "nvidia-container-runtime --version",
                  "nvidia-container-cli --version")
    }  # fmt: skip
    root = build_root(tmp_path, commands, {"etc/docker/daemon.json": "{"})
    st = statuses(run_root(root, make_ctx(topology)))
    assert st == {
        "container.toolkit.present": "WARN",
        "container.runtime.docker": "FAIL",
        "container.cgroup.driver": "SKIP",  # the driver is in the file that does not parse
    }


V3 = 'plugins."io.containerd.cri.v1.runtime".containerd'
RUNC = "io.containerd.runc.v2"


@pytest.mark.parametrize(
    ("files", "status", "fragment"),
    [
        # runtime_type missing: the pre-1.20 writer's bug
        ({"config.toml": f'version = 3\n[{V3}.runtimes.nvidia.options]\nBinaryName = "x"\n'},
         "WARN", "no runtime_type"),
        ({"config.toml": f'version = 3\n[{V3}]\ndefault_runtime_name = "nvidia"\n'},
         "FAIL", 'default_runtime_name is "nvidia"'),
        ({"config.toml": 'version = 3\nimports = ["/etc/containerd/extra/*.toml"]\n'},
         "WARN", "no nvidia runtime"),
        # imports of imports, relative to the importing file
        ({"config.toml": 'version = 3\nimports = ["nested/a.toml"]\n',
          "nested/a.toml": 'imports = ["b.toml"]\n',
          "nested/b.toml": f'[{V3}.runtimes.nvidia]\nruntime_type = "io.containerd.runc.v2"\n'},
         "PASS", "nested/b.toml"),
        # a later file's default wins
        ({"config.toml": f'version = 3\nimports = ["conf.d/*.toml"]\n[{V3}]\n'
                         'default_runtime_name = "runc"\n',
          "conf.d/99-nvidia.toml": f'[{V3}]\ndefault_runtime_name = "nvidia"\n'
                                   f'[{V3}.runtimes.nvidia]\nruntime_type = "{RUNC}"\n'},
         "PASS", "the default"),
    ],
)  # fmt: skip
def test_containerd_rules(
    tmp_path: Path, topology: Topology, files: dict[str, str], status: str, fragment: str
) -> None:
    root = build_root(
        tmp_path, toolkit("1.18.1"), {f"etc/containerd/{k}": v for k, v in files.items()}
    )
    findings = [f for f in run_root(root, make_ctx(topology)) if f.id.endswith("containerd")]
    f = findings[-1]
    assert (f.status.value, fragment in f.summary) == (status, True), f.summary


def test_containerd_unresolved_imports_are_evidence(tmp_path: Path, topology: Topology) -> None:
    root = build_root(
        tmp_path,
        toolkit("1.18.1"),
        {
            "etc/containerd/config.toml": (
                'imports = ["/etc/containerd/missing.toml", "/etc/containerd/none/*.toml", '
                '"/etc/*/x.toml"]\n'
            )
        },
    )
    f = one(run_root(root, make_ctx(topology)), "container.runtime.containerd")
    ev = {e.source: e.value for e in f.evidence}
    assert "does not exist" in ev["import /etc/containerd/missing.toml"]
    assert ev["import /etc/containerd/none/*.toml"] == "matches no file"
    assert "directory name" in ev["import /etc/*/x.toml"]


def test_containerd_import_cycle_ends(tmp_path: Path, topology: Topology) -> None:
    root = build_root(
        tmp_path,
        toolkit("1.18.1"),
        {
            "etc/containerd/config.toml": 'imports = ["a.toml"]\n',
            "etc/containerd/a.toml": 'imports = ["config.toml", "a.toml"]\n',
        },
    )
    f = one(run_root(root, make_ctx(topology)), "container.runtime.containerd")
    ev = {e.source: e.value for e in f.evidence}
    assert ev["containerd loads"] == "/etc/containerd/config.toml -> /etc/containerd/a.toml"


def test_unimported_broken_dropin_is_warn(tmp_path: Path, topology: Topology) -> None:
    root = build_root(
        tmp_path,
        toolkit("1.18.1"),
        {"etc/containerd/config.toml": "version = 3\n", "etc/containerd/conf.d/x.toml": "[a\n"},
    )
    st = statuses(run_root(root, make_ctx(topology)))
    assert st["container.runtime.containerd@/etc/containerd/conf.d/x.toml"] == "WARN"
    assert st["container.runtime.containerd"] == "WARN"  # and no nvidia runtime anywhere


def test_crio_rules(tmp_path: Path, topology: Topology) -> None:
    root = build_root(
        tmp_path,
        toolkit("1.19.1"),
        {
            "etc/crio/crio.conf": '[crio.runtime]\ndefault_runtime = "nvidia"\n',
            "etc/crio/crio.conf.d/50-broken.conf": "[crio.runtime\n",
            "etc/crio/crio.conf.d/sub/ignored.conf": "not read: a directory",
        },
    )
    st = statuses(run_root(root, make_ctx(topology)))
    assert st["container.runtime.crio@/etc/crio/crio.conf.d/50-broken.conf"] == "FAIL"
    assert st["container.runtime.crio"] == "FAIL"  # default_runtime nvidia, none defined


def test_cdi_json_unparseable_and_over_bounds_yaml(tmp_path: Path, topology: Topology) -> None:
    root = build_root(
        tmp_path,
        toolkit("1.17.8"),
        {
            "etc/nvidia-container-runtime/config.toml": MODE_CDI,
            "etc/cdi/broken.json": '{"cdiVersion": ',
            "var/run/cdi/aliases.yaml": CDI_HEAD
            + "a: &a [x]\n"
            + "".join(f"b{i}: *a\n" for i in range(20))
            + 'devices: [{name: "0"}]\n',
            "var/run/cdi/huge.yaml": CDI_HEAD + "# padding\n" * (MAX_CDI_BYTES // 10),
        },
    )
    findings = run_root(root, make_ctx(topology))
    st = statuses(findings)
    assert st["container.cdi.spec@/etc/cdi/broken.json"] == "FAIL"
    assert st["container.cdi.spec@/var/run/cdi/aliases.yaml"] == "WARN"  # over bounds: unchecked
    # Over MAX_CDI_BYTES: the read stops there, and the spec is not checked (never a PASS).
    huge = next(f for f in findings if f.subject == "/var/run/cdi/huge.yaml")
    assert huge.status is Status.WARN and "unreadable" in huge.summary
    assert st["container.cdi.present"] == "FAIL"  # mode cdi and no usable spec


def test_cdi_count_uses_sysfs_without_nvml(tmp_path: Path, topology: Topology) -> None:
    root = build_root(
        tmp_path,
        toolkit("1.17.8"),
        {"etc/cdi/nvidia.yaml": spec_yaml(["0", "1", "2", "all"])},
    )
    ctx = make_ctx(topology, gpu_count_sysfs=3, gpu_count_nvml=None, driver_version=None)
    findings = run_root(root, ctx)
    f = one(findings, "container.cdi.devices")
    assert f.status is Status.PASS and any(e.source == "GPUs (PCI (sysfs))" for e in f.evidence)
    assert one(findings, "container.cdi.driver").status is Status.SKIP


@pytest.mark.parametrize(
    ("version", "mode", "status"),
    [
        ("1.18.0", "legacy", "WARN"),  # deprecated from 1.18
        ("1.17.8", "csv", "INFO"),
        ("1.17.8", "bogus", "FAIL"),
        ("1.18.0", "jit-cdi", "PASS"),
        ("1.17.8", None, "INFO"),  # auto is legacy before 1.18
        ("1.18.0", None, "PASS"),  # auto is jit-cdi from 1.18
    ],
)
def test_mode_rules(
    tmp_path: Path, topology: Topology, version: str, mode: str | None, status: str
) -> None:
    files = {}
    if mode is not None:
        files["etc/nvidia-container-runtime/config.toml"] = (
            f'[nvidia-container-runtime]\nmode = "{mode}"\n'
        )
    root = build_root(tmp_path, toolkit(version), files)
    assert one(run_root(root, make_ctx(topology)), "container.toolkit.mode").status.value == status


def test_mode_auto_with_unknown_version(tmp_path: Path, topology: Topology) -> None:
    commands = {
        "nvidia-ctk --version": answer("NVIDIA Container Toolkit CLI version devel\n"),
        "nvidia-container-runtime --version": absent("nvidia-container-runtime"),
        "nvidia-container-cli --version": absent("nvidia-container-cli"),
    }
    root = build_root(tmp_path, commands, {"dev/nvidia0": ""})
    st = statuses(run_root(root, make_ctx(topology)))
    assert st["container.toolkit.mode"] == "INFO"
    assert st["container.toolkit.version"] == "WARN"  # nothing readable
    assert st["container.toolkit.cli_lib"] == "SKIP"
    assert st["container.toolkit.match"] == "SKIP"
    assert st["container.devchar.symlinks"] == "FAIL"  # auto may mean legacy: checked


@pytest.mark.parametrize(
    ("cgroup", "lib", "status"),
    [("v2", "1.8.0", "FAIL"), ("v2", "1.8.1", "PASS"), ("v1", "1.8.0", "SKIP"),
     ("unknown", "1.17.8", "SKIP")],
)  # fmt: skip
def test_cgroup_v2_rule(
    tmp_path: Path, topology: Topology, cgroup: str, lib: str, status: str
) -> None:
    root = build_root(tmp_path, toolkit(lib), {})
    ctx = make_ctx(topology, cgroup_mode=cgroup)
    assert one(run_root(root, ctx), "container.toolkit.cgroupv2").status.value == status


def test_runtime_differs_from_ctk_is_flagged(tmp_path: Path, topology: Topology) -> None:
    commands = toolkit("1.17.8")
    commands["nvidia-container-runtime --version"] = answer(runtime_out("1.17.7"))
    root = build_root(tmp_path, commands, {})
    f = one(run_root(root, make_ctx(topology)), "container.toolkit.match")
    assert f.status is Status.WARN and "nvidia-container-runtime 1.17.7" in f.summary


def test_cli_with_unreadable_output_and_failing_command(tmp_path: Path, topology: Topology) -> None:
    commands = toolkit("1.17.8")
    commands["nvidia-container-cli --version"] = answer("load library failed\n", rc=1)
    root = build_root(tmp_path, commands, {})
    findings = run_root(root, make_ctx(topology))
    f = one(findings, "container.toolkit.cli_lib")
    assert f.status is Status.WARN
    assert f.evidence[0].value.startswith("exit 1:")


def test_snapshot_without_commands(tmp_path: Path, topology: Topology) -> None:
    root = build_root(tmp_path, None, {"etc/docker/daemon.json": DOCKER_NVIDIA})
    st = statuses(run_root(root, make_ctx(topology)))
    assert st["container.toolkit.present"] == "SKIP"
    assert st["container.runtime.docker"] == "PASS"  # the runtime binary is unknown, not absent


def test_unreadable_files(tmp_path: Path, topology: Topology) -> None:
    """A file that cannot be read: a SKIP without root, a WARN as root, never a crash. The
    read error comes from a directory where the file should be; EACCES is simulated in the
    facts (the suite may run as root, where chmod 000 does not deny)."""
    root = build_root(tmp_path, toolkit("1.17.8"), {"etc/docker/daemon.json/x": ""})
    ctx = make_ctx(topology)
    with Host(root) as host:
        facts = container.collect(host, ctx)
    assert facts.docker.read.error is not None
    f = one(container.check(facts, ctx), "container.runtime.docker")
    assert f.status is Status.WARN and f.subject == "/etc/docker/daemon.json"
    denied = FileRead(
        "/etc/nvidia-container-runtime/config.toml", Unreadable("Permission denied", denied=True)
    )
    facts = replace(facts, toolkit_config=Parsed(denied))
    user = make_ctx(topology, is_root=False)
    f = one(container.check(facts, user), "container.toolkit.mode")
    assert f.status is Status.SKIP and "needs root" in f.summary
    assert one(container.check(facts, ctx), "container.toolkit.mode").status is Status.WARN


def test_dev_char_odd_links_are_ignored(tmp_path: Path, topology: Topology) -> None:
    root = build_root(tmp_path, toolkit("1.17.8"), {"dev/nvidia0": ""})
    minihost.link(root, "dev/char/195:0", "../nvidia0")
    minihost.link(root, "dev/char/loop", "loop")
    f = one(run_root(root, make_ctx(topology)), "container.devchar.symlinks")
    assert f.status is Status.PASS
