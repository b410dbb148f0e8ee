"""The published manifest's one reader: `/run/mcpnode/manifest.json` is a root input.

The manifest decides what runs as root and where: `exec` sets its environment and exec's the
command, `systemd-dropin --write` turns its fields into unit directives that systemd runs as
root, `apply` places IRQs against its slices, the audit compares the kubelet's reserved CPUs
with it. So it is read like every other root input (profiles, the agent config, the journal):

1. **Trust** (`read_manifest`): `Host.read_trusted`: a regular file, opened `O_NOFOLLOW`,
   `fstat`ed, owned by root (or the running euid) and not group/world-writable, in directories
   nobody else can write up to `/`. Its own directory (`/run/mcpnode`) may not be shared even
   with the sticky bit: mcpnode creates it 0755, and in a 1777 directory anyone may plant the
   manifest's name before the first publish, and `agent.json` (whose pid makes a manifest
   current) beside it.
2. **Bounds while reading**: at most MAX_MANIFEST_BYTES; JSON nesting past Python's recursion
   limit, integers of more than 20 digits, NaN/Infinity and floats that overflow are refused
   by the parser hooks, before anything is built from them.
3. **Schema** `mcpnode.manifest/vN` with N == SCHEMA_MAJOR, and the **content hash**.
4. **Every field**, by the table in `_MANIFEST`: its type, its bound (string length, list
   length, integer range), and for what reaches a root action its grammar: GPU and MIG UUIDs
   (NVIDIA's `GPU-`/`MIG-` + hex and dashes, and R450-R465's `MIG-GPU-<uuid>/<gi>/<ci>`), PCI
   addresses, cpulists (mcpnode/codec/cpus.py: no CPU at or above the machine's possible CPUs),
   NUMA node ids (below MAX_NODES), and the launcher environment (an allow-list, ENV_ALLOWED).

Freshness (is it this boot's, with these CPUs online?) is the launch path's own question
(placement/source.py) and comes after. `parse_manifest` is steps 2-4 for copies of *other*
hosts' manifests (`fleet-report`), which are untrusted data by design: parsed and bounded the
same way, never executed, never written into a unit.

Pure apart from the one read; imports no layer above Host, so the audit (which sits below
placement) reads the manifest here too, not with a copy of its own.
"""

from __future__ import annotations

import hashlib
import json
import re
import stat

from mcpnode.codec.bounded import BoundError, parse_decimal
from mcpnode.codec.cpus import MAX_CPU, parse_list
from mcpnode.errors import HostError, ManifestError, PathNotFound, Untrusted

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (codec/typenames.py)
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any

    from mcpnode.host import HostReader

__all__ = [
    "ENV_ALLOWED",
    "MANIFEST_DIR",
    "MANIFEST_PATH",
    "MAX_MANIFEST_BYTES",
    "SCHEMA",
    "SCHEMA_MAJOR",
    "content_hash",
    "env_problem",
    "parse_manifest",
    "read_manifest",
]

SCHEMA = "mcpnode.manifest/v1"
SCHEMA_MAJOR = 1
MANIFEST_DIR = "/run/mcpnode"
MANIFEST_PATH = f"{MANIFEST_DIR}/manifest.json"
# An HGX manifest is ~20 KiB; 8,192 SR-IOV functions listed as NICs make ~3 MiB.
MAX_MANIFEST_BYTES = 8 << 20
# `publication` says when and where this copy was published (placement/source.py), like
# generated_at: republishing an unchanged machine keeps its hash.
_UNHASHED = ("content_hash", "generated_at", "publication")
_SCHEMA_RE = re.compile(r"mcpnode\.manifest/v([0-9]{1,6})", re.ASCII)

# The launcher environment a manifest may carry: exactly what placement/plan.py's launcher_env
# computes (docs/manifest.md, "Environment"). Not whole NCCL_*/UCX_* families: NCCL_NET_PLUGIN,
# NCCL_TUNER_PLUGIN and NCCL_PROFILER_PLUGIN dlopen() a library by name, UCX_MODULE_DIR loads
# UCX's modules from a directory, NCCL_DEBUG_FILE and UCX_LOG_FILE write files wherever they
# say: each would run or write as whoever the launch runs as, often root. LD_*, PATH, PYTHON*,
# BASH_ENV and the like can therefore never come from a manifest, whoever wrote it.
ENV_ALLOWED = frozenset(
    {
        "CUDA_VISIBLE_DEVICES",
        "CUDA_DEVICE_ORDER",
        "NCCL_IB_HCA",
        "NCCL_SOCKET_IFNAME",
        "UCX_NET_DEVICES",
    }
)
_ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]*\Z", re.ASCII)
MAX_ENV_VALUE = 4096
MAX_NODES = 1 << 10  # MAX_NUMNODES with CONFIG_NODES_SHIFT=10, the largest distro setting
MAX_GPUS = 1 << 10
MAX_ITEMS = 1 << 17  # any list: NICs with 8,192 VFs each listed, problems, drift
MAX_STR = 4096  # names, versions, reasons, evidence
_MAX_DIGITS = 20  # every 64-bit integer; JSON integers past it are refused while parsing
# NVIDIA's UUIDs (nvmlDeviceGetUUID): `GPU-` + 8-4-4-4-12 hex, MIG devices `MIG-` + the same
# since R470; R450-R465 printed `MIG-GPU-<parent uuid>/<gi>/<ci>`. Hex and dashes only.
_UUID = re.compile(
    r"(?:GPU|MIG)-[0-9A-Fa-f][0-9A-Fa-f-]{0,63}|MIG-GPU-[0-9A-Fa-f-]{1,64}/[0-9]{1,4}/[0-9]{1,4}",
    re.ASCII,
)
# Domain:bus:device.function as sysfs names it (lspci -D): 4-8 hex domain digits (VMD and Hyper-V
# domains reach 8), lower case.
_PCI = re.compile(r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-1][0-9a-f]\.[0-7]", re.ASCII)
_HASH = re.compile(r"sha256:[0-9a-f]{64}", re.ASCII)


def env_problem(name: object, value: object) -> str | None:
    """Why (`name`, `value`) may not be in a launch environment taken from a manifest, or
    None: an allowed name (ENV_ALLOWED), a value of printable ASCII (no NUL, newline or other
    control character: execve(2) ends a string at NUL, a unit file a line at a newline) of at
    most MAX_ENV_VALUE characters."""
    if not isinstance(name, str) or not isinstance(value, str):
        return "is not a string"
    if not _ENV_NAME.match(name):
        return "is not an environment variable name ([A-Z_][A-Z0-9_]*)"
    if name not in ENV_ALLOWED:
        return f"is not a variable mcpnode sets (allowed: {', '.join(sorted(ENV_ALLOWED))})"
    if len(value) > MAX_ENV_VALUE:
        return f"value is longer than {MAX_ENV_VALUE} characters"
    if not (value.isascii() and value.isprintable()):
        return "value holds a control or non-ASCII character"
    return None


# -- reading -----------------------------------------------------------------------------------


def read_manifest(host: HostReader, *, possible_cpus: int | None = None) -> dict[str, Any]:
    """The published manifest of the machine behind `host`, trusted, bounded and every field
    checked (module docstring, steps 1-4). `possible_cpus`: the machine's CPU count the
    cpulists are bounded by (None: read `/sys/devices/system/cpu/possible`, MAX_CPU when it
    cannot be read).

    Raises PathNotFound when none is published, Untrusted when root does not control it,
    ManifestError naming the file and the field for anything else about its content, and the
    other HostError subclasses (TooLarge, AccessDenied) from the read."""
    try:
        _no_shared_dir(host)
        data = host.read_trusted(MANIFEST_PATH, MAX_MANIFEST_BYTES)
    except PathNotFound as err:
        raise PathNotFound(
            MANIFEST_PATH, err.errno, "no manifest published (run `mcpnode manifest publish`)"
        ) from err
    limit = possible_cpus if possible_cpus is not None else _possible(host)
    return parse_manifest(data, MANIFEST_PATH, cpu_limit=limit)


def _no_shared_dir(host: HostReader) -> None:
    """The manifest's own directory: not a symlink, not writable by others even when sticky
    (read_trusted checks the rest of the path by the shared rule)."""
    st = host.lstat(MANIFEST_DIR)
    if st is None:
        return  # then the read says "no manifest published"
    if stat.S_ISLNK(st.mode):
        why = f"directory {MANIFEST_DIR} is a symbolic link"
    elif st.mode & 0o022:
        why = (
            f"directory {MANIFEST_DIR} is group- or world-writable (mode "
            f"{stat.S_IMODE(st.mode):04o}; mcpnode creates it 0755)"
        )
    else:
        return
    raise Untrusted(MANIFEST_PATH, None, f"refusing to trust it: {why}")


def _possible(host: HostReader) -> int:
    """One past the highest CPU the kernel could ever bring online (`possible`, fixed at
    boot; Documentation/admin-guide/cputopology.rst), MAX_CPU when it cannot be read."""
    try:
        text = host.read_optional("/sys/devices/system/cpu/possible", limit=4096)
        ids = parse_list(text or "")
    except (HostError, BoundError):
        return MAX_CPU
    return max(ids) + 1 if ids else MAX_CPU


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > _MAX_DIGITS:
        raise ValueError(f"an integer of {len(text.lstrip('-'))} digits")
    return int(text)


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"a number out of range ({text[:40]})")
    return value


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not a number")


def parse_manifest(
    data: bytes | str, source: str = MANIFEST_PATH, *, cpu_limit: int = MAX_CPU
) -> dict[str, Any]:
    """Steps 2-4 of the module docstring on bytes already read (bounded by the caller).
    Raises ManifestError, its message starting with `source` and naming the field."""
    try:
        doc = json.loads(
            data,
            parse_int=_bounded_int,
            parse_float=_finite_float,
            parse_constant=_no_constant,
        )
    except RecursionError:
        raise ManifestError(f"{source}: not JSON (nested too deeply)") from None
    except (ValueError, UnicodeDecodeError) as err:  # JSONDecodeError is a ValueError
        raise ManifestError(f"{source}: not JSON ({str(err)[:120]})") from None
    if not isinstance(doc, dict):
        raise ManifestError(f"{source}: not a JSON object")
    schema = doc.get("schema")
    m = _SCHEMA_RE.fullmatch(schema) if isinstance(schema, str) else None
    if m is None:
        shown = schema[:60] if isinstance(schema, str) else schema
        raise ManifestError(f"{source}: schema {shown!r} is not {SCHEMA}")
    major = int(m.group(1))
    if major > SCHEMA_MAJOR:
        raise ManifestError(
            f"{source}: schema {schema} is newer than this mcpnode reads ({SCHEMA});"
            " upgrade mcpnode, or republish with `mcpnode manifest publish`"
        )
    if major < SCHEMA_MAJOR:
        raise ManifestError(f"{source}: schema {schema} is older than {SCHEMA}; republish it")
    _check(doc, _MANIFEST, "", _Ctx(source, cpu_limit))
    if doc.get("content_hash") != content_hash(doc):
        raise ManifestError(f"{source}: content_hash does not match the content (edited?)")
    return doc


def content_hash(manifest: Mapping[str, Any]) -> str:
    """`sha256:<hex>` of the canonical JSON (sorted keys, no whitespace, UTF-8) of `manifest`
    without `content_hash`, `generated_at` and `publication`."""
    rest = {k: v for k, v in manifest.items() if k not in _UNHASHED}
    canon = json.dumps(rest, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(canon.encode()).hexdigest()


# -- the field table ---------------------------------------------------------------------------
# A spec is a function (value, path, ctx) -> None that raises ManifestError naming the field.


class _Ctx:
    __slots__ = ("cpu_limit", "source")

    def __init__(self, source: str, cpu_limit: int) -> None:
        self.source = source
        self.cpu_limit = cpu_limit

    def fail(self, path: str, why: str) -> ManifestError:
        return ManifestError(f"{self.source}: {path or 'the manifest'} {why}")


if TYPE_CHECKING:
    Spec = Callable[[object, str, _Ctx], None]


def _check(value: object, spec: Spec, path: str, ctx: _Ctx) -> None:
    spec(value, path, ctx)


def _str(
    max_len: int = MAX_STR, pattern: re.Pattern[str] | None = None, what: str = "a string"
) -> Spec:
    def check(value: object, path: str, ctx: _Ctx) -> None:
        if not isinstance(value, str):
            raise ctx.fail(path, f"is not {what}")
        if len(value) > max_len:
            raise ctx.fail(path, f"is longer than {max_len} characters")
        if "\x00" in value:
            raise ctx.fail(path, "holds a NUL character")
        if pattern is not None and not pattern.fullmatch(value):
            raise ctx.fail(path, f"is not {what}")

    return check


def _int(low: int = 0, high: int = (1 << 63) - 1) -> Spec:
    def check(value: object, path: str, ctx: _Ctx) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ctx.fail(path, f"is not an integer in {low}..{high}")

    return check


def _number(value: object, path: str, ctx: _Ctx) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ctx.fail(path, "is not a non-negative number")


def _bool(value: object, path: str, ctx: _Ctx) -> None:
    if not isinstance(value, bool):
        raise ctx.fail(path, "is not true or false")


def _opt(spec: Spec) -> Spec:
    def check(value: object, path: str, ctx: _Ctx) -> None:
        if value is not None:
            spec(value, path, ctx)

    return check


def _list(item: Spec, max_len: int = MAX_ITEMS) -> Spec:
    def check(value: object, path: str, ctx: _Ctx) -> None:
        if not isinstance(value, list):
            raise ctx.fail(path, "is not a list")
        if len(value) > max_len:
            raise ctx.fail(path, f"has more than {max_len} entries")
        for i, v in enumerate(value):
            item(v, f"{path}[{i}]", ctx)

    return check


def _obj(fields: Mapping[str, Spec], optional: frozenset[str] = frozenset()) -> Spec:
    """An object with these fields (each required unless in `optional`); other keys are
    allowed (a later v1 may add fields) but bounded like any value (_any)."""

    def check(value: object, path: str, ctx: _Ctx) -> None:
        if not isinstance(value, dict):
            raise ctx.fail(path, "is not an object")
        for key, spec in fields.items():
            where = f"{path}.{key}" if path else key
            if key not in value:
                if key in optional:
                    continue
                raise ctx.fail(where, "is missing")
            spec(value[key], where, ctx)
        for key in value.keys() - fields.keys():
            _any(value[key], f"{path}.{key}" if path else key, ctx)

    return check


def _any(value: object, path: str, ctx: _Ctx, depth: int = 0) -> None:
    """Any JSON value, bounded: strings MAX_STR*16, lists MAX_ITEMS, nesting 16."""
    if depth > 16:
        raise ctx.fail(path, "is nested more than 16 levels")
    if isinstance(value, str):
        if len(value) > MAX_STR * 16:
            raise ctx.fail(path, f"is longer than {MAX_STR * 16} characters")
    elif isinstance(value, list):
        if len(value) > MAX_ITEMS:
            raise ctx.fail(path, f"has more than {MAX_ITEMS} entries")
        for i, v in enumerate(value):
            _any(v, f"{path}[{i}]", ctx, depth + 1)
    elif isinstance(value, dict):
        if len(value) > MAX_ITEMS:
            raise ctx.fail(path, f"has more than {MAX_ITEMS} entries")
        for k, v in value.items():
            _any(v, f"{path}.{k}", ctx, depth + 1)


def _cpulist(value: object, path: str, ctx: _Ctx) -> None:
    if not isinstance(value, str):
        raise ctx.fail(path, "is not a cpulist")
    try:
        parse_list(value, limit=ctx.cpu_limit)
    except BoundError as err:
        raise ctx.fail(path, f"is not a usable cpulist: {err}") from None


def _env(value: object, path: str, ctx: _Ctx) -> None:
    if not isinstance(value, dict):
        raise ctx.fail(path, "is not an object of strings")
    if len(value) > 64:
        raise ctx.fail(path, "has more than 64 variables")
    for name, val in value.items():
        why = env_problem(name, val)
        if why is not None:
            raise ctx.fail(f"{path}.{_shown(name)}", why)


def _shown(name: str) -> str:
    return name if _ENV_NAME.match(name) and len(name) <= 64 else repr(name[:64])


def _node_distances(value: object, path: str, ctx: _Ctx) -> None:
    if not isinstance(value, dict) or len(value) > MAX_NODES:
        raise ctx.fail(path, f"is not an object of at most {MAX_NODES} distances")
    for key, dist in value.items():
        try:
            parse_decimal(key, max_digits=4, minimum=0, maximum=MAX_NODES - 1)
        except BoundError:
            raise ctx.fail(f"{path}.{key[:20]!r}", "is not a NUMA node id") from None
        _int(0, 255)(dist, f"{path}.{key}", ctx)


def _counts(value: object, path: str, ctx: _Ctx) -> None:
    if not isinstance(value, dict) or len(value) > 16:
        raise ctx.fail(path, "is not an object of at most 16 counts")
    for key, count in value.items():
        _str(16)(key, f"{path} key", ctx)
        _int()(count, f"{path}.{key}", ctx)


_TEXT = _str()
_OPT_TEXT = _opt(_str())
_NAME = _str(255)
_NODE = _int(0, MAX_NODES - 1)
_UUID_SPEC = _str(128, _UUID, "a GPU or MIG UUID (GPU-/MIG- and hex)")
_PCI_SPEC = _str(16, _PCI, "a PCI address (dddd:bb:dd.f)")
_LINK = _obj(
    {
        "speed_gts": _opt(_number),
        "width": _opt(_int(0, 64)),
        "max_speed_gts": _opt(_number),
        "max_width": _opt(_int(0, 64)),
    }
)
_NIC_CHOICE = _obj(
    {
        "address": _PCI_SPEC,
        "rdma": _opt(_NAME),
        "netdevs": _list(_NAME, 4096),
        "bucket": _str(8),
        "link_speed_gts": _opt(_number),
        "link_width": _opt(_int(0, 64)),
    }
)
_MIG = _obj(
    {
        "uuid": _UUID_SPEC,
        "gpu_instance_id": _opt(_int(0, 1 << 16)),
        "compute_instance_id": _opt(_int(0, 1 << 16)),
        "memory_mib": _opt(_int()),
        "profile": _opt(_NAME),
        "env": _env,
    }
)
_PLACED_GPU = _obj(
    {
        "index": _int(0, MAX_GPUS - 1),
        "uuid": _opt(_UUID_SPEC),
        "address": _PCI_SPEC,
        "numa_node": _opt(_NODE),
        "numa_source": _str(64),
        "local_cpus": _cpulist,
        "slice_cpus": _cpulist,
        "cache_cpus": _cpulist,
        "socket_cpus": _cpulist,
        "memory_nodes": _cpulist,
        "nics": _list(_NIC_CHOICE, 64),
        "nvlink_peers": _list(_int(0, MAX_GPUS - 1), MAX_GPUS),
        "env": _env,
        "mig_devices": _list(_MIG, 64),
    },
    # cache_cpus and socket_cpus came later in v1: older manifests are still read
    optional=frozenset({"mig_devices", "cache_cpus", "socket_cpus"}),
)
_GPU = _obj(
    {
        "index": _int(0, MAX_GPUS - 1),
        "address": _PCI_SPEC,
        "uuid": _opt(_UUID_SPEC),
        "name": _opt(_NAME),
        "minor": _opt(_int(0, 1 << 20)),
        "numa_node": _opt(_NODE),
        "numa_source": _str(64),
        "memory_numa_node": _opt(_NODE),
        "local_cpus": _opt(_cpulist),
        "pcie": _LINK,
        "nvlinks_active": _opt(_int(0, 64)),
        "fabric_state": _opt(_NAME),
        "health": _obj(
            {"status": _str(16), "failed": _list(_NAME, 4096), "warned": _list(_NAME, 4096)}
        ),
    }
)
_NIC = _obj(
    {
        "address": _PCI_SPEC,
        "driver": _opt(_NAME),
        "rdma_devices": _list(_NAME, 4096),
        "netdevs": _list(
            _obj(
                {
                    "name": _NAME,
                    "operstate": _opt(_NAME),
                    "speed_mbps": _opt(_int(-1, 1 << 32)),
                    "mtu": _opt(_int(0, 1 << 32)),
                }
            ),
            4096,
        ),
        "numa_node": _opt(_NODE),
        "pcie": _LINK,
        "virtual_function": _bool,
    }
)
_NUMA_NODE = _obj(
    {
        "id": _NODE,
        "cpus": _cpulist,
        "memory_mib": _opt(_int()),
        "cpuless": _bool,
        "distances": _node_distances,
        "gpu_memory_node": _opt(_obj({"gpu": _int(0, MAX_GPUS - 1), "address": _PCI_SPEC})),
    },
    # gpu_memory_node came later in v1: older manifests are still read
    optional=frozenset({"gpu_memory_node"}),
)
_CACHE = _obj(
    {
        "level": _int(1, 9),
        "cpus": _cpulist,
        "size_kib": _opt(_int(0, (1 << 32) - 1)),
        "id": _opt(_int(0, (1 << 32) - 1)),
    }
)
_PUBLICATION = _obj(
    {
        "boot_id": _opt(_str(64)),
        "uevent_seqnum": _opt(_int()),
        "cpus_online": _opt(_cpulist),
        "publisher_pid": _int(0, 1 << 32),
    }
)
_MANIFEST = _obj(
    {
        "schema": _str(64),
        "generated_at": _str(64),
        "content_hash": _str(80, _HASH, "a sha256: content hash"),
        "host": _obj(
            {
                "hostname": _opt(_NAME),
                "machine_id": _opt(_str(64)),
                "kernel": _opt(_NAME),
                "driver": _opt(_NAME),
                "cuda_driver": _opt(_NAME),
                "container_toolkit": _opt(_NAME),
            }
        ),
        "numa_nodes": _list(_NUMA_NODE, MAX_NODES),
        "caches": _list(_CACHE),
        "gpus": _list(_GPU, MAX_GPUS),
        "nics": _list(_NIC),
        "placement": _obj(
            {
                "housekeeping_policy": _NAME,
                "housekeeping_cpus": _cpulist,
                "gpus": _list(_PLACED_GPU, MAX_GPUS),
                "problems": _list(_TEXT),
            }
        ),
        "tuning": _obj(
            {
                "profile": _opt(_NAME),
                "source": _OPT_TEXT,
                "compliant": _opt(_bool),
                "unknown_reason": _OPT_TEXT,
                "drift": _list(_obj({"key": _NAME})),
                "error": _OPT_TEXT,
            }
        ),
        "audit": _opt(
            _obj(
                {
                    "profile": _opt(_NAME),
                    "counts": _counts,
                    "failed": _list(_NAME),
                    "warned": _list(_NAME),
                    "problems": _list(_TEXT),
                }
            )
        ),
        "problems": _list(
            _obj({"code": _str(64), "source": _OPT_TEXT, "detail": _OPT_TEXT}),
        ),
        "publication": _PUBLICATION,
        "probe": _any,
    },
    # `caches` came later in v1: a manifest published before it is still read.
    optional=frozenset({"publication", "probe", "caches"}),
)
