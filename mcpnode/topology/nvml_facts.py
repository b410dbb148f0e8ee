"""Per-GPU facts from a GpuBackend. Every question is one backend call; an answer NVML could not
give becomes a None fact with its reason, never a crash and never a fake zero.

Each getter names its `nvidia-smi -q` equivalent, so a reader can check a value by hand.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from mcpnode.topology.model import (
    CpuSet,
    GpuProcess,
    MigDevice,
    NvLink,
    NvmlGpu,
    NvmlState,
    PciAddress,
)
from mcpnode.topology.nvml import (
    NVML_CODES,
    GpuBackend,
    NvmlError,
    NvmlGpuLost,
    NvmlNoSuchLink,
    NvmlNotSupported,
)

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
        except (TypeError, ValueError, KeyError, IndexError) as err:
            # A recorded or live answer of the wrong shape: a fact we cannot use, said as such.
            self.unavailable.append((fact, f"malformed answer: {err}"))
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
    return NvmlState(True, None, driver, cuda, nvml_version, gpus)


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
        except (TypeError, ValueError, KeyError) as err:
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
        links.append(NvLink(link, bool(int(state)), version, remote_type, remote))
    return tuple(links)
