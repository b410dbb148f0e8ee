"""Container engine and toolkit configuration files: parsers, text in and values out.

Each parser takes a file's text and returns what the audit needs from it, or raises
`ConfigError` with the parse error (a checker turns that into a FAIL naming the file). No I/O:
`container.py` reads the files through Host and calls these.

Where the keys live, from the toolkit's own writer (`nvidia-ctk runtime configure`,
`cmd/nvidia-ctk/runtime/configure/configure.go`, read at each tag from 1.17 to 1.20):

- docker `/etc/docker/daemon.json`: `runtimes.nvidia.path`, `default-runtime`,
  `features.cdi`, `exec-opts` (`native.cgroupdriver=...`);
- containerd TOML: `imports`, and the CRI plugin's runtimes under
  `plugins."io.containerd.grpc.v1.cri".containerd` (config version 2),
  `plugins."io.containerd.cri.v1.runtime".containerd` (version 3, containerd 2.x) or
  `plugins.cri.containerd` (version 1): `runtimes.<name>.runtime_type`,
  `runtimes.<name>.options.BinaryName`, `default_runtime_name`;
- CRI-O TOML: `crio.runtime.runtimes.<name>.runtime_path`, `crio.runtime.default_runtime`;
- toolkit `/etc/nvidia-container-runtime/config.toml`: `nvidia-container-runtime.mode`,
  `features.disable-cuda-compat-lib-hook`;
- CDI specs (YAML or JSON): `cdiVersion`, `kind`, `devices[].name`, and the driver's
  versioned libraries in `containerEdits` (`libcuda.so.<driver>`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from mcpnode.codec import toml_bounded
from mcpnode.codec.yaml_bounded import YamlOverBounds, YamlRejected, load_bounded

NVIDIA_RUNTIME = "nvidia"
TOOLKIT_MODES = ("auto", "legacy", "cdi", "jit-cdi", "csv")


class ConfigError(ValueError):
    """A configuration file that cannot be read as what it claims to be. `unsupported` is True
    when the text was refused unread by a bound (YAML nested too deep, too many aliases), not
    found invalid."""

    def __init__(self, message: str, unsupported: bool = False) -> None:
        super().__init__(message)
        self.unsupported = unsupported


def _toml(text: str) -> dict[str, Any]:
    # codec/toml_bounded.py: bounded nesting and dotted keys, no RecursionError or int-limit
    # ValueError escaping as a crash of the whole container area.
    try:
        return toml_bounded.loads(text)
    except toml_bounded.TomlRejected as err:
        raise ConfigError(f"not valid TOML: {err}") from err


def _json(text: str) -> Any:
    """json.loads, with nesting too deep to parse (RecursionError: dockerd refuses such a file
    too) reported like any other invalid JSON."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ConfigError("not valid JSON: nested too deeply to parse") from None
    except ValueError as err:
        raise ConfigError(f"not valid JSON: {err}") from err


def _table(doc: dict[str, Any], *keys: str) -> dict[str, Any] | None:
    """doc[k1][k2]... when every step is a table, else None."""
    node: Any = doc
    for key in keys:
        if not isinstance(node, dict):
            return None
        node = node.get(key)
    return node if isinstance(node, dict) else None


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None


# -- docker ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class DockerConfig:
    runtimes: tuple[str, ...]  # names under "runtimes", sorted
    nvidia_path: str | None  # runtimes.nvidia.path
    default_runtime: str | None
    cdi_feature: bool | None  # features.cdi (docker's native CDI; default on since 28)
    cgroup_driver: str | None  # from exec-opts native.cgroupdriver=


def parse_daemon_json(text: str) -> DockerConfig:
    """`/etc/docker/daemon.json`. An empty file counts as `{}`, as dockerd reads it.

    Raises ConfigError for invalid JSON, a top level that is not an object, or keys of the
    wrong type (dockerd refuses to start on each of these)."""
    if not text.strip():
        return DockerConfig((), None, None, None, None)
    doc = _json(text)
    if not isinstance(doc, dict):
        raise ConfigError("not a JSON object at the top level")
    runtimes = doc.get("runtimes", {})
    if not isinstance(runtimes, dict):
        raise ConfigError('"runtimes" is not an object')
    nvidia = runtimes.get(NVIDIA_RUNTIME)
    if nvidia is not None and not isinstance(nvidia, dict):
        raise ConfigError('"runtimes.nvidia" is not an object')
    default = doc.get("default-runtime")
    if default is not None and not isinstance(default, str):
        raise ConfigError('"default-runtime" is not a string')
    features = doc.get("features")
    cdi = features.get("cdi") if isinstance(features, dict) else None
    driver = None
    opts = doc.get("exec-opts")
    if isinstance(opts, list):
        for opt in opts:
            if isinstance(opt, str) and opt.replace(" ", "").startswith("native.cgroupdriver="):
                driver = opt.split("=", 1)[1].strip()
    return DockerConfig(
        runtimes=tuple(sorted(str(k) for k in runtimes)),
        nvidia_path=_str(nvidia.get("path")) if isinstance(nvidia, dict) else None,
        default_runtime=default,
        cdi_feature=cdi if isinstance(cdi, bool) else None,
        cgroup_driver=driver,
    )


# -- containerd ------------------------------------------------------------------------------

# The CRI plugin's table by config version (containerd docs/cri/config.md, and PLUGINS.md for
# the 2.x split that moved runtimes to io.containerd.cri.v1.runtime).
CONTAINERD_CRI_TABLES: tuple[tuple[str, ...], ...] = (
    ("plugins", "io.containerd.cri.v1.runtime", "containerd"),  # version 3
    ("plugins", "io.containerd.grpc.v1.cri", "containerd"),  # version 2
    ("plugins", "cri", "containerd"),  # version 1
)


@dataclass(frozen=True)
class ContainerdRuntime:
    table: str  # dotted TOML path, for evidence
    runtime_type: str | None  # io.containerd.runc.v2
    binary: str | None  # options.BinaryName (v2/v3) or runtime_engine (v1)


@dataclass(frozen=True)
class ContainerdConfig:
    version: int | None
    imports: tuple[str, ...]
    nvidia: ContainerdRuntime | None
    default_runtime: str | None  # default_runtime_name (last table that sets it)
    default_table: str | None
    # The default runtime's options.SystemdCgroup (v2/v3), or the CRI plugin's systemd_cgroup
    # (v1); None: not set here (containerd's default is cgroupfs)
    systemd_cgroup: bool | None = None


def _dotted(keys: tuple[str, ...]) -> str:
    return ".".join(f'"{k}"' if "." in k else k for k in keys)


def parse_containerd(text: str) -> ContainerdConfig:
    """A containerd config or drop-in. Raises ConfigError for invalid TOML or `imports` that
    is not a list of strings."""
    doc = _toml(text)
    version = doc.get("version")
    imports = doc.get("imports", [])
    if not isinstance(imports, list) or not all(isinstance(i, str) for i in imports):
        raise ConfigError('"imports" is not a list of strings')
    nvidia = None
    default = default_table = None
    systemd: bool | None = None
    for keys in CONTAINERD_CRI_TABLES:
        cri = _table(doc, *keys)
        if cri is None:
            continue
        if isinstance(cri.get("default_runtime_name"), str):
            default, default_table = cri["default_runtime_name"], _dotted(keys)
        # config version 1 put the switch on the plugin itself
        parent = _table(doc, *keys[:-1]) or {}
        if isinstance(parent.get("systemd_cgroup"), bool):
            systemd = parent["systemd_cgroup"]
        runc = _table(cri, "runtimes", cri.get("default_runtime_name") or "runc", "options")
        if runc is not None and isinstance(runc.get("SystemdCgroup"), bool):
            systemd = runc["SystemdCgroup"]
        runtime = _table(cri, "runtimes", NVIDIA_RUNTIME)
        if runtime is not None and nvidia is None:
            options = _table(runtime, "options") or {}
            nvidia = ContainerdRuntime(
                table=_dotted((*keys, "runtimes", NVIDIA_RUNTIME)),
                runtime_type=_str(runtime.get("runtime_type")),
                binary=_str(options.get("BinaryName")) or _str(runtime.get("runtime_engine")),
            )
    return ContainerdConfig(
        version=version if isinstance(version, int) else None,
        imports=tuple(imports),
        nvidia=nvidia,
        default_runtime=default,
        default_table=default_table,
        systemd_cgroup=systemd,
    )


# -- CRI-O -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class CrioConfig:
    runtimes: tuple[str, ...]
    nvidia_path: str | None  # crio.runtime.runtimes.nvidia.runtime_path
    has_nvidia: bool
    default_runtime: str | None
    cgroup_manager: str | None = None  # crio.runtime.cgroup_manager (CRI-O's default: systemd)


def parse_crio(text: str) -> CrioConfig:
    """`/etc/crio/crio.conf` or a drop-in. Raises ConfigError for invalid TOML."""
    doc = _toml(text)
    runtime = _table(doc, "crio", "runtime") or {}
    runtimes = _table(runtime, "runtimes") or {}
    nvidia = _table(runtimes, NVIDIA_RUNTIME)
    return CrioConfig(
        runtimes=tuple(sorted(runtimes)),
        nvidia_path=_str(nvidia.get("runtime_path")) if nvidia is not None else None,
        has_nvidia=nvidia is not None,
        default_runtime=_str(runtime.get("default_runtime")),
        cgroup_manager=_str(runtime.get("cgroup_manager")),
    )


# -- the toolkit's own config ----------------------------------------------------------------


@dataclass(frozen=True)
class ToolkitConfig:
    mode: str  # as written; "auto" when the key is absent (the toolkit's default)
    mode_set: bool  # whether the file sets it
    disable_cuda_compat_lib_hook: bool | None  # [features], the CVE-2025-23266 mitigation
    no_cgroups: bool | None  # nvidia-container-cli.no-cgroups (rootless)


def parse_toolkit_config(text: str) -> ToolkitConfig:
    """`/etc/nvidia-container-runtime/config.toml`. Raises ConfigError for invalid TOML or a
    mode that is not a string."""
    doc = _toml(text)
    runtime = _table(doc, "nvidia-container-runtime") or {}
    mode = runtime.get("mode")
    if mode is not None and not isinstance(mode, str):
        raise ConfigError('"nvidia-container-runtime.mode" is not a string')
    features = _table(doc, "features") or {}
    hook = features.get("disable-cuda-compat-lib-hook")
    cli = _table(doc, "nvidia-container-cli") or {}
    no_cgroups = cli.get("no-cgroups")
    return ToolkitConfig(
        mode=mode if mode is not None else "auto",
        mode_set=mode is not None,
        disable_cuda_compat_lib_hook=hook if isinstance(hook, bool) else None,
        no_cgroups=no_cgroups if isinstance(no_cgroups, bool) else None,
    )


# -- CDI -------------------------------------------------------------------------------------

# The driver's own versioned libraries: their suffix *is* the driver version (550.54.15).
_DRIVER_LIB = re.compile(r"lib(?:cuda|nvidia-ml)\.so\.(\d+\.\d+(?:\.\d+)?)")
_INDEX = re.compile(r"\d+\Z")


@dataclass(frozen=True)
class CdiSpec:
    cdi_version: str
    kind: str  # vendor/class: nvidia.com/gpu
    device_names: tuple[str, ...]  # in file order
    driver_versions: tuple[str, ...]  # sorted, from libcuda.so.X / libnvidia-ml.so.X paths

    @property
    def gpu_count(self) -> int:
        """GPUs the spec describes. nvidia-ctk names each GPU by index (`0`), UUID
        (`GPU-...`) or both (`--device-name-strategy`), MIG devices `0:1` / `MIG-...`, plus
        `all`. Count indices when there are any, else GPU UUIDs, else every name but `all`."""
        names = [n for n in self.device_names if n != "all"]
        index = [n for n in names if _INDEX.match(n)]
        if index:
            return len(index)
        uuids = [n for n in names if n.startswith("GPU-")]
        return len(uuids) if uuids else len(names)


def parse_cdi_spec(text: str, is_json: bool) -> CdiSpec:
    """A CDI spec file. Raises ConfigError when it does not parse, or lacks what the CDI
    registry requires (`cdiVersion`, a `vendor/class` kind, devices with string names):
    the registry refuses such a spec, and no device of it can be injected."""
    if is_json:
        doc = _json(text)
    else:
        # PyYAML's safe loader inside codec/yaml_bounded.py's depth and alias bounds; the text
        # itself is capped by the read (container/__init__.py, MAX_CDI_BYTES). Its YAML 1.1
        # scalars are what the CDI registry's decoder (sigs.k8s.io/yaml over go-yaml) sees too:
        # an unquoted `name: 0` or `cdiVersion: 0.5` is a number there and fails below.
        try:
            doc = load_bounded(text)
        except YamlOverBounds as err:
            raise ConfigError(f"not checked: {err}", unsupported=True) from err
        except YamlRejected as err:
            raise ConfigError(f"not valid YAML: {err}") from err
    if not isinstance(doc, dict):
        raise ConfigError("not a mapping at the top level")
    version = doc.get("cdiVersion")
    if not isinstance(version, str):
        raise ConfigError('"cdiVersion" is missing or not a string')
    kind = doc.get("kind")
    if not isinstance(kind, str) or "/" not in kind:
        raise ConfigError('"kind" is missing or not vendor/class')
    devices = doc.get("devices")
    if not isinstance(devices, list) or not devices:
        raise ConfigError('"devices" is missing or empty')
    names = []
    for i, dev in enumerate(devices):
        name = dev.get("name") if isinstance(dev, dict) else None
        if not isinstance(name, str) or not name:
            # sigs.k8s.io/yaml decodes into Go structs: an unquoted `name: 0` is a number and
            # fails there too.
            raise ConfigError(f"devices[{i}].name is missing or not a string")
        names.append(name)
    return CdiSpec(version, kind, tuple(names), tuple(sorted(set(_driver_libs(doc)))))


def _driver_libs(node: object) -> list[str]:
    if isinstance(node, str):
        return _DRIVER_LIB.findall(node)
    if isinstance(node, dict):
        return [v for item in node.values() for v in _driver_libs(item)]
    if isinstance(node, list):
        return [v for item in node for v in _driver_libs(item)]
    return []
