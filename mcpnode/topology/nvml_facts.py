"""Per-GPU facts from a GpuBackend. Every question is one backend call; an answer NVML could not
give becomes a None fact with its reason, never a crash and never a fake zero.

Each getter names its `nvidia-smi -q` equivalent, so a reader can check a value by hand.
"""

from __future__ import annotations

from mcpnode.topology.model import (
    CpuSet,
    GpuProcess,
    MigDevice,
    NvLink,
    NvmlGpu,
    NvmlState,
    P2pStatus,
    PciAddress,
)
from mcpnode.topology.nvml import (
    NVML_CODES,
    GpuBackend,
    NvmlError,
    NvmlFunctionNotFound,
    NvmlGpuLost,
    NvmlNoSuchLink,
    NvmlNotSupported,
)

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (codec/typenames.py)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, TypeVar

    T = TypeVar("T")

# NVML_NVLINK_MAX_LINKS in NVML 13 (was 6/12/18 in older bindings): an upper bound only.
MAX_NVLINKS = 36
# nvmlDeviceArchitecture_t
ARCHITECTURES = {
    2: "Kepler",
    3: "Maxwell",
    4: "Pascal",
    5: "Volta",
    6: "Turing",
    7: "Ampere",
    8: "Ada",
    9: "Hopper",
    10: "Blackwell",
    13: "Rubin",
}
# nvmlDeviceGetNvLinkVersion returns an enum, not the marketing number: A100 answers 5 = "3.1"
# (open-mpi/hwloc#658).
NVLINK_VERSIONS = {1: "1.0", 2: "2.0", 3: "2.2", 4: "3.0", 5: "3.1", 6: "4.0", 7: "5.0", 8: "6.0"}
REMOTE_TYPES = {0: "GPU", 1: "IBMNPU", 2: "SWITCH", 0xFF: "UNKNOWN"}
FABRIC_STATES = {0: "NOT_SUPPORTED", 1: "NOT_STARTED", 2: "IN_PROGRESS", 3: "COMPLETED"}
COMPUTE_MODES = {0: "Default", 1: "ExclusiveThread", 2: "Prohibited", 3: "ExclusiveProcess"}
AFFINITY_SCOPE_NODE, AFFINITY_SCOPE_SOCKET = 0, 1
ECC_UNCORRECTED, ECC_VOLATILE, ECC_AGGREGATE = 1, 0, 1
# nvmlTemperatureSensors_t / nvmlTemperatureThresholds_t / nvmlClockType_t
TEMPERATURE_GPU = 0
THRESHOLD_SHUTDOWN, THRESHOLD_SLOWDOWN = 0, 1
CLOCK_SM, CLOCK_MEM = 1, 2
# nvmlNvLinkErrorCounter_t: DL_REPLAY 0, DL_RECOVERY 1, DL_CRC_FLIT 2, DL_CRC_DATA 3
NVLINK_ERROR_COUNTERS = ("replay_errors", "recovery_errors", "crc_flit_errors", "crc_data_errors")
# nvmlDeviceGetFieldValues: NVML_FI_DEV_NVLINK_GET_SPEED (MB/s; the link index is the scope id),
# the field NCCL reads for each link's speed (src/graph/topo.cc).
FI_NVLINK_GET_SPEED = 164
# nvmlGpuP2PCapsIndex_t READ (pynvml spells it as the tuple `(0,)`), and nvmlGpuP2PStatus_t as
# `nvidia-smi topo -p2p r` prints it (its legend: OK, CNS chipset not supported, GNS GPU not
# supported, TNS topology not supported, NS not supported, U unknown; DR, disabled by a
# registry key, is mcpnode's name for status 4).
P2P_CAPS_READ = 0
P2P_STATUS = {0: "OK", 1: "CNS", 2: "GNS", 3: "TNS", 4: "DR", 5: "NS", 6: "U"}


def words_to_set(words: list[int]) -> CpuSet:
    """NVML affinity arrays: word i bit b = CPU (or node) 64*i + b."""
    return CpuSet(64 * i + b for i, w in enumerate(words) for b in range(64) if w >> b & 1)


def pci_address(info: dict[str, Any]) -> PciAddress:
    """From the integer fields, not busId's "%08X:%02X:%02X.0" text; the function is always 0."""
    return PciAddress(int(info["domain"]), int(info["bus"]), int(info["device"]), 0)


def cuda_version(v: int) -> str:
    return f"{v // 1000}.{(v % 1000) // 10}"


class _Gpu:
    """Asks one GPU's questions, remembering why each unanswered one was not answered."""

    def __init__(self, backend: GpuBackend, index: int) -> None:
        self.backend = backend
        self.index = index
        self.unavailable: list[tuple[str, str]] = []
        self.lost = False

    def ask(self, fact: str, fn: str, *args: int, conv: Callable[[Any], T]) -> T | None:
        if self.lost:
            self.unavailable.append((fact, "GpuIsLost"))
            return None
        try:
            return conv(self.backend.call(fn, self.index, *args))
        except NvmlGpuLost:
            self.lost = True
            self.unavailable.append((fact, "GpuIsLost"))
        except NvmlError as err:
            self.unavailable.append((fact, err.name))
        except (TypeError, ValueError, OverflowError, KeyError, IndexError) as err:
            # A recorded or live answer of the wrong shape: a fact we cannot use, said as such.
            self.unavailable.append((fact, f"malformed answer: {err}"))
        return None

    def ask_newest(
        self, fact: str, fns: tuple[str, ...], *args: int, conv: Callable[[Any], T]
    ) -> T | None:
        """`ask` the first of `fns` the driver has: a function renamed in a newer NVML is tried
        first and the older name only after FunctionNotFound (nvitop's probe-once pattern)."""
        for i, fn in enumerate(fns):
            last = i == len(fns) - 1
            if self.lost:
                break
            try:
                return conv(self.backend.call(fn, self.index, *args))
            except NvmlFunctionNotFound:
                if last:
                    self.unavailable.append((fact, "FunctionNotFound"))
                continue
            except NvmlGpuLost:
                self.lost = True
            except NvmlError as err:
                self.unavailable.append((fact, err.name))
                return None
            except (TypeError, ValueError, OverflowError, KeyError, IndexError) as err:
                self.unavailable.append((fact, f"malformed answer: {err}"))
                return None
        if self.lost:
            self.unavailable.append((fact, "GpuIsLost"))
        return None


def _bool(v: Any) -> bool:
    return bool(int(v))


def _pair(v: Any) -> tuple[bool, bool]:
    return bool(int(v[0])), bool(int(v[1]))


def collect(backend: GpuBackend, cpu_words: int, node_words: int) -> NvmlState:
    """All NVML facts. `cpu_words`/`node_words`: 64-bit words for the affinity masks (enough for
    the highest possible CPU / NUMA node id)."""
    try:
        backend.call("nvmlInit")
    except NvmlError as err:
        return NvmlState(False, _reason(err), None, None, None, ())

    def system(fn: str, conv: Callable[[Any], T]) -> T | None:
        try:
            return conv(backend.call(fn))
        except NvmlError:
            return None

    driver = system("nvmlSystemGetDriverVersion", str)
    cuda = system("nvmlSystemGetCudaDriverVersion", lambda v: cuda_version(int(v)))
    nvml_version = system("nvmlSystemGetNVMLVersion", str)
    count = system("nvmlDeviceGetCount", int)
    if count is None:
        return NvmlState(False, "nvmlDeviceGetCount failed", driver, cuda, nvml_version, ())
    gpus = tuple(_collect_gpu(backend, i, cpu_words, node_words) for i in range(count))
    return NvmlState(True, None, driver, cuda, nvml_version, gpus, _p2p(backend, gpus))


def _p2p(backend: GpuBackend, gpus: tuple[NvmlGpu, ...]) -> tuple[P2pStatus, ...]:
    """`nvidia-smi topo -p2p r`: NVML's peer-to-peer read status of every ordered pair."""
    out = []
    for a in gpus:
        for b in gpus:
            if a.index == b.index:
                continue
            if a.lost or b.lost:
                out.append(P2pStatus(a.index, b.index, None, "GpuIsLost"))
                continue
            try:
                code = int(backend.call("nvmlDeviceGetP2PStatus", a.index, b.index, P2P_CAPS_READ))
            except NvmlError as err:
                out.append(P2pStatus(a.index, b.index, None, err.name))
                continue
            except (TypeError, ValueError, OverflowError) as err:
                out.append(P2pStatus(a.index, b.index, None, f"malformed answer: {err}"))
                continue
            out.append(P2pStatus(a.index, b.index, P2P_STATUS.get(code, "U")))
    return tuple(out)


def _reason(err: NvmlError) -> str:
    hints = {
        "LibraryNotFound": "libnvidia-ml.so.1 not found (no NVIDIA driver installed)",
        "DriverNotLoaded": "the nvidia kernel module is not loaded",
        "LibRmVersionMismatch": "driver/library version mismatch: the user-space driver was "
        "upgraded without reloading the kernel module (reboot or reload nvidia)",
        "NoPermission": "no permission to open /dev/nvidia*",
    }
    if err.name == "NotRecorded" and err.detail:
        # Replay says why it has nothing: not a snapshot, malformed metadata, no answers.
        return f"NotRecorded: {err.detail}"
    return f"{err.name}: {hints.get(err.name, str(err))}"


def _collect_gpu(backend: GpuBackend, i: int, cpu_words: int, node_words: int) -> NvmlGpu:
    g = _Gpu(backend, i)
    # nvidia-smi -q: "Bus Id"
    address = g.ask("pci", "nvmlDeviceGetPciInfo", conv=pci_address)
    # "Minor Number", "GPU UUID", "Product Name", "Product Architecture", "Serial Number",
    # "Board ID", "Module ID"
    minor = g.ask("minor", "nvmlDeviceGetMinorNumber", conv=int)
    uuid = g.ask("uuid", "nvmlDeviceGetUUID", conv=str)
    name = g.ask("name", "nvmlDeviceGetName", conv=str)
    arch = g.ask(
        "architecture",
        "nvmlDeviceGetArchitecture",
        conv=lambda v: ARCHITECTURES.get(int(v), f"unknown ({int(v)})"),
    )
    cc = g.ask(
        "compute_capability",
        "nvmlDeviceGetCudaComputeCapability",
        conv=lambda v: f"{int(v[0])}.{int(v[1])}",
    )
    mem = g.ask("memory", "nvmlDeviceGetMemoryInfo", conv=lambda v: int(v["total"]) // 2**20)
    serial = g.ask("serial", "nvmlDeviceGetSerial", conv=str)
    board = g.ask("board_id", "nvmlDeviceGetBoardId", conv=int)
    module = g.ask("module_id", "nvmlDeviceGetModuleId", conv=int)
    # "Persistence Mode", "ECC Mode" current/pending, "ECC Errors" volatile/aggregate uncorrected
    persistence = g.ask("persistence_mode", "nvmlDeviceGetPersistenceMode", conv=_bool)
    ecc = g.ask("ecc_mode", "nvmlDeviceGetEccMode", conv=_pair)
    ecc_vol = g.ask(
        "ecc_uncorrected_volatile",
        "nvmlDeviceGetTotalEccErrors",
        ECC_UNCORRECTED,
        ECC_VOLATILE,
        conv=int,
    )
    ecc_agg = g.ask(
        "ecc_uncorrected_aggregate",
        "nvmlDeviceGetTotalEccErrors",
        ECC_UNCORRECTED,
        ECC_AGGREGATE,
        conv=int,
    )
    # "Remapped Rows": correctable, uncorrectable, pending, remapping failure occurred
    rows = g.ask("remapped_rows", "nvmlDeviceGetRemappedRows", conv=lambda v: tuple(v))
    # "MIG Mode" current/pending, "Compute Mode"
    mig = g.ask("mig_mode", "nvmlDeviceGetMigMode", conv=_pair)
    mig_devices = _mig_devices(g) if mig is not None and mig[0] else None
    compute_mode = g.ask(
        "compute_mode",
        "nvmlDeviceGetComputeMode",
        conv=lambda v: COMPUTE_MODES.get(int(v), str(v)),
    )
    # "GPU Link Info": PCIe generation current/max/device max, width current/max
    gen_cur = g.ask("pcie_gen_current", "nvmlDeviceGetCurrPcieLinkGeneration", conv=int)
    gen_max = g.ask("pcie_gen_max", "nvmlDeviceGetMaxPcieLinkGeneration", conv=int)
    gen_gpu = g.ask("pcie_gen_gpu_max", "nvmlDeviceGetGpuMaxPcieLinkGeneration", conv=int)
    width_cur = g.ask("pcie_width_current", "nvmlDeviceGetCurrPcieLinkWidth", conv=int)
    width_max = g.ask("pcie_width_max", "nvmlDeviceGetMaxPcieLinkWidth", conv=int)
    links = _nvlinks(g)
    # "Fabric": State, Status (Hopper+ on NVSwitch systems; NotSupported on PCIe / single GPU)
    fabric = g.ask("fabric", "nvmlDeviceGetGpuFabricInfo", conv=dict)
    fabric_state = fabric_status = None
    if fabric is not None:
        fabric_state = FABRIC_STATES.get(int(fabric["state"]), str(fabric["state"]))
        status = int(fabric.get("status", 0))
        fabric_status = "Success" if status == 0 else NVML_CODES.get(status, str(status))
    # `nvidia-smi topo -m` CPU Affinity (node scope) and the socket scope; memory affinity;
    # "GPU NUMA ID" (GPU memory as a NUMA node on Grace-class systems)
    aff_node = g.ask(
        "cpu_affinity_node",
        "nvmlDeviceGetCpuAffinityWithinScope",
        cpu_words,
        AFFINITY_SCOPE_NODE,
        conv=words_to_set,
    )
    aff_socket = g.ask(
        "cpu_affinity_socket",
        "nvmlDeviceGetCpuAffinityWithinScope",
        cpu_words,
        AFFINITY_SCOPE_SOCKET,
        conv=words_to_set,
    )
    mem_aff = g.ask(
        "memory_affinity",
        "nvmlDeviceGetMemoryAffinity",
        node_words,
        AFFINITY_SCOPE_NODE,
        conv=words_to_set,
    )
    numa_id = g.ask("memory_numa_node", "nvmlDeviceGetNumaNodeId", conv=int)
    # "Processes": compute processes with their GPU memory
    procs = g.ask(
        "processes",
        "nvmlDeviceGetComputeRunningProcesses",
        conv=lambda v: tuple(
            GpuProcess(
                int(p["pid"]),
                None if p.get("usedGpuMemory") is None else int(p["usedGpuMemory"]) // 2**20,
            )
            for p in v
        ),
    )
    # "Clocks Event Reasons" (R535 renamed nvmlDeviceGetCurrentClocksThrottleReasons; older
    # drivers only have the old name), "Temperature", "GPU Power Readings", "Clocks", "Max
    # Clocks", "Applications Clocks", "Default Applications Clocks", "Replays Since Reset"
    reasons = g.ask_newest(
        "clocks_event_reasons",
        ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"),
        conv=int,
    )
    temp = g.ask("temperature", "nvmlDeviceGetTemperature", TEMPERATURE_GPU, conv=int)
    slowdown = g.ask(
        "temperature_slowdown",
        "nvmlDeviceGetTemperatureThreshold",
        THRESHOLD_SLOWDOWN,
        conv=int,
    )
    shutdown = g.ask(
        "temperature_shutdown",
        "nvmlDeviceGetTemperatureThreshold",
        THRESHOLD_SHUTDOWN,
        conv=int,
    )
    power = g.ask("power_usage", "nvmlDeviceGetPowerUsage", conv=int)
    limit = g.ask("power_limit", "nvmlDeviceGetEnforcedPowerLimit", conv=int)
    default_limit = g.ask(
        "power_default_limit", "nvmlDeviceGetPowerManagementDefaultLimit", conv=int
    )
    clocks = {
        f"{kind}_{name}": g.ask(f"{kind}_{name}", fn, clock, conv=int)
        for kind, fn in (
            ("clock", "nvmlDeviceGetClockInfo"),
            ("clock_max", "nvmlDeviceGetMaxClockInfo"),
            ("app_clock", "nvmlDeviceGetApplicationsClock"),
            ("default_app_clock", "nvmlDeviceGetDefaultApplicationsClock"),
        )
        for name, clock in (("sm", CLOCK_SM), ("mem", CLOCK_MEM))
    }
    replays = g.ask("pcie_replay_count", "nvmlDeviceGetPcieReplayCounter", conv=int)
    return NvmlGpu(
        index=i,
        address=address,
        minor=minor,
        uuid=uuid,
        name=name,
        architecture=arch,
        compute_capability=cc,
        memory_total_mib=mem,
        serial=serial,
        board_id=board,
        module_id=module,
        persistence_mode=persistence,
        ecc_current=ecc[0] if ecc else None,
        ecc_pending=ecc[1] if ecc else None,
        ecc_uncorrected_volatile=ecc_vol,
        ecc_uncorrected_aggregate=ecc_agg,
        remapped_rows_correctable=int(rows[0]) if rows else None,
        remapped_rows_uncorrectable=int(rows[1]) if rows else None,
        remapped_rows_pending=bool(rows[2]) if rows else None,
        remapped_rows_failure=bool(rows[3]) if rows else None,
        mig_current=mig[0] if mig else None,
        mig_pending=mig[1] if mig else None,
        compute_mode=compute_mode,
        pcie_gen_current=gen_cur,
        pcie_gen_max=gen_max,
        pcie_gen_gpu_max=gen_gpu,
        pcie_width_current=width_cur,
        pcie_width_max=width_max,
        nvlinks=links,
        fabric_state=fabric_state,
        fabric_status=fabric_status,
        cpu_affinity_node=aff_node,
        cpu_affinity_socket=aff_socket,
        memory_affinity_nodes=mem_aff,
        memory_numa_node=numa_id,
        processes=procs,
        lost=g.lost,
        unavailable=tuple(g.unavailable),
        clocks_event_reasons=reasons,
        temperature_c=temp,
        temperature_slowdown_c=slowdown,
        temperature_shutdown_c=shutdown,
        power_usage_mw=power,
        power_limit_mw=limit,
        power_default_limit_mw=default_limit,
        clock_sm_mhz=clocks["clock_sm"],
        clock_sm_max_mhz=clocks["clock_max_sm"],
        clock_mem_mhz=clocks["clock_mem"],
        clock_mem_max_mhz=clocks["clock_max_mem"],
        app_clock_sm_mhz=clocks["app_clock_sm"],
        app_clock_mem_mhz=clocks["app_clock_mem"],
        default_app_clock_sm_mhz=clocks["default_app_clock_sm"],
        default_app_clock_mem_mhz=clocks["default_app_clock_mem"],
        pcie_replay_count=replays,
        mig_devices=mig_devices,
    )


def _mig_devices(g: _Gpu) -> tuple[MigDevice, ...] | None:
    """`nvidia-smi -L`'s MIG lines: every slot up to nvmlDeviceGetMaxMigDeviceCount asked
    through its MIG handle (the live backend's nvmlDeviceGetMigDeviceInfo: UUID, GPU and
    compute instance ids, attributes). NotFound is an empty slot (destroyed instances leave
    gaps; Slurm's NVML plugin skips them the same way); any other error makes the set unknown,
    never a shorter list."""
    count = g.ask("mig_devices", "nvmlDeviceGetMaxMigDeviceCount", conv=int)
    if count is None:
        return None
    out = []
    for slot in range(min(count, 64)):
        try:
            info = g.backend.call("nvmlDeviceGetMigDeviceInfo", g.index, slot)
        except NvmlError as err:
            if err.name == "NotFound":
                continue
            g.unavailable.append(("mig_devices", err.name))
            return None
        try:
            out.append(
                MigDevice(
                    index=slot,
                    uuid=str(info["uuid"]),
                    gpu_instance_id=int(info["gpuInstanceId"]),
                    compute_instance_id=int(info["computeInstanceId"]),
                    memory_mib=int(info["memorySizeMB"]),
                    slices=int(info["gpuInstanceSliceCount"]),
                )
            )
        except (TypeError, ValueError, OverflowError, KeyError) as err:
            g.unavailable.append(("mig_devices", f"malformed answer: {err}"))
            return None
    return tuple(out)


def _nvlinks(g: _Gpu) -> tuple[NvLink, ...]:
    """`nvidia-smi nvlink -s` / `-R`. NotSupported on link 0 means no NVLink at all (PCIe
    GPUs, most VMs); InvalidArgument means "no such link" and the loop goes on, as Slurm and
    hwloc do, since NVML_NVLINK_MAX_LINKS is only an upper bound."""
    links: list[NvLink] = []
    if g.lost:
        # Lost before its links were asked: say so, as for every other fact, or an empty
        # `nvlinks` would read as "this GPU has no NVLink" (tests/fixtures/nvml/gpu-lost.json).
        g.unavailable.append(("nvlink", "GpuIsLost"))
        return ()
    counters = True
    for link in range(MAX_NVLINKS):
        try:
            state = g.backend.call("nvmlDeviceGetNvLinkState", g.index, link)
        except NvmlNoSuchLink:
            continue
        except NvmlNotSupported:
            if link == 0:
                g.unavailable.append(("nvlink", "NotSupported"))
            break
        except NvmlGpuLost:
            g.lost = True
            g.unavailable.append(("nvlink", "GpuIsLost"))
            break
        except NvmlError as err:
            g.unavailable.append((f"nvlink{link}", err.name))
            continue
        version = g.ask(
            f"nvlink{link}.version",
            "nvmlDeviceGetNvLinkVersion",
            link,
            conv=lambda v: NVLINK_VERSIONS.get(int(v), f"unknown ({int(v)})"),
        )
        remote_type = g.ask(
            f"nvlink{link}.remote_type",
            "nvmlDeviceGetNvLinkRemoteDeviceType",
            link,
            conv=lambda v: REMOTE_TYPES.get(int(v), "UNKNOWN"),
        )
        remote = g.ask(
            f"nvlink{link}.remote_pci", "nvmlDeviceGetNvLinkRemotePciInfo", link, conv=pci_address
        )
        # `nvidia-smi nvlink -s` speed; `nvidia-smi nvlink -e` error counters
        speed = g.ask(
            f"nvlink{link}.speed",
            "nvmlDeviceGetFieldValues",
            FI_NVLINK_GET_SPEED,
            link,
            conv=int,
        )
        errors: list[int | None] = [None] * len(NVLINK_ERROR_COUNTERS)
        if counters:
            for c, name in enumerate(NVLINK_ERROR_COUNTERS):
                errors[c] = g.ask(
                    f"nvlink{link}.{name}", "nvmlDeviceGetNvLinkErrorCounter", link, c, conv=int
                )
            if not links and all(e is None for e in errors):
                # NotSupported on the first link: this GPU keeps no DL counters (Blackwell);
                # said once, not for every link.
                counters = False
        links.append(NvLink(link, bool(int(state)), version, remote_type, remote, speed, *errors))
    return tuple(links)
