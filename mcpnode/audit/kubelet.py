"""kubelet alignment: does the kubelet hand out the CPUs mcpnode placed for the GPUs?

mcpnode splits each NUMA node's cores into one exclusive slice per GPU and keeps housekeeping
CPUs out of every slice (mcpnode/placement/plan.py). On a Kubernetes node the kubelet decides
which CPUs a pod gets. Unless its CPU manager is `static` and its reserved CPUs are exactly
mcpnode's housekeeping CPUs, the kubelet hands GPU-slice CPUs to other pods (or keeps
housekeeping CPUs out of its reserve, so pods get the cores the agent and IRQs run on). The
topology manager decides whether a pod's CPUs sit on its GPU's NUMA node at all.

Where the configuration comes from (kubeadm's layout, and the distributions' packages):
* the config file: `--config` (kubeadm: /var/lib/kubelet/config.yaml), a
  KubeletConfiguration (kubelet.config.k8s.io/v1beta1);
* drop-ins: `--config-dir` (alpha in 1.28, GA in 1.35), `*.conf` files merged over the config
  file in name order (kubernetes.io/docs/reference/node/kubelet-config-directory-merging/);
* flags: the unit's ExecStart in kubeadm's 10-kubeadm.conf is `kubelet $KUBELET_KUBECONFIG_ARGS
  $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS`, the variables set by
  `Environment=` in kubelet.service.d drop-ins and by the EnvironmentFile=s
  /var/lib/kubelet/kubeadm-flags.env and /etc/default/kubelet (/etc/sysconfig/kubelet on RPM
  systems); an EnvironmentFile= overrides Environment= (systemd.exec(5)). Flags override the
  config file and its drop-ins ("Set Kubelet Parameters Via A Configuration File"); of two
  equal flags the last wins (pflag).
Not read: the layouts of k3s, RKE2 and MicroK8s, which pass kubelet arguments from their own
configuration (the area then SKIPs and says so); nor /etc/kubernetes/kubelet.conf, which on
kubeadm nodes is the kubelet's kubeconfig: it holds no policy and may embed a client key
(client-key-data) that must not end up in evidence or a snapshot.

Reads are capped (Host.read_optional with a limit) and YAML goes through codec/yaml_bounded.py: an
oversized file, a YAML bomb or deep nesting is a FAIL naming the file, never a traceback.

mcpnode's housekeeping CPUs: the caller's placement plan when it passes one (AuditContext:
the manifest build does, so the audit inside the manifest sees the plan it is published with),
else the published manifest's `placement.housekeeping_cpus`, which is what the running agent
hands out. This area never imports placement (layering: audit sits below it).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mcpnode.audit.context import AuditContext
from mcpnode.audit.facts import clip
from mcpnode.audit.model import Evidence, Finding, Status, skipped
from mcpnode.codec.yaml_bounded import YamlRejected, load_bounded
from mcpnode.errors import HostError, ManifestError, PathNotFound
from mcpnode.host import HostReader
from mcpnode.published import MANIFEST_PATH, read_manifest
from mcpnode.topology.model import CpuSet
from mcpnode.topology.parse import ParseError, parse_cpulist

DEFAULT_CONFIG = "/var/lib/kubelet/config.yaml"
# Unit drop-in directories, lowest precedence first (a same-named file in /etc wins).
UNIT_DIRS = (
    "/lib/systemd/system/kubelet.service.d",
    "/usr/lib/systemd/system/kubelet.service.d",
    "/etc/systemd/system/kubelet.service.d",
)
ENV_FILES = ("/var/lib/kubelet/kubeadm-flags.env", "/etc/default/kubelet", "/etc/sysconfig/kubelet")
ARG_VARS = ("KUBELET_CONFIG_ARGS", "KUBELET_KUBEADM_ARGS", "KUBELET_EXTRA_ARGS")
STATE_DIR = "/var/lib/kubelet"

MAX_CONFIG_BYTES = 1 << 20  # a kubelet config is a few KiB
MAX_SMALL_BYTES = 64 << 10  # flag files and unit drop-ins
MAX_DROPINS = 64

# KubeletConfiguration field -> (flag, kubelet default). Defaults: the v1beta1 defaulting
# (pkg/kubelet/apis/config/v1beta1/defaults.go).
FIELDS: dict[str, tuple[str, Any]] = {
    "cpuManagerPolicy": ("cpu-manager-policy", "none"),
    "cpuManagerPolicyOptions": ("cpu-manager-policy-options", {}),
    "topologyManagerPolicy": ("topology-manager-policy", "none"),
    "topologyManagerScope": ("topology-manager-scope", "container"),
    "reservedSystemCPUs": ("reserved-cpus", ""),
    "memoryManagerPolicy": ("memory-manager-policy", "None"),
    "reservedMemory": ("reserved-memory", []),
}
FLAGS = {"config", "config-dir"} | {flag for flag, _ in FIELDS.values()}

CPU_POLICIES = ("none", "static")
TOPOLOGY_POLICIES = ("none", "best-effort", "restricted", "single-numa-node")
TOPOLOGY_SCOPES = ("container", "pod")
MEMORY_POLICIES = ("None", "Static")


@dataclass(frozen=True)
class Setting:
    value: Any
    source: str  # "FILE", "FILE (VAR: --flag)" or "kubelet default"


@dataclass(frozen=True)
class KubeletFacts:
    found: bool
    looked: tuple[str, ...]  # where a configuration was looked for
    read: tuple[str, ...] = ()  # files that contributed, in order
    error: str | None = None  # the configuration cannot be used: one line naming file and field
    settings: Mapping[str, Setting] = field(default_factory=dict)
    config_path: str = DEFAULT_CONFIG  # where a remedy should edit
    housekeeping: CpuSet | None = None
    housekeeping_source: str = ""  # where it came from, or why it is unknown
    smt: bool = False  # some core has more than one thread


class _Bad(Exception):
    """One line naming the file and the field."""


# -- collect ----------------------------------------------------------------------------------


def collect(host: HostReader, ctx: AuditContext) -> KubeletFacts:
    looked = (DEFAULT_CONFIG, *ENV_FILES, *UNIT_DIRS)
    smt = any(len(c.siblings) > 1 for c in ctx.topology.cpus.cpus)
    hk, hk_source = _housekeeping(host, ctx)
    read: list[str] = []
    try:
        variables, var_source = _unit_variables(host, read)
        flags = _flags(variables, var_source)
        settings, config_path, found_config = _settings(host, flags, read)
    except _Bad as err:
        return KubeletFacts(True, looked, tuple(read), str(err), {}, DEFAULT_CONFIG, hk, hk_source)
    found = found_config or bool(read)
    return KubeletFacts(found, looked, tuple(read), None, settings, config_path, hk, hk_source, smt)


def _read(host: HostReader, path: str, cap: int) -> str | None:
    try:
        return host.read_optional(path, limit=cap)
    except HostError as err:
        raise _Bad(f"{path}: unreadable ({err.detail})") from err


def _unit_variables(host: HostReader, read: list[str]) -> tuple[dict[str, str], dict[str, str]]:
    """The kubelet unit's variables: Environment= of its drop-ins, then the EnvironmentFile=s
    (the usual ones and any a drop-in names), which override them. Returns (variables,
    variable -> the file that set it)."""
    by_name: dict[str, str] = {}
    for d in UNIT_DIRS:
        try:
            names = host.listdir_optional(d)
        except HostError as err:
            raise _Bad(f"{d}: unreadable ({err.detail})") from err
        for name in names or ():
            if name.endswith(".conf"):
                by_name[name] = f"{d}/{name}"
    if len(by_name) > MAX_DROPINS:
        raise _Bad(f"{UNIT_DIRS[-1]}: more than {MAX_DROPINS} kubelet unit drop-ins")
    variables: dict[str, str] = {}
    source: dict[str, str] = {}
    env_files = list(ENV_FILES)
    for name in sorted(by_name):
        path = by_name[name]
        text = _read(host, path, MAX_SMALL_BYTES)
        if text is None:
            continue
        read.append(path)
        for key, value in _unit_lines(text):
            if key == "Environment":
                for k, v in _assignments(value, path):
                    variables[k] = v
                    source[k] = path
            elif key == "EnvironmentFile":
                named = value.strip().lstrip("-")
                if named.startswith("/") and named not in env_files:
                    env_files.append(named)
    for path in env_files:
        text = _read(host, path, MAX_SMALL_BYTES)
        if text is None:
            continue
        read.append(path)
        for line in text.splitlines():
            line = line.strip()
            if not line or line.startswith(("#", ";")) or "=" not in line:
                continue
            key, value = _env_line(line, path)
            variables[key] = value
            source[key] = path
    return variables, source


def _env_line(line: str, path: str) -> tuple[str, str]:
    """One `KEY=VALUE` line of an EnvironmentFile: an unquoted value runs to the end of the
    line (`KUBELET_EXTRA_ARGS=--a=1 --b` is both flags), a quoted one is unquoted
    (systemd.exec(5), EnvironmentFile=)."""
    key, _, value = line.partition("=")
    value = value.strip()
    if value[:1] in ("'", '"'):
        try:
            value = " ".join(shlex.split(value))
        except ValueError as err:
            raise _Bad(f"{path}: cannot parse {clip(line, 80)!r} ({err})") from err
    return key.strip(), value


def _unit_lines(text: str) -> list[tuple[str, str]]:
    """`Key=value` lines of a unit file's [Service] section (continuation lines joined)."""
    out: list[tuple[str, str]] = []
    section = ""
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.strip()
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        pending = ""
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line
            continue
        if section == "[Service]" and "=" in line:
            key, _, value = line.partition("=")
            out.append((key.strip(), value.strip()))
    return out


def _assignments(text: str, path: str) -> list[tuple[str, str]]:
    """`A=1 "B=two words"` (systemd's Environment= and env-file quoting) -> pairs."""
    try:
        words = shlex.split(text, comments=False)
    except ValueError as err:
        raise _Bad(f"{path}: cannot parse {clip(text, 80)!r} ({err})") from err
    return [(w.partition("=")[0], w.partition("=")[2]) for w in words if "=" in w]


def _flags(variables: Mapping[str, str], var_source: Mapping[str, str]) -> dict[str, Setting]:
    """The kubelet flags this area reads, in ExecStart's order (the last one wins)."""
    out: dict[str, Setting] = {}
    for var in ARG_VARS:
        text = variables.get(var)
        if not text:
            continue
        where = var_source.get(var, "kubelet unit")
        try:
            words = shlex.split(text)
        except ValueError as err:
            raise _Bad(f"{where}: {var}: cannot parse ({err})") from err
        i = 0
        while i < len(words):
            word = words[i]
            i += 1
            if not word.startswith("--"):
                continue
            name, eq, value = word[2:].partition("=")
            if name not in FLAGS:
                continue
            if not eq:
                if i >= len(words):
                    raise _Bad(f"{where}: {var}: --{name} has no value")
                value = words[i]
                i += 1
            out[name] = Setting(value, f"{where} ({var}: --{name})")
    return out


def _settings(
    host: HostReader, flags: Mapping[str, Setting], read: list[str]
) -> tuple[dict[str, Setting], str, bool]:
    """Defaults, then the config file, then its drop-ins, then the flags."""
    settings = {name: Setting(default, "kubelet default") for name, (_, default) in FIELDS.items()}
    config = flags.get("config")
    path = str(config.value) if config is not None else DEFAULT_CONFIG
    text = _read(host, path, MAX_CONFIG_BYTES)
    if text is None and config is not None:
        raise _Bad(f"{path}: named by {config.source} but absent: the kubelet cannot start")
    found = text is not None
    if text is not None:
        read.append(path)
        _merge(settings, _config_doc(path, text), path)
    config_dir = flags.get("config-dir")
    if config_dir is not None:
        d = str(config_dir.value)
        try:
            names = sorted(n for n in host.listdir_optional(d) or () if n.endswith(".conf"))
        except HostError as err:
            raise _Bad(f"{d}: unreadable ({err.detail})") from err
        if len(names) > MAX_DROPINS:
            raise _Bad(f"{d}: more than {MAX_DROPINS} kubelet config drop-ins")
        for name in names:
            p = f"{d}/{name}"
            t = _read(host, p, MAX_CONFIG_BYTES)
            if t is not None:
                read.append(p)
                _merge(settings, _config_doc(p, t), p)
    for name, (flag, _) in FIELDS.items():
        got = flags.get(flag)
        if got is not None:
            settings[name] = Setting(_flag_value(name, str(got.value), got.source), got.source)
    return settings, path, found


def _config_doc(path: str, text: str) -> dict[str, Any]:
    try:
        doc = load_bounded(text)
    except YamlRejected as err:
        raise _Bad(f"{path}: not usable YAML: {err}") from err
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise _Bad(f"{path}: a KubeletConfiguration is a mapping, not {type(doc).__name__}")
    kind = doc.get("kind")
    if kind is not None and kind != "KubeletConfiguration":
        raise _Bad(f"{path}: kind: {clip(str(kind), 60)!r}, expected KubeletConfiguration")
    api = doc.get("apiVersion")
    if api is not None and not str(api).startswith("kubelet.config.k8s.io/"):
        raise _Bad(f"{path}: apiVersion: {clip(str(api), 60)!r}, expected kubelet.config.k8s.io/*")
    return doc


def _merge(settings: dict[str, Setting], doc: Mapping[str, Any], path: str) -> None:
    for name, (_, default) in FIELDS.items():
        if name not in doc or doc[name] is None:
            continue
        value = doc[name]
        if not isinstance(value, type(default)):
            raise _Bad(
                f"{path}: {name}: expected a {type(default).__name__}, got {clip(repr(value), 60)}"
            )
        if isinstance(value, dict):
            if not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
                raise _Bad(f"{path}: {name}: expected string keys and values")
            # Maps merge key by key across drop-ins (kubelet-config-directory-merging).
            base = settings[name].value if isinstance(settings[name].value, dict) else {}
            value = {**base, **value}
        settings[name] = Setting(value, path)


def _flag_value(name: str, text: str, source: str) -> Any:
    """A flag's text as the field's type: `k=v,k=v` for the options map."""
    if name == "cpuManagerPolicyOptions":
        out: dict[str, str] = {}
        for part in filter(None, text.split(",")):
            k, eq, v = part.partition("=")
            if not eq:
                raise _Bad(f"{source}: expected key=value pairs, got {clip(part, 40)!r}")
            out[k.strip()] = v.strip()
        return out
    if name == "reservedMemory":
        return [text]  # only its presence matters here
    return text


def _housekeeping(host: HostReader, ctx: AuditContext) -> tuple[CpuSet | None, str]:
    if ctx.housekeeping is not None:
        return ctx.housekeeping, "mcpnode's placement plan (this run)"
    try:
        doc = read_manifest(host)
    except PathNotFound:
        return None, f"no manifest published at {MANIFEST_PATH}"
    except HostError as err:  # untrusted or unreadable
        return None, f"{MANIFEST_PATH}: unusable ({clip(err.detail, 320)})"
    except ManifestError as err:  # a field unusable; the message names the file first
        return None, f"unusable manifest ({clip(str(err), 320)})"
    # every cpulist was checked by the reader
    return parse_cpulist(doc["placement"]["housekeeping_cpus"]), (
        f"{MANIFEST_PATH} placement.housekeeping_cpus"
    )


# -- check (pure) -----------------------------------------------------------------------------


def check(facts: KubeletFacts, ctx: AuditContext) -> list[Finding]:
    if not facts.found:
        return skipped(
            "kubelet.config",
            "no kubelet configuration found: not a Kubernetes node, or not one laid out "
            "like kubeadm's (k3s, RKE2 and MicroK8s keep kubelet arguments in their own "
            "files, which are not read)",
            Evidence("looked in", ", ".join(facts.looked)),
        )
    read = tuple(Evidence(p, "read") for p in facts.read)
    if facts.error is not None:
        return [
            Finding(
                "kubelet.config",
                Status.FAIL,
                f"kubelet configuration not checked: {facts.error}",
                (*read, Evidence("error", facts.error)),
                "Fix the file named above (the kubelet refuses it too, or reads something "
                "other than intended), then re-run `mcpnode audit --only kubelet`",
            )
        ]
    s = facts.settings
    config = Finding(
        "kubelet.config",
        Status.PASS,
        "kubelet configuration read from " + (", ".join(facts.read) or "defaults only"),
        read,
    )
    if not ctx.has_gpus:
        # A CPU-only node of the cluster: mcpnode places no GPU work here, so there is no
        # slice for the kubelet to respect (the values are still shown).
        why = "no GPU on this node: no GPU CPU slices for the kubelet to align with"
        return [config] + [
            Finding(fid, Status.SKIP, why, _ev(s, *names))
            for fid, names in (
                ("kubelet.cpu-manager", ("cpuManagerPolicy",)),
                ("kubelet.reserved-cpus", ("reservedSystemCPUs",)),
                ("kubelet.topology-manager", ("topologyManagerPolicy", "topologyManagerScope")),
                ("kubelet.memory-manager", ("memoryManagerPolicy",)),
            )
        ]
    out = [config, _cpu_manager(s, facts)]
    out.extend(_cpu_options(s, facts))
    out.append(_reserved(s, facts))
    out.extend(_topology(s, facts))
    out.append(_memory(s, facts))
    return out


def _ev(s: Mapping[str, Setting], *names: str) -> tuple[Evidence, ...]:
    return tuple(Evidence(s[n].source, f"{n}: {_show(s[n].value)}") for n in names)


def _show(value: Any) -> str:
    if isinstance(value, dict):
        return ",".join(f"{k}={v}" for k, v in sorted(value.items())) or "{}"
    if isinstance(value, list):
        return f"{len(value)} entries"
    return repr(value) if value == "" else str(value)


def _restart(facts: KubeletFacts, manager: str) -> str:
    return (
        f"drain the node, remove {STATE_DIR}/{manager}_manager_state and restart the kubelet "
        "(the state file holds the old policy's assignments, and a kubelet whose policy differs "
        "from its state file's refuses to start)"
    )


def _cpu_manager(s: Mapping[str, Setting], facts: KubeletFacts) -> Finding:
    fid = "kubelet.cpu-manager"
    policy = s["cpuManagerPolicy"].value
    ev = _ev(s, "cpuManagerPolicy")
    if policy == "static":
        return Finding(
            fid, Status.PASS, "CPU manager static: Guaranteed pods get exclusive CPUs", ev
        )
    hk = facts.housekeeping.cpulist() if facts.housekeeping else "<housekeeping CPUs>"
    if policy == "none":
        return Finding(
            fid,
            Status.WARN,
            "CPU manager none: every pod shares every CPU, GPU slices included; no pod can hold "
            "its GPU's slice exclusively",
            ev,
            f"In {facts.config_path} set `cpuManagerPolicy: static` and `reservedSystemCPUs: "
            f'"{hk}"`, then {_restart(facts, "cpu")}',
        )
    return Finding(
        fid,
        Status.FAIL,
        f"cpuManagerPolicy {clip(str(policy), 40)!r} is not a policy the kubelet knows "
        f"({', '.join(CPU_POLICIES)}): it refuses to start",
        ev,
        f"In {facts.config_path} set `cpuManagerPolicy: static`",
    )


def _cpu_options(s: Mapping[str, Setting], facts: KubeletFacts) -> list[Finding]:
    """full-pcpus-only: with SMT, static allocates single threads, so two pods can share a core;
    mcpnode's slices are whole cores (cpu-management-policies, "Static policy options")."""
    if s["cpuManagerPolicy"].value != "static":
        return []
    fid = "kubelet.cpu-manager.options"
    opts = s["cpuManagerPolicyOptions"].value
    ev = _ev(s, "cpuManagerPolicyOptions")
    if str(opts.get("full-pcpus-only", "false")).lower() == "true":
        return [Finding(fid, Status.PASS, "full-pcpus-only: pods get whole cores", ev)]
    if not facts.smt:
        return [Finding(fid, Status.PASS, "no SMT: every exclusive CPU is a whole core", ev)]
    return [
        Finding(
            fid,
            Status.WARN,
            "SMT is on and full-pcpus-only is not set: the kubelet may give the two threads of "
            "one core to two pods, while mcpnode's slices are whole cores",
            ev,
            f'In {facts.config_path} set `cpuManagerPolicyOptions: {{"full-pcpus-only": "true"}}`, '
            f"then {_restart(facts, 'cpu')}",
        )
    ]


def _reserved(s: Mapping[str, Setting], facts: KubeletFacts) -> Finding:
    fid = "kubelet.reserved-cpus"
    policy = s["cpuManagerPolicy"].value
    ev = (*_ev(s, "reservedSystemCPUs"), Evidence("mcpnode housekeeping", _hk_value(facts)))
    if policy != "static":
        return Finding(
            fid,
            Status.SKIP,
            f"CPU manager {policy}: the kubelet hands out no exclusive CPUs, nothing to align",
            ev,
        )
    if facts.housekeeping is None:
        return Finding(
            fid,
            Status.FAIL,
            "kubelet reserved CPUs not compared: mcpnode's housekeeping CPUs are unknown "
            f"({facts.housekeeping_source})",
            ev,
            "Publish the manifest (`mcpnode manifest publish`, or start the agent), then re-run "
            "`mcpnode audit --only kubelet`",
        )
    hk = facts.housekeeping
    raw = str(s["reservedSystemCPUs"].value).strip()
    fix_kubelet = (
        f'In {facts.config_path} set `reservedSystemCPUs: "{hk.cpulist()}"`, then '
        f"{_restart(facts, 'cpu')}"
    )
    if not raw:
        return Finding(
            fid,
            Status.FAIL,
            "reservedSystemCPUs is not set: the kubelet picks its reserved CPUs itself (lowest "
            f"cores first, sized by kubeReserved/systemReserved), not mcpnode's housekeeping "
            f"CPUs {hk.cpulist() or '(none)'}, and hands GPU-slice CPUs to other pods",
            ev,
            fix_kubelet
            if hk
            else "Set [placement] housekeeping in /etc/mcpnode/mcpnode.toml "
            "(the kubelet's static policy needs reserved CPUs), then reservedSystemCPUs to match",
        )
    try:
        reserved = parse_cpulist(raw)
    except ParseError as err:
        return Finding(
            fid,
            Status.FAIL,
            f"{s['reservedSystemCPUs'].source}: reservedSystemCPUs {clip(raw, 40)!r} is not a "
            f"cpulist ({err})",
            ev,
            fix_kubelet,
        )
    if reserved == hk:
        return Finding(
            fid,
            Status.PASS,
            f"kubelet reserved CPUs {reserved.cpulist()} = mcpnode housekeeping CPUs",
            ev,
        )
    parts = []
    if hk - reserved:
        parts.append(
            f"CPUs {CpuSet(hk - reserved).cpulist()} are mcpnode housekeeping (agent, IRQs) but "
            "the kubelet may give them exclusively to pods"
        )
    if reserved - hk:
        parts.append(
            f"CPUs {CpuSet(reserved - hk).cpulist()} are in GPU slices but the kubelet never "
            "gives them to pods"
        )
    return Finding(
        fid,
        Status.FAIL,
        f"kubelet reserves {reserved.cpulist()}, mcpnode keeps {hk.cpulist() or '(none)'}: "
        + "; ".join(parts),
        ev,
        fix_kubelet + f'; or set [placement] housekeeping = "{reserved.cpulist()}" in '
        "/etc/mcpnode/mcpnode.toml (mcpnode widens it to whole cores)",
    )


def _hk_value(facts: KubeletFacts) -> str:
    if facts.housekeeping is None:
        return f"unknown: {facts.housekeeping_source}"
    return f"{facts.housekeeping.cpulist() or '(none)'} from {facts.housekeeping_source}"


def _topology(s: Mapping[str, Setting], facts: KubeletFacts) -> list[Finding]:
    fid = "kubelet.topology-manager"
    policy = s["topologyManagerPolicy"].value
    ev = _ev(s, "topologyManagerPolicy", "topologyManagerScope")
    fix = (
        f"In {facts.config_path} set `topologyManagerPolicy: single-numa-node` (or "
        "`restricted`) and `topologyManagerScope: pod`, then restart the kubelet"
    )
    out: list[Finding] = []
    if policy in ("single-numa-node", "restricted"):
        out.append(
            Finding(
                fid,
                Status.PASS,
                f"topology manager {policy}: a pod is admitted only with its CPUs and GPU aligned",
                ev,
            )
        )
    elif policy in ("none", "best-effort"):
        what = "does not align" if policy == "none" else "prefers but does not require aligning"
        out.append(
            Finding(
                fid,
                Status.WARN,
                f"topology manager {policy}: the kubelet {what} a pod's CPUs with its GPU's "
                "NUMA node; exclusive CPUs can land on the other socket",
                ev,
                fix,
            )
        )
    else:
        return [
            Finding(
                fid,
                Status.FAIL,
                f"topologyManagerPolicy {clip(str(policy), 40)!r} is not one the kubelet "
                f"knows ({', '.join(TOPOLOGY_POLICIES)})",
                ev,
                fix,
            )
        ]
    scope = s["topologyManagerScope"].value
    sid = "kubelet.topology-manager.scope"
    sev = _ev(s, "topologyManagerScope")
    if policy == "none":
        out.append(Finding(sid, Status.SKIP, "topology manager none: its scope is unused", sev))
    elif scope == "pod":
        out.append(Finding(sid, Status.PASS, "scope pod: all containers of a pod aligned", sev))
    elif scope == "container":
        out.append(
            Finding(
                sid,
                Status.INFO,
                "scope container: each container is aligned on its own, so a sidecar's CPUs "
                "can sit on another NUMA node than the model server's",
                sev,
                f"For multi-container pods set `topologyManagerScope: pod` in {facts.config_path}",
            )
        )
    else:
        out.append(
            Finding(
                sid,
                Status.FAIL,
                f"topologyManagerScope {clip(str(scope), 40)!r} is not one the kubelet knows "
                f"({', '.join(TOPOLOGY_SCOPES)})",
                sev,
                fix,
            )
        )
    return out


def _memory(s: Mapping[str, Setting], facts: KubeletFacts) -> Finding:
    fid = "kubelet.memory-manager"
    policy = s["memoryManagerPolicy"].value
    ev = _ev(s, "memoryManagerPolicy", "reservedMemory")
    if policy == "Static":
        if not s["reservedMemory"].value:
            return Finding(
                fid,
                Status.FAIL,
                "memory manager Static without reservedMemory: the kubelet refuses to start "
                "(the per-NUMA reservation must add up to kubeReserved + systemReserved + the "
                "hard eviction threshold)",
                ev,
                f"Add `reservedMemory` (one entry per NUMA node) to {facts.config_path}",
            )
        return Finding(
            fid, Status.PASS, "memory manager Static: Guaranteed pods get NUMA-local memory", ev
        )
    if policy == "None":
        return Finding(
            fid,
            Status.INFO,
            "memory manager None: a Guaranteed pod's memory is not bound to its GPU's NUMA "
            "node by the kubelet (`mcpnode exec` sets the memory policy inside the pod)",
            ev,
            f"For kubelet-enforced NUMA memory set `memoryManagerPolicy: Static` and "
            f"`reservedMemory` in {facts.config_path}, then {_restart(facts, 'memory')}",
        )
    return Finding(
        fid,
        Status.FAIL,
        f"memoryManagerPolicy {clip(str(policy), 40)!r} is not one the kubelet knows "
        f"({', '.join(MEMORY_POLICIES)})",
        ev,
        f"In {facts.config_path} set `memoryManagerPolicy: None` or `Static`",
    )
