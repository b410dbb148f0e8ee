"""The probe's raw measurements as frozen data, and their JSON form `mcpnode.probe/v1`.

A run holds what was measured and nothing decided: per GPU and NUMA node the bandwidth of each
sample of host->device and device->host copies, per GPU pair the peer-copy samples, short-copy
latencies, where the host buffer's pages really were, and the PCIe link NVML reported right
after the copies. Analysis (analysis.py) turns a run into figures and findings, so a recorded
run replays to the same table and findings the live one gave.

Units: GB/s are 10^9 bytes per second (what nvbandwidth and DCGM print), latencies are
microseconds, sizes bytes. A case that could not be measured keeps its `error` and no samples;
`None` is unknown, never 0.

`parse_run` is strict: the file and the first bad field are named in one ProbeDataError line.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from mcpnode.errors import ProbeDataError
from mcpnode.topology.model import PciAddress

PROBE_SCHEMA = "mcpnode.probe/v1"
MAX_RUN_BYTES = 4 << 20  # a 16-GPU, 8-node run is ~100 KB; anything near this is not ours
MAX_SAMPLES = 1000
MAX_CASES = 20000

HostDirection = Literal["h2d", "d2h"]
HOST_DIRECTIONS: tuple[HostDirection, ...] = ("h2d", "d2h")

__all__ = ["PROBE_SCHEMA", "ProbeDataError", "ProbeRun", "dumps", "parse_run", "run_json"]

_PCI_RE = re.compile(r"([0-9a-f]{4}):([0-9a-f]{2}):([0-9a-f]{2})\.([0-7])")
# A bounded version: `v` and 5,000 digits is another schema, not an int() to convert.
_SCHEMA_RE = re.compile(r"mcpnode\.probe/v([0-9]{1,6})")


@dataclass(frozen=True)
class Settings:
    """How the copies were made (docs/probe.md, "Method")."""

    buffer_bytes: int  # size of each timed copy
    copies_per_sample: int  # copies between the two events of one sample
    samples: int  # samples per case; the analysis takes their median
    warmup_copies: int  # untimed copies before the first sample
    latency_bytes: int  # size of each latency copy
    latency_copies: int  # synchronous copies averaged into one latency sample


@dataclass(frozen=True)
class LinkState:
    """The GPU's PCIe link as NVML reported it right after its copies (under load: an idle
    GPU's link drops to Gen1, so the snapshot-time reading says little about a transfer)."""

    gen: int | None
    width: int | None


@dataclass(frozen=True)
class GpuRun:
    address: PciAddress
    name: str | None  # cuDeviceGetName
    link_under_load: LinkState | None  # None: NVML could not say
    error: str | None  # why this GPU was not measured at all (no context, no device memory)


@dataclass(frozen=True)
class HostCase:
    """Copies between one GPU and a pinned buffer on one NUMA node, in one direction."""

    gpu: PciAddress
    node: int
    direction: HostDirection
    cpus: str  # cpulist the probing thread was pinned to ("" when it could not be pinned)
    samples_gbps: tuple[float, ...]
    latency_us: tuple[float, ...]  # one per sample: mean of `latency_copies` small copies
    pages: int | None  # pages of the buffer
    pages_on_node: int | None  # of those, pages the kernel reported on `node` (move_pages)
    error: str | None


@dataclass(frozen=True)
class PeerCase:
    """Peer copies from GPU `src` to GPU `dst` (cuMemcpyPeerAsync), when the pair can P2P."""

    src: PciAddress
    dst: PciAddress
    can_access: bool  # cuDeviceCanAccessPeer(src, dst)
    samples_gbps: tuple[float, ...]
    latency_us: tuple[float, ...]
    error: str | None


@dataclass(frozen=True)
class ProbeRun:
    measured_at: str  # ISO 8601, seconds
    mcpnode_version: str
    hostname: str | None
    cuda_driver_version: str | None  # cuDriverGetVersion: "12.9"
    bindings_version: str | None  # cuda-bindings
    settings: Settings
    gpus: tuple[GpuRun, ...]
    host_cases: tuple[HostCase, ...]
    peer_cases: tuple[PeerCase, ...]
    problems: tuple[str, ...] = ()

    def gpu(self, address: PciAddress) -> GpuRun | None:
        return next((g for g in self.gpus if g.address == address), None)


# -- JSON out ----------------------------------------------------------------------------------


def _samples(values: Sequence[float]) -> list[float]:
    # Three decimals: 0.001 GB/s and 1 ns are far below any sample's noise.
    return [round(v, 3) for v in values]


def run_json(run: ProbeRun) -> dict[str, Any]:
    """The run as JSON-ready data, keys in a fixed order."""
    s = run.settings
    return {
        "schema": PROBE_SCHEMA,
        "measured_at": run.measured_at,
        "mcpnode_version": run.mcpnode_version,
        "hostname": run.hostname,
        "cuda_driver_version": run.cuda_driver_version,
        "bindings_version": run.bindings_version,
        "settings": {
            "buffer_bytes": s.buffer_bytes,
            "copies_per_sample": s.copies_per_sample,
            "samples": s.samples,
            "warmup_copies": s.warmup_copies,
            "latency_bytes": s.latency_bytes,
            "latency_copies": s.latency_copies,
        },
        "gpus": [
            {
                "address": str(g.address),
                "name": g.name,
                "link_under_load": None
                if g.link_under_load is None
                else {"gen": g.link_under_load.gen, "width": g.link_under_load.width},
                "error": g.error,
            }
            for g in run.gpus
        ],
        "host_cases": [
            {
                "gpu": str(c.gpu),
                "node": c.node,
                "direction": c.direction,
                "cpus": c.cpus,
                "samples_gbps": _samples(c.samples_gbps),
                "latency_us": _samples(c.latency_us),
                "pages": c.pages,
                "pages_on_node": c.pages_on_node,
                "error": c.error,
            }
            for c in run.host_cases
        ],
        "peer_cases": [
            {
                "src": str(c.src),
                "dst": str(c.dst),
                "can_access": c.can_access,
                "samples_gbps": _samples(c.samples_gbps),
                "latency_us": _samples(c.latency_us),
                "error": c.error,
            }
            for c in run.peer_cases
        ],
        "problems": list(run.problems),
    }


_NUMBER_LIST = re.compile(r"\[\s*(-?[0-9][0-9.eE+-]*(?:,\s*-?[0-9][0-9.eE+-]*)*)\s*\]")


def dumps(run: ProbeRun) -> str:
    """The file's text: indented, each list of samples on one line."""
    text = json.dumps(run_json(run), indent=1)
    return _NUMBER_LIST.sub(lambda m: "[" + re.sub(r",\s*", ", ", m.group(1)) + "]", text) + "\n"


# -- JSON in -----------------------------------------------------------------------------------


def _path(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


class _Reader:
    """Field access that names the file and the path of the first bad field."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, where: str, what: str) -> ProbeDataError:
        return ProbeDataError(f"{self.source}: {where}: {what}")

    def obj(self, value: Any, where: str) -> Mapping[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(where, "not an object")
        return value

    def get(self, obj: Mapping[str, Any], key: str, where: str) -> Any:
        if key not in obj:
            raise self.fail(_path(where, key), "missing")
        return obj[key]

    def str_or_none(self, obj: Mapping[str, Any], key: str, where: str) -> str | None:
        v = self.get(obj, key, where)
        if v is not None and not isinstance(v, str):
            raise self.fail(_path(where, key), "not a string")
        return v

    def int_(self, obj: Mapping[str, Any], key: str, where: str, low: int = 0) -> int:
        v = self.get(obj, key, where)
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            raise self.fail(_path(where, key), f"not an integer >= {low}")
        return v

    def int_or_none(self, obj: Mapping[str, Any], key: str, where: str) -> int | None:
        if self.get(obj, key, where) is None:
            return None
        return self.int_(obj, key, where)

    def address(self, obj: Mapping[str, Any], key: str, where: str) -> PciAddress:
        v = self.get(obj, key, where)
        m = _PCI_RE.fullmatch(v) if isinstance(v, str) else None
        if m is None:
            raise self.fail(_path(where, key), f"not a PCI address like 0000:1b:00.0 ({v!r})")
        return PciAddress(*(int(g, 16) for g in m.groups()))

    def floats(self, obj: Mapping[str, Any], key: str, where: str) -> tuple[float, ...]:
        v = self.get(obj, key, where)
        if not isinstance(v, list) or len(v) > MAX_SAMPLES:
            raise self.fail(_path(where, key), f"not a list of at most {MAX_SAMPLES} numbers")
        out = []
        for i, x in enumerate(v):
            if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
                raise self.fail(f"{_path(where, key)}[{i}]", "not a finite number")
            if x <= 0:
                raise self.fail(f"{_path(where, key)}[{i}]", "not positive")
            out.append(float(x))
        return tuple(out)

    def items(self, obj: Mapping[str, Any], key: str) -> list[tuple[str, Mapping[str, Any]]]:
        v = self.get(obj, key, "")
        if not isinstance(v, list) or len(v) > MAX_CASES:
            raise self.fail(key, f"not a list of at most {MAX_CASES} entries")
        return [(f"{key}[{i}]", self.obj(x, f"{key}[{i}]")) for i, x in enumerate(v)]


def parse_run(data: bytes | str, source: str) -> ProbeRun:
    """A run from the text of a `mcpnode.probe/v1` file. Raises ProbeDataError naming `source`
    and the field: larger than MAX_RUN_BYTES, not JSON, another schema, a newer major version,
    or any field of the wrong type or range."""
    r = _Reader(source)
    raw = data.encode() if isinstance(data, str) else data
    if len(raw) > MAX_RUN_BYTES:
        raise ProbeDataError(f"{source}: larger than {MAX_RUN_BYTES} bytes")
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError) as err:
        raise ProbeDataError(f"{source}: not JSON ({err})") from err
    top = r.obj(doc, "(top)")
    schema = top.get("schema")
    m = _SCHEMA_RE.fullmatch(schema) if isinstance(schema, str) else None
    if m is None:
        shown = schema if not isinstance(schema, str) or len(schema) <= 60 else schema[:60] + "…"
        raise r.fail("schema", f"{shown!r} is not {PROBE_SCHEMA}")
    if int(m.group(1)) != 1:
        raise r.fail("schema", f"{schema} is not {PROBE_SCHEMA}; this mcpnode reads v1 only")
    s = r.obj(r.get(top, "settings", ""), "settings")
    settings = Settings(
        buffer_bytes=r.int_(s, "buffer_bytes", "settings", 1),
        copies_per_sample=r.int_(s, "copies_per_sample", "settings", 1),
        samples=r.int_(s, "samples", "settings", 1),
        warmup_copies=r.int_(s, "warmup_copies", "settings"),
        latency_bytes=r.int_(s, "latency_bytes", "settings", 1),
        latency_copies=r.int_(s, "latency_copies", "settings", 1),
    )
    gpus = []
    for where, g in r.items(top, "gpus"):
        link = r.get(g, "link_under_load", where)
        state = None
        if link is not None:
            lo = r.obj(link, f"{where}.link_under_load")
            state = LinkState(
                r.int_or_none(lo, "gen", f"{where}.link_under_load"),
                r.int_or_none(lo, "width", f"{where}.link_under_load"),
            )
        gpus.append(
            GpuRun(
                r.address(g, "address", where),
                r.str_or_none(g, "name", where),
                state,
                r.str_or_none(g, "error", where),
            )
        )
    host_cases = []
    for where, c in r.items(top, "host_cases"):
        direction = r.get(c, "direction", where)
        if direction not in HOST_DIRECTIONS:
            raise r.fail(f"{where}.direction", f"{direction!r} is not h2d or d2h")
        cpus = r.get(c, "cpus", where)
        if not isinstance(cpus, str):
            raise r.fail(f"{where}.cpus", "not a cpulist string")
        host_cases.append(
            HostCase(
                gpu=r.address(c, "gpu", where),
                node=r.int_(c, "node", where),
                direction=direction,
                cpus=cpus,
                samples_gbps=r.floats(c, "samples_gbps", where),
                latency_us=r.floats(c, "latency_us", where),
                pages=r.int_or_none(c, "pages", where),
                pages_on_node=r.int_or_none(c, "pages_on_node", where),
                error=r.str_or_none(c, "error", where),
            )
        )
    peer_cases = []
    for where, c in r.items(top, "peer_cases"):
        can = r.get(c, "can_access", where)
        if not isinstance(can, bool):
            raise r.fail(f"{where}.can_access", "not true or false")
        peer_cases.append(
            PeerCase(
                src=r.address(c, "src", where),
                dst=r.address(c, "dst", where),
                can_access=can,
                samples_gbps=r.floats(c, "samples_gbps", where),
                latency_us=r.floats(c, "latency_us", where),
                error=r.str_or_none(c, "error", where),
            )
        )
    problems = r.get(top, "problems", "")
    if not isinstance(problems, list) or not all(isinstance(p, str) for p in problems):
        raise r.fail("problems", "not a list of strings")
    measured_at = r.get(top, "measured_at", "")
    version = r.get(top, "mcpnode_version", "")
    if not isinstance(measured_at, str) or not isinstance(version, str):
        bad = "measured_at" if not isinstance(measured_at, str) else "mcpnode_version"
        raise r.fail(bad, "not a string")
    return ProbeRun(
        measured_at=measured_at,
        mcpnode_version=version,
        hostname=r.str_or_none(top, "hostname", ""),
        cuda_driver_version=r.str_or_none(top, "cuda_driver_version", ""),
        bindings_version=r.str_or_none(top, "bindings_version", ""),
        settings=settings,
        gpus=tuple(gpus),
        host_cases=tuple(host_cases),
        peer_cases=tuple(peer_cases),
        problems=tuple(problems),
    )
