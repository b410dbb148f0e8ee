"""The measurement: copies through NVIDIA's CUDA driver API bindings (`cuda-bindings`, the
`mcpnode[probe]` extra; `import cuda.bindings.driver`, `cuda.cuda` before 12.6). They load
libcuda.so.1 from the installed driver; no toolkit. Imported only by the probe command.

Method (docs/probe.md), after nvbandwidth (NVIDIA/nvbandwidth `memcpy.cpp`: copy-engine copies
between events, WARMUP_COUNT 4 untimed copies, a median over samples) and DCGM's `pcie` plugin
(`nvvs/plugin_src/pcie/PcieMain.cpp`: N cudaMemcpyAsync between two events, GB = 10^9 bytes):

* Per GPU: its primary context (cuDevicePrimaryCtxRetain; the device found by PCI bus id,
  cuDeviceGetByPCIBusId, so CUDA's ordinal order never matters), one device buffer, one
  non-blocking stream and two events.
* Per GPU and NUMA node with CPUs: the thread pinned to that node's CPUs this process may use
  (Host.set_affinity), a host buffer whose pages are bound to the node (Host.node_memory: mmap,
  mbind, fault in, move_pages to check) and page-locked with cuMemHostRegister. Per direction:
  `warmup_copies` untimed copies, then `samples` samples of `copies_per_sample` copies of
  `buffer_bytes` (cuMemcpyHtoDAsync / cuMemcpyDtoHAsync) between cuEventRecord pairs,
  bandwidth = bytes / cuEventElapsedTime. The events time the GPU's own timeline, so the host's
  enqueueing is not in the figure as long as each copy outlasts one enqueue (milliseconds
  against microseconds at these sizes); nvbandwidth's spin kernel solves that for small and
  concurrent copies, which this does not make. Latency: `latency_copies` synchronous copies of
  `latency_bytes` (cuMemcpyHtoD / cuMemcpyDtoH) timed on the host clock, their mean per sample:
  what a small blocking copy costs the caller, driver call included.
* The PCIe link NVML reports right after a GPU's copies (current generation and width), since
  an idle GPU's link runs slower than the one the copies used.
* Per ordered GPU pair: cuDeviceCanAccessPeer; when it can, peer access enabled both ways
  (cuCtxEnablePeerAccess: without it cuMemcpyPeer stages through host memory) and the same
  samples with cuMemcpyPeerAsync on the source GPU's stream.

Every driver call goes through `Cuda.call`, which turns a CUresult other than CUDA_SUCCESS into
CudaError named as the driver names it (cuGetErrorName). A case that fails keeps the error and
the run goes on; only a driver that cannot start at all is ProbeUnavailable.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from mcpnode import __version__
from mcpnode.errors import HostError, McpnodeError, PlacementUnavailable, ProbeUnavailable
from mcpnode.host import Host
from mcpnode.probe.model import (
    GpuRun,
    HostCase,
    HostDirection,
    LinkState,
    PeerCase,
    ProbeRun,
    Settings,
)
from mcpnode.topology.model import CpuSet, Gpu, Topology
from mcpnode.topology.nvml import GpuBackend, NvmlError

DEFAULT_SETTINGS = Settings(
    buffer_bytes=256 << 20,
    copies_per_sample=8,
    samples=5,
    warmup_copies=4,  # nvbandwidth memcpy.cpp WARMUP_COUNT
    latency_bytes=8,
    latency_copies=50,
)
EXTRA_HINT = "pip install 'mcpnode[probe]' (NVIDIA's cuda-bindings)"
# cuda.h: CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, harmless when enabling both directions.
_PEER_ACCESS_ALREADY_ENABLED = 704


class CudaError(McpnodeError):
    def __init__(self, fn: str, name: str, code: int) -> None:
        super().__init__(f"{fn}: {name}")
        self.fn = fn
        self.name = name
        self.code = code


def load_driver() -> tuple[Any, str | None]:
    """The bindings' driver module and the bindings' version. Raises ProbeUnavailable."""
    try:
        from cuda.bindings import driver
    except ImportError:
        try:
            from cuda import cuda as driver  # cuda-python < 12.6
        except ImportError as err:
            raise ProbeUnavailable(
                f"the CUDA driver API bindings are not installed: {EXTRA_HINT}"
            ) from err
    from importlib import metadata

    version = None
    for dist in ("cuda-bindings", "cuda-python"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            version = metadata.version(dist)
            break
    return driver, version


class Cuda:
    """The one choke point for driver calls (see the module docstring)."""

    def __init__(self, driver: Any) -> None:
        self.drv = driver
        self._success = driver.CUresult.CUDA_SUCCESS

    def error_name(self, err: Any) -> str:
        try:
            res = self.drv.cuGetErrorName(err)
            if res[0] == self._success:
                return bytes(res[1]).decode(errors="replace")
        except Exception:  # noqa: S110 - the name is a courtesy; the number below still says it
            pass
        return f"CUresult {int(err)}"

    def call(self, fn: str, *args: Any) -> Any:
        res = getattr(self.drv, fn)(*args)
        err = res[0]
        if err != self._success:
            raise CudaError(fn, self.error_name(err), int(err))
        rest = res[1:]
        if not rest:
            return None
        return rest[0] if len(rest) == 1 else rest

    def init(self) -> str | None:
        """cuInit and the driver's CUDA version ("12.9"). Raises ProbeUnavailable."""
        try:
            self.call("cuInit", 0)
        except CudaError as err:
            raise ProbeUnavailable(_init_message(err.name)) from err
        except Exception as err:  # the bindings raise their own types when libcuda is absent
            raise ProbeUnavailable(
                f"no NVIDIA driver here: libcuda.so.1 could not be loaded ({err})"
            ) from err
        try:
            v = int(self.call("cuDriverGetVersion"))
        except CudaError:
            return None
        return f"{v // 1000}.{v % 1000 // 10}"


def _init_message(name: str) -> str:
    """One line for a cuInit that failed, by the driver's error name (table-tested)."""
    why = {
        "CUDA_ERROR_NO_DEVICE": "the driver sees no CUDA device",
        "CUDA_ERROR_INSUFFICIENT_DRIVER": "the installed driver is older than these bindings need",
        "CUDA_ERROR_SYSTEM_NOT_READY": "the system is not ready: on NVSwitch systems"
        " nvidia-fabricmanager must be running",
        "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE": "the CUDA forward-compatibility package"
        " does not support this GPU",
        "CUDA_ERROR_OPERATING_SYSTEM": "the driver failed an operating-system call (see dmesg)",
    }.get(name, "the driver could not start")
    return f"cuInit failed: {why} ({name})"


@dataclass
class _Device:
    gpu: Gpu
    dev: Any
    ctx: Any
    buf: Any = None  # device pointer
    stream: Any = None
    start: Any = None
    end: Any = None


def measure(
    host: Host,
    topo: Topology,
    nvml: GpuBackend | None = None,
    settings: Settings = DEFAULT_SETTINGS,
    *,
    now: Callable[[], datetime] | None = None,
) -> ProbeRun:
    """Probe every GPU of `topo` on the live machine behind `host` (module docstring).

    Raises ProbeUnavailable when the bindings or the driver are missing or no GPU is there; a
    GPU or case that fails is recorded with its error instead."""
    drv, bindings_version = load_driver()
    if not topo.gpus:
        raise ProbeUnavailable("no NVIDIA GPU on this host (sysfs lists none): nothing to probe")
    cuda = Cuda(drv)
    driver_version = cuda.init()
    problems: list[str] = []
    gpus: list[GpuRun] = []
    host_cases: list[HostCase] = []
    peer_cases: list[PeerCase] = []
    devices: list[_Device] = []
    original = host.get_affinity(0)
    try:
        for gpu in topo.gpus:
            d, run = _open(cuda, gpu, settings)
            if d is not None:
                devices.append(d)
                host_cases.extend(_host_cases(cuda, host, topo, d, settings, original))
                run = GpuRun(run.address, run.name, _link_now(nvml, gpu), None)
            gpus.append(run)
        with contextlib.suppress(HostError, PlacementUnavailable):
            host.set_affinity(0, original)
        peer_cases.extend(_peer_cases(cuda, devices, settings))
    finally:
        for d in devices:
            _close(cuda, d)
        try:
            host.set_affinity(0, original)
        except (HostError, PlacementUnavailable) as err:
            problems.append(f"could not restore this thread's CPU affinity: {err}")
    when = (now or (lambda: datetime.now(timezone.utc)))()
    return ProbeRun(
        measured_at=when.isoformat(timespec="seconds"),
        mcpnode_version=__version__,
        hostname=topo.identity.hostname,
        cuda_driver_version=driver_version,
        bindings_version=bindings_version,
        settings=settings,
        gpus=tuple(gpus),
        host_cases=tuple(host_cases),
        peer_cases=tuple(peer_cases),
        problems=tuple(problems),
    )


def _open(cuda: Cuda, gpu: Gpu, s: Settings) -> tuple[_Device | None, GpuRun]:
    try:
        dev = cuda.call("cuDeviceGetByPCIBusId", str(gpu.address).encode())
    except CudaError as err:
        why = f"CUDA does not see it ({err}; CUDA_VISIBLE_DEVICES, or not a CUDA device)"
        return None, GpuRun(gpu.address, None, None, why)
    name = None
    with contextlib.suppress(CudaError):
        raw = cuda.call("cuDeviceGetName", 256, dev)
        name = bytes(raw).split(b"\0", 1)[0].decode(errors="replace") or None
    try:
        ctx = cuda.call("cuDevicePrimaryCtxRetain", dev)
    except CudaError as err:
        return None, GpuRun(gpu.address, name, None, f"no context: {err}")
    d = _Device(gpu, dev, ctx)
    try:
        cuda.call("cuCtxSetCurrent", ctx)
        d.buf = cuda.call("cuMemAlloc", s.buffer_bytes)
        cuda.call("cuMemsetD8", d.buf, 0x5A, s.buffer_bytes)
        d.stream = cuda.call("cuStreamCreate", int(cuda.drv.CUstream_flags.CU_STREAM_NON_BLOCKING))
        d.start = cuda.call("cuEventCreate", int(cuda.drv.CUevent_flags.CU_EVENT_DEFAULT))
        d.end = cuda.call("cuEventCreate", int(cuda.drv.CUevent_flags.CU_EVENT_DEFAULT))
    except CudaError as err:
        _close(cuda, d)
        return None, GpuRun(gpu.address, name, None, f"setup failed: {err}")
    return d, GpuRun(gpu.address, name, None, None)


def _close(cuda: Cuda, d: _Device) -> None:
    """Free what `d` holds; teardown errors have no one to tell (the run is over)."""
    with contextlib.suppress(CudaError):
        cuda.call("cuCtxSetCurrent", d.ctx)
    for fn, handle in (
        ("cuEventDestroy", d.end),
        ("cuEventDestroy", d.start),
        ("cuStreamDestroy", d.stream),
        ("cuMemFree", d.buf),
    ):
        if handle is not None:
            with contextlib.suppress(CudaError):
                cuda.call(fn, handle)
    with contextlib.suppress(CudaError):
        cuda.call("cuDevicePrimaryCtxRelease", d.dev)


def _link_now(nvml: GpuBackend | None, gpu: Gpu) -> LinkState | None:
    if nvml is None:
        return None
    index = gpu.nvml.index if gpu.nvml is not None else gpu.index
    values: list[int | None] = []
    for fn in ("nvmlDeviceGetCurrPcieLinkGeneration", "nvmlDeviceGetCurrPcieLinkWidth"):
        try:
            values.append(int(nvml.call(fn, index)))
        except (NvmlError, TypeError, ValueError):
            values.append(None)
    if values == [None, None]:
        return None
    return LinkState(values[0], values[1])


def _timed(cuda: Cuda, d: _Device, copy: Callable[[], None], s: Settings) -> tuple[float, ...]:
    """`s.samples` bandwidths in GB/s of `s.copies_per_sample` calls of `copy` each."""
    for _ in range(s.warmup_copies):
        copy()
    cuda.call("cuStreamSynchronize", d.stream)
    out = []
    for _ in range(s.samples):
        cuda.call("cuEventRecord", d.start, d.stream)
        for _ in range(s.copies_per_sample):
            copy()
        cuda.call("cuEventRecord", d.end, d.stream)
        cuda.call("cuEventSynchronize", d.end)
        ms = float(cuda.call("cuEventElapsedTime", d.start, d.end))
        if ms <= 0:
            raise CudaError("cuEventElapsedTime", f"non-positive elapsed time {ms} ms", 0)
        out.append(s.buffer_bytes * s.copies_per_sample / (ms / 1e3) / 1e9)
    return tuple(out)


def _latency(copy: Callable[[], None], s: Settings) -> tuple[float, ...]:
    """`s.samples` latencies in us: the mean of `s.latency_copies` synchronous copies each."""
    copy()  # the first small copy sets up paths the later ones reuse
    out = []
    for _ in range(s.samples):
        t0 = time.perf_counter_ns()
        for _ in range(s.latency_copies):
            copy()
        out.append((time.perf_counter_ns() - t0) / s.latency_copies / 1e3)
    return tuple(out)


def _node_cpus(topo: Topology, node: int) -> CpuSet:
    n = topo.node(node)
    cpus = (n.cpus if n is not None else CpuSet()) & topo.cpus.online
    allowed = topo.process.cpus
    return cpus & allowed if allowed is not None else cpus


def _host_cases(
    cuda: Cuda,
    host: Host,
    topo: Topology,
    d: _Device,
    s: Settings,
    original: frozenset[int],
) -> Iterator[HostCase]:
    for node in sorted(n.id for n in topo.numa_nodes if n.has_cpus):
        cpus = _node_cpus(topo, node)
        yield from _one_node(cuda, host, d, node, cpus, s)
    with contextlib.suppress(HostError, PlacementUnavailable):
        host.set_affinity(0, original)


def _one_node(
    cuda: Cuda, host: Host, d: _Device, node: int, cpus: CpuSet, s: Settings
) -> list[HostCase]:
    def failed(why: str, pages: int | None = None, on: int | None = None) -> list[HostCase]:
        return [
            HostCase(d.gpu.address, node, direction, cpus.cpulist(), (), (), pages, on, why)
            for direction in ("h2d", "d2h")
        ]

    if not cpus:
        return failed(f"no CPU of node {node} is online and allowed to this process (cpuset)")
    try:
        host.set_affinity(0, cpus)
    except (HostError, PlacementUnavailable) as err:
        return failed(f"could not pin to node {node}'s CPUs: {err}")
    try:
        with host.node_memory(s.buffer_bytes, node) as mem:
            try:
                cuda.call("cuCtxSetCurrent", d.ctx)
                cuda.call(
                    "cuMemHostRegister",
                    mem.address,
                    mem.length,
                    int(cuda.drv.CU_MEMHOSTREGISTER_PORTABLE),
                )
            except CudaError as err:
                return failed(f"cuMemHostRegister: {err}", mem.pages, mem.pages_on_node)
            try:
                cases = []
                for direction in ("h2d", "d2h"):
                    cases.append(_direction(cuda, d, direction, mem.address, node, cpus, s))
                pages, on_node = host.pages_on_node(mem.address, mem.length, node)
                return [
                    HostCase(
                        c.gpu,
                        c.node,
                        c.direction,
                        c.cpus,
                        c.samples_gbps,
                        c.latency_us,
                        pages,
                        on_node,
                        c.error,
                    )
                    for c in cases
                ]
            finally:
                with contextlib.suppress(CudaError):
                    cuda.call("cuMemHostUnregister", mem.address)
    except (HostError, PlacementUnavailable) as err:
        return failed(f"no memory on node {node}: {err}")


def _direction(
    cuda: Cuda,
    d: _Device,
    direction: HostDirection,
    host_ptr: int,
    node: int,
    cpus: CpuSet,
    s: Settings,
) -> HostCase:
    size, small = s.buffer_bytes, s.latency_bytes
    if direction == "h2d":

        def copy() -> None:
            cuda.call("cuMemcpyHtoDAsync", d.buf, host_ptr, size, d.stream)

        def tiny() -> None:
            cuda.call("cuMemcpyHtoD", d.buf, host_ptr, small)
    else:

        def copy() -> None:
            cuda.call("cuMemcpyDtoHAsync", host_ptr, d.buf, size, d.stream)

        def tiny() -> None:
            cuda.call("cuMemcpyDtoH", host_ptr, d.buf, small)

    try:
        samples = _timed(cuda, d, copy, s)
        latency = _latency(tiny, s)
    except CudaError as err:
        return HostCase(
            d.gpu.address, node, direction, cpus.cpulist(), (), (), None, None, str(err)
        )
    return HostCase(
        d.gpu.address, node, direction, cpus.cpulist(), samples, latency, None, None, None
    )


def _peer_cases(cuda: Cuda, devices: list[_Device], s: Settings) -> list[PeerCase]:
    out = []
    for a in devices:
        for b in devices:
            if a is b:
                continue
            try:
                can = bool(cuda.call("cuDeviceCanAccessPeer", a.dev, b.dev))
            except CudaError as err:
                out.append(PeerCase(a.gpu.address, b.gpu.address, False, (), (), str(err)))
                continue
            if not can:
                out.append(PeerCase(a.gpu.address, b.gpu.address, False, (), (), None))
                continue
            out.append(_peer(cuda, a, b, s))
    return out


def _enable_peer(cuda: Cuda, ctx: Any, peer_ctx: Any) -> None:
    cuda.call("cuCtxSetCurrent", ctx)
    try:
        cuda.call("cuCtxEnablePeerAccess", peer_ctx, 0)
    except CudaError as err:
        if err.code != _PEER_ACCESS_ALREADY_ENABLED:
            raise


def _peer(cuda: Cuda, a: _Device, b: _Device, s: Settings) -> PeerCase:
    size, small = s.buffer_bytes, s.latency_bytes

    def copy() -> None:
        cuda.call("cuMemcpyPeerAsync", b.buf, b.ctx, a.buf, a.ctx, size, a.stream)

    def tiny() -> None:
        cuda.call("cuMemcpyPeer", b.buf, b.ctx, a.buf, a.ctx, small)

    try:
        _enable_peer(cuda, b.ctx, a.ctx)
        _enable_peer(cuda, a.ctx, b.ctx)  # current: the source GPU, whose stream copies
        samples = _timed(cuda, a, copy, s)
        latency = _latency(tiny, s)
    except CudaError as err:
        return PeerCase(a.gpu.address, b.gpu.address, True, (), (), str(err))
    return PeerCase(a.gpu.address, b.gpu.address, True, samples, latency, None)
