"""Kubernetes Node Feature Discovery: the local feature file.

nfd-worker's `local` source reads every file in `/etc/kubernetes/node-feature-discovery/
features.d/`: one `<prefix>/<name>=<value>` per line, `#` starts a comment, and a file over
64 kB is ignored whole (kubernetes-sigs/node-feature-discovery,
docs/usage/customization-guide.md, "Feature files"). A prefixed name is used because unprefixed
ones are auto-prefixed with `feature.node.kubernetes.io/`, which NFD's `DisableAutoPrefix` gate
changes; `kubernetes.io/` and its subdomains are denied (except `feature.node.kubernetes.io/`).

Every label is checked against the Kubernetes label syntax (apimachinery
`validation.IsQualifiedName` / `IsValidLabelValue`) before the file is rendered, so nfd-master
never drops one of ours: a value built from host data (a driver version, a GPU model) goes
through `sanitize_value` first.

Where NVIDIA's GPU Feature Discovery labels the same concept, the name part is GFD's, under
mcpnode's prefix (NVIDIA/k8s-device-plugin internal/lm/resource.go and nvml.go): `gpu.product`
(NVML's name with spaces made dashes), `gpu.count`, `gpu.memory` (MiB), `gpu.compute.major` /
`.minor`, `cuda.driver.major` / `.minor` / `.rev` (the *driver* version's parts, as GFD's
labels of that name are) and `cuda.runtime.major` / `.minor` (the CUDA version the driver
supports). The numbers are digits only, as the driver writes them, so node affinity's `Gt` /
`Lt` (which parse an integer) work on them. A
selector written for `nvidia.com/gpu.product` reads the same with `mcpnode.io/gpu.product`.

MIG and the machine, as GFD labels them (internal/lm/nvml.go, mig-strategy.go, strategy.go,
machine-type.go):
- `gpu.machine`: DMI's product_name with every space made a dash, `unknown` when it cannot be
  read (GFD's machineTypeUnknown); only on a node with GPUs, as GFD labels nothing without.
- `mig.capable`: `true` when any GPU answers nvmlDeviceGetMigMode (go-nvlib's IsMigCapable:
  NotSupported means not capable), `false` when every GPU answered NotSupported; left out when a
  GPU's answer is unknown (no NVML, another error).
- `mig.strategy`: GFD's is configured, and it writes the label only for `single` or `mixed`.
  mcpnode labels the one this node's MIG layout needs, by GFD's own test of a valid `single`
  layout (newMigStrategySingleLabeler): `single` when every GPU is in MIG mode, none is empty
  and all MIG devices share one profile; `mixed` for any other layout with a GPU in MIG mode
  (where `single` would label the node `MIG-INVALID`); no label when no GPU is in MIG mode
  (GFD's `none`).
- `mig-<profile>.count`: MIG devices per profile (`mig-1g.10gb.count=7`), GFD's `mixed`
  resource labels `nvidia.com/mig-<profile>.count`.

Expiry (`with_expiry`): nfd-worker drops the labels of a file whose `# +expiry-time=` directive
(RFC 3339) lies in the past (source/local/local.go, `parseDirectives`; the directive applies to
the lines after it). The agent writes one and rewrites the file before it expires, so labels of
an agent that died without stopping (SIGKILL, a crashed node daemon) vanish on their own; a
stopping agent removes the file outright.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from itertools import groupby

from mcpnode.errors import McpnodeError
from mcpnode.placement.exporters.inputs import (
    AuditSummary,
    gpu_link,
    gpu_name,
    nvlink_by_index,
    nvswitch_attached,
)
from mcpnode.placement.plan import Placement
from mcpnode.topology.model import Topology

PATH = "/etc/kubernetes/node-feature-discovery/features.d/mcpnode"
PREFIX = "mcpnode.io"

# Kubernetes label syntax (k8s.io/apimachinery/pkg/util/validation): a name part and a value
# are at most 63 characters of [A-Za-z0-9_.-] beginning and ending alphanumeric (a value may
# also be empty); the prefix is a DNS-1123 subdomain of at most 253 characters.
NAME_MAX = 63
VALUE_MAX = 63
PREFIX_MAX = 253
FILE_MAX_BYTES = 64 * 1024  # NFD ignores a larger feature file entirely
_NAME_RE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?\Z")
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_PREFIX_RE = re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*\Z")
_NOT_VALUE_CHAR = re.compile(r"[^A-Za-z0-9_.-]+")
_DENIED = "kubernetes.io"
_ALLOWED_K8S = "feature.node.kubernetes.io"

# NFD's directive lines start with this; the expiry directive is its only one mcpnode writes.
EXPIRY_DIRECTIVE = "# +expiry-time="
_VERSION_PART = re.compile(r"[0-9]+\Z")

# gpu-numa-layout lists one node per GPU (`0-0-0-0-1-1-1-1`); past 63 characters it switches to
# runs (`8x0-8x1`), and past that it is left out with a comment.
_UNKNOWN_NODE = "u"


class NfdLabelError(McpnodeError):
    """A label name or value that Kubernetes would reject, or a feature file over NFD's size
    limit. Raised by `validate_label` / `render`; never written."""


def label_error(key: str, value: str) -> str | None:
    """Why `key=value` is not a valid Kubernetes node label, or None when it is."""
    prefix, sep, name = key.rpartition("/")
    if not sep:
        return f"{key!r}: unprefixed (NFD would add feature.node.kubernetes.io/)"
    if not prefix or len(prefix) > PREFIX_MAX or not _PREFIX_RE.match(prefix):
        return f"{key!r}: prefix must be a DNS subdomain of at most {PREFIX_MAX} characters"
    if (prefix == _DENIED or prefix.endswith("." + _DENIED)) and not (
        prefix == _ALLOWED_K8S or prefix.endswith("." + _ALLOWED_K8S)
    ):
        return f"{key!r}: the {_DENIED} namespace is denied by nfd-master"
    if not name or len(name) > NAME_MAX or not _NAME_RE.match(name):
        return (
            f"{key!r}: name must be 1-{NAME_MAX} characters of [A-Za-z0-9_.-], "
            "beginning and ending alphanumeric"
        )
    if len(value) > VALUE_MAX or (value and not _NAME_RE.match(value)):
        return (
            f"{key}={value!r}: value must be at most {VALUE_MAX} characters of "
            "[A-Za-z0-9_.-], beginning and ending alphanumeric"
        )
    return None


def validate_label(key: str, value: str) -> None:
    """Raise NfdLabelError unless `key=value` is a valid Kubernetes node label."""
    why = label_error(key, value)
    if why is not None:
        raise NfdLabelError(why)


def sanitize_value(raw: str) -> str:
    """`raw` made into a valid label value: every run of other characters becomes `-`, cut to 63
    characters, then separators stripped from both ends. Valid input comes back unchanged; the
    result may be empty (a valid value, but the caller should rather leave the label out)."""
    return _NOT_VALUE_CHAR.sub("-", raw)[:VALUE_MAX].strip("-_.")


def numa_layout(nodes: Iterable[int | None]) -> str | None:
    """One NUMA node per GPU in index order, `0-0-0-0-1-1-1-1` (`u` for unknown); as runs,
    `4x0-4x1`, when that is over 63 characters; None when even the runs do not fit."""
    ids = [_UNKNOWN_NODE if n is None else str(n) for n in nodes]
    if not ids:
        return None
    full = "-".join(ids)
    if len(full) <= VALUE_MAX:
        return full
    compact = "-".join(f"{len(list(run))}x{node}" for node, run in groupby(ids))
    return compact if len(compact) <= VALUE_MAX else None


def labels(
    topo: Topology, placement: Placement, audit: AuditSummary | None
) -> tuple[tuple[str, str], ...]:
    """The node's labels, sorted by name. A fact that is unknown is left out, never written as
    an empty or made-up value."""
    out: dict[str, str] = {}

    def put(name: str, value: object) -> None:
        if value is None:
            return
        text = value if isinstance(value, str) else _scalar(value)
        text = sanitize_value(text)
        if text:
            out[f"{PREFIX}/{name}"] = text

    gpus = topo.gpus
    put("gpu.count", len(gpus))
    put("numa-nodes", len(topo.numa_nodes))
    put("numa-nodes-with-cpus", sum(1 for n in topo.numa_nodes if n.has_cpus))
    if topo.nvml is not None and topo.nvml.available:
        for name, part in _version_parts(
            topo.nvml.driver_version, ("cuda.driver.major", "cuda.driver.minor", "cuda.driver.rev")
        ):
            put(name, part)
        for name, part in _version_parts(
            topo.nvml.cuda_driver_version, ("cuda.runtime.major", "cuda.runtime.minor")
        ):
            put(name, part)
    if gpus:
        names = {gpu_name(g) for g in gpus}
        known = sorted(n for n in names if n is not None)
        if len(known) > 1:
            put("gpu.product", "mixed")
        elif known and None not in names:
            put("gpu.product", _product_value(known[0]))
        nv = [g.nvml for g in gpus]
        put("gpu.memory", _agreed(n.memory_total_mib if n else None for n in nv))
        compute = _agreed_str(n.compute_capability if n else None for n in nv)
        major, _, minor = (compute or "").partition(".")
        if _VERSION_PART.match(major) and _VERSION_PART.match(minor):
            put("gpu.compute.major", int(major))
            put("gpu.compute.minor", int(minor))
        by_index = {p.index: p for p in placement.gpus}
        layout = numa_layout(
            by_index[g.index].numa_node if g.index in by_index else g.numa_node for g in gpus
        )
        put("gpu-numa-layout", layout)
        put("gpu.machine", (topo.identity.machine or "unknown").replace(" ", "-"))
        _mig_labels(topo, put)
        put("gpu-nic-pix", all(any(n.bucket == "PIX" for n in p.nics) for p in placement.gpus))
        slices = [len(p.slice_cpus) for p in placement.gpus]
        put("gpu-cpu-slice-min", min(slices) if slices else None)
        _nvlink_labels(topo, put)
        links = [gpu_link(g) for g in gpus]
        put("gpu-pcie-gen-max", _agreed(lk.gen_max for lk in links))
        put(
            "gpu-pcie-width-degraded",
            any(
                lk.width_current is not None
                and lk.width_max is not None
                and lk.width_current < lk.width_max
                for lk in links
            ),
        )
    put("rdma", any(n.rdma_devices for n in topo.nics))
    if audit is not None:
        put("audit-fail", audit.count("FAIL"))
        put("audit-warn", audit.count("WARN"))
        if gpus:
            # GPUs the audit found unhealthy (an XID, hardware throttling, a fatal AER ...):
            # a scheduler can keep new pods off them (nodeAffinity on gpu-unhealthy-count=0)
            index_of = {str(g.address): g.index for g in gpus}
            bad = sorted(index_of[a] for a in audit.unhealthy_gpus if a in index_of)
            put("gpu-unhealthy-count", len(bad))
            listed = "-".join(str(i) for i in bad)
            if bad and len(listed) <= VALUE_MAX:
                put("gpu-unhealthy", listed)
        put("tuning-profile", audit.profile)
        # Three-valued: `unknown` when compliance could not be told (never a missing label
        # a `NotIn false` selector would read as compliant).
        compliant = audit.tuning_compliant
        put("tuning-compliant", "unknown" if compliant is None else compliant)
    for key, value in out.items():
        validate_label(key, value)
    return tuple(sorted(out.items()))


def render(topo: Topology, placement: Placement, audit: AuditSummary | None) -> str:
    """The feature file, without an expiry (`with_expiry` adds one). Raises NfdLabelError for
    an invalid label or a file over 64 kB."""
    found = labels(topo, placement, audit)
    lines = [
        "# Kubernetes Node Feature Discovery local features, generated by `mcpnode export nfd`.",
        "# Rewritten atomically on every export; do not edit (see docs/exporters.md).",
    ]
    if topo.gpus and f"{PREFIX}/gpu-numa-layout" not in dict(found):
        lines.append("# gpu-numa-layout left out: over 63 characters even as runs")
    lines.extend(f"{k}={v}" for k, v in found)
    return _checked("\n".join(lines) + "\n")


def with_expiry(text: str, expires_at: datetime) -> str:
    """`text` (from `render`) with NFD's expiry directive before its first label, replacing any
    there: `# +expiry-time=2026-01-02T03:04:05Z` (RFC 3339, UTC, whole seconds). A naive
    `expires_at` is refused (ValueError): the agent's clock is UTC-aware throughout."""
    if expires_at.tzinfo is None:
        raise ValueError("expires_at must be timezone-aware")
    stamp = expires_at.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    lines = [ln for ln in text.splitlines() if not ln.startswith(EXPIRY_DIRECTIVE)]
    at = next((i for i, ln in enumerate(lines) if not ln.startswith("#")), len(lines))
    lines.insert(at, f"{EXPIRY_DIRECTIVE}{stamp}")
    return _checked("\n".join(lines) + "\n")


def expiry_of(text: str) -> datetime | None:
    """The expiry a feature file carries, as nfd-worker reads it (the last directive before the
    labels wins); None without one. Raises ValueError for a directive that is not RFC 3339."""
    found = None
    for line in text.splitlines():
        if line.startswith(EXPIRY_DIRECTIVE):
            value = line[len(EXPIRY_DIRECTIVE) :].strip()
            found = datetime.fromisoformat(value.replace("Z", "+00:00"))
            if found.tzinfo is None:
                raise ValueError(f"{value!r}: RFC 3339 needs a UTC offset")
        elif line and not line.startswith("#"):
            break
    return found


def _checked(text: str) -> str:
    size = len(text.encode())
    if size > FILE_MAX_BYTES:
        raise NfdLabelError(f"feature file is {size} bytes, over NFD's {FILE_MAX_BYTES}")
    return text


def _nvlink_labels(topo: Topology, put: Callable[[str, object], None]) -> None:
    nv = nvlink_by_index(topo)
    put("nvswitch", nvswitch_attached(topo))
    if not nv:
        put("nvlink", "none")
        return
    # The narrowest pair: what any two NVLink-connected GPUs can count on (NV18 on HGX H100,
    # NV12 on an A100 board or an H100 NVL pair).
    put("nvlink", f"NV{min(nv.values())}")
    idx = [g.index for g in topo.gpus]
    put("nvlink-all-pairs", all((a, b) in nv for a in idx for b in idx if a != b))


def _mig_labels(topo: Topology, put: Callable[[str, object], None]) -> None:
    """mig.capable, mig.strategy and the per-profile counts (module docstring)."""
    nv = [g.nvml for g in topo.gpus]
    modes = [n.mig_current if n is not None else None for n in nv]
    if any(m is not None for m in modes):
        put("mig.capable", True)
    elif all(n is not None and ("mig_mode", "NotSupported") in n.unavailable for n in nv):
        put("mig.capable", False)
    if None in nv or not any(modes):
        return
    per_gpu = [n.mig_devices if n is not None and n.mig_current else None for n in nv]
    profiles: dict[str, int] = {}
    for devices in per_gpu:
        for d in devices or ():
            if d.profile is not None:
                profiles[d.profile] = profiles.get(d.profile, 0) + 1
    single = all(modes) and all(per_gpu) and len(profiles) == 1
    put("mig.strategy", "single" if single else "mixed")
    for profile, count in sorted(profiles.items()):
        put(f"mig-{profile}.count", count)


def _product_value(name: str) -> str:
    """GFD's `gpu.product` spelling: NVML's name with every space made a dash
    (`NVIDIA H100 80GB HBM3` -> `NVIDIA-H100-80GB-HBM3`); `sanitize_value` does the rest."""
    return name.replace(" ", "-")


def _version_parts(version: str | None, names: tuple[str, ...]) -> list[tuple[str, str]]:
    """`535.183.01` -> [(names[0], "535"), (names[1], "183"), (names[2], "01")]: each dotted
    part that is all digits, written as the driver does (GFD keeps `01` too; node affinity's
    Gt/Lt parse it as the integer 1). Parts past len(names), and every part after one that is
    not a number, are left out."""
    out: list[tuple[str, str]] = []
    for name, part in zip(names, (version or "").split("."), strict=False):
        if not _VERSION_PART.match(part):
            break
        out.append((name, part))
    return out


def _agreed_str(values: Iterable[str | None]) -> str | None:
    seen = set(values)
    return next(iter(seen)) if len(seen) == 1 else None


def _agreed(values: Iterable[int | None]) -> int | None:
    """The one value all GPUs share; None when unknown somewhere or when they differ."""
    seen = set(values)
    if len(seen) == 1:
        return next(iter(seen))
    return None


def _scalar(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
