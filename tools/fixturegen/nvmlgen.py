"""A simulated NVML, used only to *generate* recordings for the host fixtures.

`SimulatedNvml` implements `GpuBackend.call(fn, *args)` from a declarative `NvmlSpec` (one
`GpuSpec` per GPU). It answers in the shapes `LiveNvml._plain` returns (ints, strs, lists of
ints, the PCI-info / memory / fabric dicts, process dicts) and raises the typed errors
`LiveNvml` raises (built with the same `error_for`), following what NVML's API reference
(nvml.h: each call's "Supported" products and return values) answers per GPU class:

- NVLink: `nvlinks=None` answers NotSupported on link 0 (PCIe GPUs, VMs); otherwise links past
  the GPU's real count answer InvalidArgument (NVML_NVLINK_MAX_LINKS=36 is an upper bound);
- fabric info: `fabric=None` answers NotSupported (A100, PCIe GPUs, single-GPU setups);
- `nvmlDeviceGetNumaNodeId`: NotSupported unless the GPU's memory is a NUMA node (Grace);
- errors are injectable per `(fn, device)` (device None: every GPU; for system calls too), at
  `nvmlInit` (`init_error`), and a GPU can be lost from a given call on: that call and every
  later call on that GPU answer GpuIsLost (XID 79: the GPU fell off the bus).

`record(root, spec)` runs mcpnode's own discovery over a sysfs tree through
`RecordingNvml(SimulatedNvml(spec))`, so a recording holds exactly the calls mcpnode makes: a
fixture recorded by an older mcpnode fails replay with NotRecorded instead of passing silently.
The simulation is never used to *test* mcpnode: tests replay the committed recordings.

A call the simulation does not know raises `SimulationGap` (not an NvmlError), so generation
stops loudly when nvml_facts.py starts asking something new.
"""

from __future__ import annotations

import json
import tempfile
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from mcpnode.host import Host
from mcpnode.topology.discover import discover
from mcpnode.topology.nvml import NVML_CODES, NvmlError, RecordingNvml, error_for
from tools.fixturegen import fixturegen
from tools.fixturegen.fixturegen import HostSpec, PciFunction, parse_cpulist

SNAPSHOT_NAME = "mcpnode-snapshot.json"
SNAPSHOT_FORMAT = "mcpnode.snapshot/v1"
# Fixtures are generated, not captured: a fixed time keeps regeneration byte-identical.
FAKE_CAPTURED_AT = "2025-01-01T00:00:00+00:00"

CODE_OF = {name: code for code, name in NVML_CODES.items()}
# nvmlNvLinkDeviceType / nvmlGpuFabricState_t values
REMOTE_GPU, REMOTE_SWITCH = 0, 2
FABRIC_NOT_STARTED, FABRIC_IN_PROGRESS, FABRIC_COMPLETED = 1, 2, 3
# PCIe generation from the speed sysfs prints (drivers/pci/pci.h pci_speed_string)
PCIE_GEN = {
    fixturegen.GT2_5: 1,
    fixturegen.GT5: 2,
    fixturegen.GT8: 3,
    fixturegen.GT16: 4,
    fixturegen.GT32: 5,
}
MIB = 2**20


class SimulationGap(Exception):
    """The simulation was asked something it does not model (a new NVML call in mcpnode)."""


# ==========================================================================================
# The spec
# ==========================================================================================


@dataclass(frozen=True)
class NvLinkSpec:
    """One NVLink: where its far end is (a GPU for bridges, an NVSwitch on HGX/DGX)."""

    remote: str  # sysfs address of the far end, `0000:05:00.0`
    remote_type: int  # REMOTE_GPU / REMOTE_SWITCH
    remote_device_id: int  # PCI device id of the far end
    active: bool = True


@dataclass(frozen=True)
class FabricSpec:
    """nvmlGpuFabricInfo: state, registration status (an nvmlReturn), clique, cluster UUID."""

    state: int
    status: int = 0
    clique_id: int = 0
    cluster_uuid: bytes = bytes(16)


@dataclass(frozen=True)
class GpuModel:
    """What one product answers, whatever machine it sits in."""

    name: str  # nvmlDeviceGetName
    architecture: int  # nvmlDeviceArchitecture_t
    compute_capability: tuple[int, int]
    memory_bytes: int  # nvmlMemory_t.total as nvidia-smi's "xxxxxMiB" shows it
    gpu_max_pcie_gen: int
    serial_prefix: str
    mig_capable: bool
    nvlink_version: int | None  # NVML enum (A100 5 = 3.1, H100 6 = 4.0); None: no NVLink
    max_clocks_mhz: tuple[int, int] = (1980, 2619)  # SM, memory (`nvidia-smi -q -d CLOCK`)
    power_limit_mw: int = 700_000  # default = enforced on a board nobody capped
    nvlink_speed_mbps: int = 26562  # NVML_FI_DEV_NVLINK_GET_SPEED of one link


H100_SXM = GpuModel("NVIDIA H100 80GB HBM3", 9, (9, 0), 81559 * MIB, 5, "165232203", True, 6)
A100_SXM4_80GB = GpuModel(
    "NVIDIA A100-SXM4-80GB", 7, (8, 0), 81920 * MIB, 4, "132132100", True, 5,
    max_clocks_mhz=(1410, 1593), power_limit_mw=400_000, nvlink_speed_mbps=25781,
)  # fmt: skip
L40S = GpuModel(
    "NVIDIA L40S", 8, (8, 9), 46068 * MIB, 4, "132352400", False, None,
    max_clocks_mhz=(2520, 9001), power_limit_mw=350_000,
)  # fmt: skip
H100_PCIE = GpuModel(
    "NVIDIA H100 PCIe", 9, (9, 0), 81559 * MIB, 5, "132162303", True, None,
    max_clocks_mhz=(1755, 1593), power_limit_mw=350_000,
)  # fmt: skip
H100_NVL = GpuModel(
    "NVIDIA H100 NVL", 9, (9, 0), 95830 * MIB, 5, "165242401", True, 6,
    max_clocks_mhz=(1785, 2619), power_limit_mw=400_000,
)  # fmt: skip
GH200 = GpuModel(
    "NVIDIA GH200 480GB", 9, (9, 0), 97871 * MIB, 5, "165262400", True, None,
    power_limit_mw=900_000,
)  # fmt: skip

# nvmlClocksEventReason* bits
REASON_GPU_IDLE = 0x1
REASON_SW_POWER_CAP = 0x4
REASON_HW_SLOWDOWN = 0x8
REASON_SW_THERMAL = 0x20
REASON_HW_THERMAL = 0x40
REASON_HW_POWER_BRAKE = 0x80
# nvmlGpuP2PStatus_t
P2P_OK, P2P_CHIPSET_NOT_SUPPORTED = 0, 1


@dataclass(frozen=True)
class MigSpec:
    """One MIG device: what its handle answers (UUID, GPU / compute instance, attributes)."""

    uuid: str
    gpu_instance_id: int
    compute_instance_id: int
    memory_mib: int
    slices: int


@dataclass(frozen=True)
class GpuSpec:
    """One GPU's answers. A field that is None answers NotSupported."""

    address: str  # sysfs form, `0000:18:00.0`
    pci_device_id: int  # deviceId << 16 | 0x10DE, as nvmlPciInfo_t.pciDeviceId
    pci_subsystem_id: int  # subsystem device << 16 | subsystem vendor
    name: str
    architecture: int
    compute_capability: tuple[int, int]
    memory_total_bytes: int
    memory_used_bytes: int
    uuid: str
    serial: str | None
    board_id: int | None
    module_id: int | None
    minor: int
    persistence: bool | None = True
    ecc: tuple[int, int] | None = (1, 1)  # current, pending
    ecc_uncorrected: tuple[int, int] = (0, 0)  # volatile, aggregate
    remapped_rows: tuple[int, int, int, int] | None = (0, 0, 0, 0)
    mig: tuple[int, int] | None = (0, 0)  # current, pending
    compute_mode: int | None = 0
    pcie: tuple[int, int, int, int, int] | None = None  # gen cur/max/gpu max, width cur/max
    nvlinks: tuple[NvLinkSpec, ...] | None = None  # None: NotSupported on link 0
    nvlink_version: int = 6
    fabric: FabricSpec | None = None  # None: NotSupported
    cpu_affinity_node: tuple[int, ...] = ()
    cpu_affinity_socket: tuple[int, ...] = ()
    memory_affinity: tuple[int, ...] = ()
    numa_node_id: int | None = None  # None: NotSupported (everything but Grace)
    processes: tuple[tuple[int, int | None], ...] = ()  # (pid, used bytes)
    clocks_event_reasons: int | None = REASON_GPU_IDLE  # an idle GPU, as a healthy host shows
    temperature: tuple[int, int | None, int | None] | None = (34, 87, 92)  # now, slow, shutdown
    power: tuple[int, int, int] | None = (72_000, 700_000, 700_000)  # use, enforced, default mW
    clocks: tuple[int, int, int, int] | None = (345, 1980, 2619, 2619)  # SM, max, mem, max
    # applications clocks SM, memory, then the defaults (NotSupported on consumer boards)
    app_clocks: tuple[int, int, int, int] | None = (1980, 2619, 1980, 2619)
    pcie_replays: int | None = 0
    nvlink_speed_mbps: int = 26562
    # (link, counter index, value) overriding the zero every error counter reads; None: the
    # GPU keeps no NVLink DL counters (NotSupported)
    nvlink_errors: tuple[tuple[int, int, int], ...] | None = ()
    p2p_read: tuple[int, ...] = ()  # nvmlGpuP2PStatus_t per GPU index (own index ignored)
    # MIG devices by slot (None: an empty slot); only asked when `mig` says MIG is on.
    mig_devices: tuple[MigSpec | None, ...] = ()
    mig_slots: int = 7  # nvmlDeviceGetMaxMigDeviceCount: 7 on A100/H100


@dataclass(frozen=True)
class LostAt:
    """GPU `device` falls off the bus at the first call of `fn` (with these arguments after the
    device index, or any when None): that call and every later one on it answer GpuIsLost."""

    device: int
    fn: str
    args: tuple[int, ...] | None = None


@dataclass(frozen=True)
class NvmlSpec:
    """The whole library: versions, GPUs in NVML (= PCI bus) order, injected errors."""

    gpus: tuple[GpuSpec, ...]
    driver: str = "570.133.20"
    cuda: int = 12080  # nvmlSystemGetCudaDriverVersion
    init_error: str | None = None  # LibraryNotFound, DriverNotLoaded, LibRmVersionMismatch...
    # (fn, device or None for all, NVML error name or "LibraryMismatch")
    errors: tuple[tuple[str, int | None, str], ...] = ()
    lost: tuple[LostAt, ...] = ()
    # XIDs the NVML event set delivers, in order: (device index, xid); then Timeout
    xid_events: tuple[tuple[int, int], ...] = ()
    # Functions left out of the recording, as an mcpnode that did not call them recorded it:
    # the replay then meets NotRecorded there, as it would with such a snapshot.
    recorded_without: tuple[str, ...] = ()

    @property
    def nvml_version(self) -> str:
        return f"{self.cuda // 1000}.{self.driver}"


# ==========================================================================================
# The simulation
# ==========================================================================================


def words(ids: Sequence[int], n_words: int) -> list[int]:
    """NVML affinity arrays: word i bit b = CPU (or node) 64*i + b, `n_words` long."""
    out = [0] * n_words
    for i in ids:
        if i >= 64 * n_words:
            raise SimulationGap(f"id {i} does not fit {n_words} words (NVML: InsufficientSize)")
        out[i // 64] |= 1 << (i % 64)
    return out


def pci_info(address: str, device_id: int, subsystem_id: int) -> dict[str, Any]:
    """nvmlPciInfo_t as LiveNvml._pci_info flattens it (busId "%08X:%02X:%02X.0")."""
    domain, bus, rest = address.split(":")
    dev = rest.split(".")[0]
    d, b, v = int(domain, 16), int(bus, 16), int(dev, 16)
    return {
        "domain": d,
        "bus": b,
        "device": v,
        "pciDeviceId": device_id,
        "pciSubSystemId": subsystem_id,
        "busId": f"{d:08X}:{b:02X}:{v:02X}.0",
    }


Handler = Callable[[GpuSpec, tuple[int, ...]], Any]


def _need(value: Any) -> Any:
    if value is None:
        raise _NotSupported
    return value


class _NotSupported(Exception):
    """Internal: the spec says NotSupported (turned into the typed NvmlError by `call`)."""


class _InvalidArgument(Exception):
    """Internal: a link index past the GPU's real links."""


class _NotFound(Exception):
    """Internal: an empty MIG slot (NVML_ERROR_NOT_FOUND)."""


def _mig_count(g: GpuSpec, rest: tuple[int, ...]) -> int:
    _need(g.mig)  # not MIG-capable: NotSupported
    return g.mig_slots


def _mig_device(g: GpuSpec, rest: tuple[int, ...]) -> dict[str, Any]:
    (slot,) = rest
    if g.mig is None or not g.mig[0]:
        raise _InvalidArgument  # MIG off: no MIG device handles
    if not 0 <= slot < g.mig_slots:
        raise _InvalidArgument
    m = g.mig_devices[slot] if slot < len(g.mig_devices) else None
    if m is None:
        raise _NotFound
    return {
        "uuid": m.uuid,
        "gpuInstanceId": m.gpu_instance_id,
        "computeInstanceId": m.compute_instance_id,
        "memorySizeMB": m.memory_mib,
        "gpuInstanceSliceCount": m.slices,
    }


def _link(g: GpuSpec, rest: tuple[int, ...]) -> NvLinkSpec:
    links = _need(g.nvlinks)
    (index,) = rest
    if not 0 <= index < len(links):
        raise _InvalidArgument
    link: NvLinkSpec = links[index]
    return link


def _affinity(g: GpuSpec, rest: tuple[int, ...]) -> list[int]:
    size, scope = rest
    if scope not in (0, 1):
        raise _InvalidArgument
    return words(g.cpu_affinity_node if scope == 0 else g.cpu_affinity_socket, size)


def _memory_affinity(g: GpuSpec, rest: tuple[int, ...]) -> list[int]:
    size, scope = rest
    if scope not in (0, 1):
        raise _InvalidArgument
    return words(g.memory_affinity, size)


def _ecc_errors(g: GpuSpec, rest: tuple[int, ...]) -> int:
    error_type, counter = rest
    if g.ecc is None or not g.ecc[0]:
        raise _NotSupported  # ECC off or absent: no counters
    if error_type != 1:
        return 0  # corrected errors: none in these fixtures
    return g.ecc_uncorrected[counter]


def _fabric(g: GpuSpec, rest: tuple[int, ...]) -> dict[str, Any]:
    f: FabricSpec = _need(g.fabric)
    return {
        "state": f.state,
        "status": f.status,
        "cliqueId": f.clique_id,
        "clusterUuid": f.cluster_uuid.hex(),
    }


def _pcie(i: int) -> Handler:
    return lambda g, rest: _need(g.pcie)[i]


def _temperature(g: GpuSpec, rest: tuple[int, ...]) -> int:
    (sensor,) = rest
    if sensor != 0:
        raise _InvalidArgument
    return int(_need(g.temperature)[0])


def _threshold(g: GpuSpec, rest: tuple[int, ...]) -> int:
    (kind,) = rest
    _now, slowdown, shutdown = _need(g.temperature)
    if kind == 0:
        return int(_need(shutdown))
    if kind == 1:
        return int(_need(slowdown))
    raise _NotSupported


def _clock(column: int, max_column: int) -> Handler:
    def answer(g: GpuSpec, rest: tuple[int, ...]) -> int:
        (clock,) = rest
        values = _need(g.clocks)
        if clock == 1:
            return int(values[column])
        if clock == 2:
            return int(values[max_column])
        raise _InvalidArgument

    return answer


def _app_clock(offset: int) -> Handler:
    def answer(g: GpuSpec, rest: tuple[int, ...]) -> int:
        (clock,) = rest
        values = _need(g.app_clocks)
        if clock not in (1, 2):
            raise _InvalidArgument
        return int(values[offset + clock - 1])

    return answer


def _field(g: GpuSpec, rest: tuple[int, ...]) -> int:
    field, scope = rest
    if field != 164:  # NVML_FI_DEV_NVLINK_GET_SPEED
        raise SimulationGap(f"field {field} is not modelled")
    _link(g, (scope,))
    return g.nvlink_speed_mbps


def _nvlink_error(g: GpuSpec, rest: tuple[int, ...]) -> int:
    link, counter = rest
    _link(g, (link,))
    errors: tuple[tuple[int, int, int], ...] = _need(g.nvlink_errors)
    if not 0 <= counter <= 4:
        raise _InvalidArgument
    for at, c, value in errors:
        if (at, c) == (link, counter):
            return value
    return 0


def _p2p(g: GpuSpec, rest: tuple[int, ...]) -> int:
    other, caps = rest
    if caps != 0:
        raise SimulationGap(f"P2P caps index {caps} is not modelled")
    if not 0 <= other < len(g.p2p_read):
        raise _InvalidArgument
    return g.p2p_read[other]


# Every device call mcpnode makes, with its answer in LiveNvml._plain's shape.
DEVICE_CALLS: dict[str, tuple[int, Handler]] = {
    # name: (number of arguments after the device index, handler)
    "nvmlDeviceGetPciInfo": (
        0,
        lambda g, r: pci_info(g.address, g.pci_device_id, g.pci_subsystem_id),
    ),
    "nvmlDeviceGetMinorNumber": (0, lambda g, r: g.minor),
    "nvmlDeviceGetUUID": (0, lambda g, r: g.uuid),
    "nvmlDeviceGetName": (0, lambda g, r: g.name),
    "nvmlDeviceGetArchitecture": (0, lambda g, r: g.architecture),
    "nvmlDeviceGetCudaComputeCapability": (0, lambda g, r: list(g.compute_capability)),
    "nvmlDeviceGetMemoryInfo": (
        0,
        lambda g, r: {
            "total": g.memory_total_bytes,
            "free": g.memory_total_bytes - g.memory_used_bytes,
            "used": g.memory_used_bytes,
        },
    ),
    "nvmlDeviceGetSerial": (0, lambda g, r: _need(g.serial)),
    "nvmlDeviceGetBoardId": (0, lambda g, r: _need(g.board_id)),
    "nvmlDeviceGetModuleId": (0, lambda g, r: _need(g.module_id)),
    "nvmlDeviceGetPersistenceMode": (0, lambda g, r: int(_need(g.persistence))),
    "nvmlDeviceGetEccMode": (0, lambda g, r: list(_need(g.ecc))),
    "nvmlDeviceGetTotalEccErrors": (2, _ecc_errors),
    "nvmlDeviceGetRemappedRows": (0, lambda g, r: list(_need(g.remapped_rows))),
    "nvmlDeviceGetMigMode": (0, lambda g, r: list(_need(g.mig))),
    "nvmlDeviceGetMaxMigDeviceCount": (0, _mig_count),
    # LiveNvml's composite over the MIG handle of a slot (topology/nvml.py _mig_device)
    "nvmlDeviceGetMigDeviceInfo": (1, _mig_device),
    "nvmlDeviceGetComputeMode": (0, lambda g, r: _need(g.compute_mode)),
    "nvmlDeviceGetCurrPcieLinkGeneration": (0, _pcie(0)),
    "nvmlDeviceGetMaxPcieLinkGeneration": (0, _pcie(1)),
    "nvmlDeviceGetGpuMaxPcieLinkGeneration": (0, _pcie(2)),
    "nvmlDeviceGetCurrPcieLinkWidth": (0, _pcie(3)),
    "nvmlDeviceGetMaxPcieLinkWidth": (0, _pcie(4)),
    "nvmlDeviceGetNvLinkState": (1, lambda g, r: int(_link(g, r).active)),
    "nvmlDeviceGetNvLinkVersion": (1, lambda g, r: (_link(g, r), g.nvlink_version)[1]),
    "nvmlDeviceGetNvLinkRemoteDeviceType": (1, lambda g, r: _link(g, r).remote_type),
    "nvmlDeviceGetNvLinkRemotePciInfo": (
        1,
        lambda g, r: pci_info(
            _link(g, r).remote, _link(g, r).remote_device_id << 16 | fixturegen.V_NVIDIA, 0
        ),
    ),
    "nvmlDeviceGetGpuFabricInfo": (0, _fabric),
    "nvmlDeviceGetCpuAffinityWithinScope": (2, _affinity),
    "nvmlDeviceGetMemoryAffinity": (2, _memory_affinity),
    "nvmlDeviceGetNumaNodeId": (0, lambda g, r: _need(g.numa_node_id)),
    "nvmlDeviceGetComputeRunningProcesses": (
        0,
        lambda g, r: [{"pid": pid, "usedGpuMemory": used} for pid, used in g.processes],
    ),
    "nvmlDeviceGetCurrentClocksEventReasons": (0, lambda g, r: _need(g.clocks_event_reasons)),
    "nvmlDeviceGetCurrentClocksThrottleReasons": (0, lambda g, r: _need(g.clocks_event_reasons)),
    "nvmlDeviceGetTemperature": (1, _temperature),
    "nvmlDeviceGetTemperatureThreshold": (1, _threshold),
    "nvmlDeviceGetPowerUsage": (0, lambda g, r: _need(g.power)[0]),
    "nvmlDeviceGetEnforcedPowerLimit": (0, lambda g, r: _need(g.power)[1]),
    "nvmlDeviceGetPowerManagementDefaultLimit": (0, lambda g, r: _need(g.power)[2]),
    "nvmlDeviceGetClockInfo": (1, _clock(0, 2)),
    "nvmlDeviceGetMaxClockInfo": (1, _clock(1, 3)),
    "nvmlDeviceGetApplicationsClock": (1, _app_clock(0)),
    "nvmlDeviceGetDefaultApplicationsClock": (1, _app_clock(2)),
    "nvmlDeviceGetPcieReplayCounter": (0, lambda g, r: _need(g.pcie_replays)),
    "nvmlDeviceGetFieldValues": (2, _field),
    "nvmlDeviceGetNvLinkErrorCounter": (2, _nvlink_error),
    "nvmlDeviceGetP2PStatus": (2, _p2p),
    "nvmlDeviceRegisterEvents": (2, lambda g, r: None),
}
# nvmlEventTypeXidCriticalError: the only event type mcpnode's agent registers
EVENT_XID = 0x8


class SimulatedNvml:
    """A GpuBackend answering from an NvmlSpec. Stateful like the real library: calls before
    nvmlInit answer Uninitialized, and a lost GPU stays lost."""

    def __init__(self, spec: NvmlSpec) -> None:
        self.spec = spec
        self._initialised = False
        self._lost: set[int] = set()
        self._errors: Mapping[tuple[str, int | None], str] = {
            (fn, dev): name for fn, dev, name in spec.errors
        }
        self._xids = list(spec.xid_events)
        self._event_sets = 0

    def _error(self, name: str, fn: str) -> NvmlError:
        # The same typed error LiveNvml raises: error_for, with NVML's code (None for the
        # binding's own NVMLLibraryMismatchError). No detail: pynvml's message texts are not
        # modelled, and an empty detail is not recorded.
        return error_for(name, CODE_OF.get(name), fn)

    def call(self, fn: str, *args: int) -> Any:
        s = self.spec
        if fn == "nvmlInit":
            if s.init_error is not None:
                raise self._error(s.init_error, fn)
            self._initialised = True
            return None
        if not self._initialised:
            raise self._error("Uninitialized", fn)
        if fn in ("nvmlEventSetWait_v2", "nvmlEventSetFree"):
            return self._event(fn, args)
        system: dict[str, Callable[[], Any]] = {
            "nvmlSystemGetDriverVersion": lambda: s.driver,
            "nvmlSystemGetNVMLVersion": lambda: s.nvml_version,
            "nvmlSystemGetCudaDriverVersion": lambda: s.cuda,
            "nvmlDeviceGetCount": lambda: len(s.gpus),
            "nvmlEventSetCreate": self._create_set,
        }
        if fn in system:
            if args:
                raise SimulationGap(f"{fn} takes no arguments, got {args}")
            injected = self._errors.get((fn, None))
            if injected is not None:
                raise self._error(injected, fn)
            return system[fn]()
        if fn not in DEVICE_CALLS:
            raise SimulationGap(f"the simulated NVML does not model {fn}")
        arity, handler = DEVICE_CALLS[fn]
        if len(args) != 1 + arity:
            raise SimulationGap(f"{fn} takes a device and {arity} arguments, got {args}")
        dev, rest = args[0], tuple(args[1:])
        if not 0 <= dev < len(s.gpus):
            raise self._error("InvalidArgument", fn)
        if dev in self._lost or any(
            at.device == dev and at.fn == fn and at.args in (None, rest) for at in s.lost
        ):
            self._lost.add(dev)
            raise self._error("GpuIsLost", fn)
        injected = self._errors.get((fn, dev), self._errors.get((fn, None)))
        if injected is not None:
            raise self._error(injected, fn)
        try:
            return handler(s.gpus[dev], rest)
        except _NotSupported:
            raise self._error("NotSupported", fn) from None
        except _InvalidArgument:
            raise self._error("InvalidArgument", fn) from None
        except _NotFound:
            raise self._error("NotFound", fn) from None

    def _create_set(self) -> int:
        self._event_sets += 1
        return self._event_sets

    def _event(self, fn: str, args: tuple[int, ...]) -> Any:
        """An event set's wait (timeout 0, as the agent polls): the next queued XID, else
        Timeout, which is what NVML answers when nothing happened."""
        injected = self._errors.get((fn, None))
        if injected is not None:
            raise self._error(injected, fn)
        if fn == "nvmlEventSetFree":
            return None
        if not self._xids:
            raise self._error("Timeout", fn)
        device, xid = self._xids.pop(0)
        return {"device": device, "eventType": EVENT_XID, "eventData": xid}

    def close(self) -> None:
        pass


# ==========================================================================================
# Specs from a fixture's HostSpec
# ==========================================================================================


def _key(f: PciFunction) -> tuple[int, int, int, int]:
    return (f.domain, f.bus, f.dev, f.fn)


def gpu_functions(host: HostSpec) -> list[PciFunction]:
    """NVIDIA display-class functions in PCI order: NVML's index order."""
    fns = fixturegen.pci_functions(host)
    gpus = [f for f in fns if f.vendor == fixturegen.V_NVIDIA and f.class_code >> 16 == 0x03]
    return sorted(gpus, key=_key)


def nvswitch_functions(host: HostSpec) -> list[PciFunction]:
    fns = fixturegen.pci_functions(host)
    switches = (fixturegen.CLASS_NVSWITCH_A100, fixturegen.CLASS_NVSWITCH_H100)
    out = [f for f in fns if f.vendor == fixturegen.V_NVIDIA and f.class_code in switches]
    return sorted(out, key=_key)


def _locality(host: HostSpec, f: PciFunction) -> tuple[list[int], list[int], list[int]]:
    """(node-scope CPUs, socket-scope CPUs, memory-affinity nodes) the driver would report:
    the CPUs the tree's `local_cpulist` gives, the CPUs of the package(s) holding them, and
    the node holding those CPUs."""
    all_cpus = list(range(host.n_cpus))
    node_cpus = {n.id: parse_cpulist(n.cpus) for n in host.numa}
    local = all_cpus if f.node < 0 else node_cpus[f.node]
    packages = {cpu // host.cores_per_socket % host.sockets for cpu in local}
    socket = [cpu for cpu in all_cpus if cpu // host.cores_per_socket % host.sockets in packages]
    nodes = [n for n, cpus in node_cpus.items() if cpus and set(cpus) & set(local)]
    mem = [f.node] if f.node >= 0 else (nodes if len(nodes) == 1 else [])
    return local, socket, mem


def _gen(speed: str | None) -> int:
    if speed is None or speed not in PCIE_GEN:
        raise SimulationGap(f"no PCIe generation for link speed {speed!r}")
    return PCIE_GEN[speed]


def base_gpus(host: HostSpec, model: GpuModel) -> tuple[GpuSpec, ...]:
    """One GpuSpec per GPU of the host, consistent with its sysfs tree: address, ids, PCIe
    link, CPU and memory affinity. No NVLink, no fabric, no GPU NUMA node: callers add them."""
    out = []
    for i, f in enumerate(gpu_functions(host)):
        if f.link is None:
            raise SimulationGap(f"{f.address}: a GPU without a PCIe link")
        local, socket, mem = _locality(host, f)
        width = f.link.width
        out.append(
            GpuSpec(
                address=f.address,
                pci_device_id=f.device << 16 | f.vendor,
                pci_subsystem_id=f.subsystem_device << 16 | f.subsystem_vendor,
                name=model.name,
                architecture=model.architecture,
                compute_capability=model.compute_capability,
                memory_total_bytes=model.memory_bytes,
                memory_used_bytes=4 * MIB,  # an idle GPU: nvidia-smi "4MiB / 81559MiB"
                uuid=f"GPU-{uuid.uuid5(uuid.NAMESPACE_URL, f'mcpnode:{host.name}:{f.address}')}",
                serial=f"{model.serial_prefix}{i:04d}",
                board_id=f.bus << 8,
                module_id=i + 1,
                minor=i,
                mig=(0, 0) if model.mig_capable else None,
                pcie=(
                    _gen(f.link.speed),
                    _gen(f.link.max_speed or f.link.speed),
                    model.gpu_max_pcie_gen,
                    width,
                    f.link.max_width if f.link.max_width is not None else width,
                ),
                nvlink_version=model.nvlink_version or 0,
                nvlink_speed_mbps=model.nvlink_speed_mbps,
                power=(72_000, model.power_limit_mw, model.power_limit_mw),
                clocks=(345, *model.max_clocks_mhz[:1], *model.max_clocks_mhz[1:] * 2),
                app_clocks=(*model.max_clocks_mhz, *model.max_clocks_mhz),
                cpu_affinity_node=tuple(local),
                cpu_affinity_socket=tuple(socket),
                memory_affinity=tuple(mem),
            )
        )
    return tuple(out)


# GPU0's 18 links on an HGX H100 (`nvidia-smi nvlink -R` posted in NVIDIA/nccl#1182),
# as indexes into the 4 NVSwitches at 05..08:00.0: 07 07 06 06 07 07 06 06 05 05 07 06 08 08
# 05 05 08 08 (5+5+4+4 links). GPU1's first two links land on 08: modelled as the same spread
# rotated by one switch per GPU (the published excerpt stops there).
H100_GPU0_SWITCHES = (2, 2, 1, 1, 2, 2, 1, 1, 0, 0, 2, 1, 3, 3, 0, 0, 3, 3)


def switch_links(
    switches: Sequence[PciFunction], pattern: Sequence[int], rotate: int
) -> tuple[NvLinkSpec, ...]:
    n = len(switches)
    return tuple(
        NvLinkSpec(switches[(s + rotate) % n].address, REMOTE_SWITCH, switches[0].device)
        for s in pattern
    )


def bridge_links(peer: GpuSpec, count: int, active: bool) -> tuple[NvLinkSpec, ...]:
    return tuple(
        NvLinkSpec(peer.address, REMOTE_GPU, peer.pci_device_id >> 16, active) for _ in range(count)
    )


def with_p2p(host: HostSpec, spec: NvmlSpec) -> NvmlSpec:
    """nvmlDeviceGetP2PStatus(READ) for every pair, as the driver decides it: OK over NVLink
    (bridge or NVSwitch) and over PCIe within one NUMA node; CNS (chipset not supported)
    across sockets, where the CPUs' interconnect does not forward peer traffic."""
    nodes = [f.node for f in gpu_functions(host)]
    out = []
    for i, g in enumerate(spec.gpus):
        row = []
        for j in range(len(spec.gpus)):
            nvlinked = bool(g.nvlinks) and bool(spec.gpus[j].nvlinks)
            same_node = nodes[i] == nodes[j] and nodes[i] >= 0
            row.append(P2P_OK if nvlinked or same_node or i == j else P2P_CHIPSET_NOT_SUPPORTED)
        out.append(replace(g, p2p_read=tuple(row)))
    return replace(spec, gpus=tuple(out))


def hgx_h100_nvml(host: HostSpec) -> NvmlSpec:
    """8x H100 SXM: 18 links each to the 4 NVSwitches, Fabric Manager done (COMPLETED)."""
    switches = nvswitch_functions(host)
    gpus = []
    for i, g in enumerate(base_gpus(host, H100_SXM)):
        procs: tuple[tuple[int, int | None], ...] = ()
        if i == 0:
            procs = ((311207, 70 * 2**30),)  # one inference server holding 70 GiB
        gpus.append(
            replace(
                g,
                nvlinks=switch_links(switches, H100_GPU0_SWITCHES, i),
                fabric=FabricSpec(FABRIC_COMPLETED),
                processes=procs,
                memory_used_bytes=g.memory_used_bytes + sum(p[1] or 0 for p in procs),
            )
        )
    return with_p2p(host, NvmlSpec(tuple(gpus), driver="570.133.20", cuda=12080))


def dgx_a100_nvml(host: HostSpec) -> NvmlSpec:
    """8x A100 SXM4: 12 links each, two to each of the 6 NVSwitches; no fabric state on
    Ampere (NotSupported: the A100 fabric is not managed through this call)."""
    switches = nvswitch_functions(host)
    pattern = tuple(k // 2 for k in range(12))
    gpus = tuple(
        replace(g, nvlinks=switch_links(switches, pattern, 0), nvlink_version=5)
        for g in base_gpus(host, A100_SXM4_80GB)
    )
    return with_p2p(host, NvmlSpec(gpus, driver="535.183.01", cuda=12020))


def l40s_nvml(host: HostSpec) -> NvmlSpec:
    """4x L40S: no NVLink, no fabric, no MIG (Ada: NotSupported)."""
    return with_p2p(host, NvmlSpec(base_gpus(host, L40S), driver="550.90.07", cuda=12040))


def vm_h100_pcie_nvml(host: HostSpec) -> NvmlSpec:
    """H100 PCIe passed through to a KVM guest: no NVLink ("does not have or support Nvlink"),
    no fabric; sysfs numa_node is -1 there, NVML's memory affinity says node 0."""
    (g,) = base_gpus(host, H100_PCIE)
    # PCIe counters are not passed through to this guest: NVML answers NotSupported
    g = replace(g, pcie_replays=None)
    return with_p2p(
        host, NvmlSpec((replace(g, memory_affinity=(0,)),), driver="575.57.08", cuda=12090)
    )


def h100_nvl_pair_nvml(host: HostSpec, *, active: bool = True) -> NvmlSpec:
    """2x H100 NVL joined by NVLink bridges: 12 links each, far end the peer GPU."""
    a, b = base_gpus(host, H100_NVL)
    return with_p2p(
        host,
        NvmlSpec(
            (
                replace(a, nvlinks=bridge_links(b, 12, active), module_id=1),
                replace(b, nvlinks=bridge_links(a, 12, active), module_id=1),
            ),
            driver="550.54.15",
            cuda=12040,
        ),
    )


def gh200_nvml(host: HostSpec) -> NvmlSpec:
    """GH200: GPU memory is NUMA node 1 (CPU-less); memory affinity names the Grace node 0, the
    CPUs' own memory, not the GPU's node. No NVLink or fabric on a standalone GH200."""
    (g,) = base_gpus(host, GH200)
    # R560+ reports thresholds relative to T.Limit (`nvidia-smi -q`: gpu_temp_slow_tlimit_
    # threshold); the absolute slowdown/shutdown thresholds answer NotSupported
    g = replace(g, temperature=(41, None, None))
    return with_p2p(host, NvmlSpec((replace(g, numa_node_id=1),), driver="560.35.03", cuda=12060))


def fixture_nvml(host: HostSpec) -> NvmlSpec | None:
    """The NVML of a committed fixture, or None for a host without GPUs."""
    makers: dict[str, Callable[[HostSpec], NvmlSpec]] = {
        "hgx-h100-8gpu-8nic": hgx_h100_nvml,
        "dgx-a100": dgx_a100_nvml,
        "pcie-4x-l40s-2socket": l40s_nvml,
        "single-gpu-kvm-vm-h100-pcie": vm_h100_pcie_nvml,
        "h100-nvl-pair": h100_nvl_pair_nvml,
        "h100-nvl-pair-inactive": lambda h: h100_nvl_pair_nvml(h, active=False),
        "grace-hopper-gh200": gh200_nvml,
    }
    maker = makers.get(host.name)
    if maker is None:
        if gpu_functions(host):
            raise SimulationGap(f"{host.name} has GPUs but no NVML spec")
        return None
    return maker(host)


# ==========================================================================================
# Failure cases: standalone recordings under tests/fixtures/nvml/<case>.json
# ==========================================================================================


def _hgx() -> tuple[HostSpec, NvmlSpec]:
    host = fixturegen.hgx_h100_8gpu_8nic()
    return host, hgx_h100_nvml(host)


def nvml_case(name: str) -> tuple[HostSpec, NvmlSpec]:
    """The host a failure case is recorded on (and replayed on in tests), and the NVML that
    fails. Unless said otherwise: the HGX H100 of hgx-h100-8gpu-8nic."""
    host, spec = _hgx()
    if name == "library-not-found":
        return host, replace(spec, init_error="LibraryNotFound")
    if name == "driver-library-mismatch":
        return host, replace(spec, init_error="LibRmVersionMismatch")
    if name == "driver-not-loaded":
        return host, replace(spec, init_error="DriverNotLoaded")
    if name == "no-permission":
        return host, replace(spec, init_error="NoPermission")
    if name == "gpu-lost":
        # XID 79 on GPU 3 while discovery runs: PCI identity read, then the ECC counters fail
        return host, replace(spec, lost=(LostAt(3, "nvmlDeviceGetTotalEccErrors"),))
    if name == "gpu-lost-mid-nvlink":
        # GPU 5 lost while its links are walked: links 0-5 answered, link 6 does not
        return host, replace(spec, lost=(LostAt(5, "nvmlDeviceGetNvLinkState", (6,)),))
    if name == "process-abi-mismatch":
        # binding and driver disagree on nvmlProcessInfo_st (535.43/.86 changed it, 535.98
        # rolled it back; nvidia-ml-py 12.535.77 follows the changed one): pynvml raises
        # NVMLLibraryMismatchError, which LiveNvml records as "LibraryMismatch", code None
        return host, replace(
            spec, errors=(("nvmlDeviceGetComputeRunningProcesses", None, "LibraryMismatch"),)
        )
    if name == "fabric-in-progress":
        # Fabric Manager not (yet) done: CUDA fails with 802 until it registers the GPUs
        gpus = tuple(replace(g, fabric=FabricSpec(FABRIC_IN_PROGRESS)) for g in spec.gpus)
        return host, replace(spec, gpus=gpus)
    if name == "function-not-found":
        # A driver whose libnvidia-ml lacks the fabric symbols (neither ...FabricInfoV nor the
        # v1 call): DGX A100 on an R470 driver, the era of its nvidia-smi reference.
        a100 = fixturegen.dgx_a100()
        return a100, replace(
            dgx_a100_nvml(a100),
            driver="470.57.02",
            cuda=11040,
            errors=(
                ("nvmlDeviceGetGpuFabricInfo", None, "FunctionNotFound"),
                # R535 renamed the clocks throttle reasons to event reasons: an R470 driver
                # has only the old name, which mcpnode falls back to
                ("nvmlDeviceGetCurrentClocksEventReasons", None, "FunctionNotFound"),
            ),
        )
    if name == "mig-enabled":
        # MIG on (current and pending): remapped rows and compute mode want a MIG device handle.
        # Recorded as before mcpnode enumerated MIG devices: their replay is NotRecorded.
        vm = fixturegen.single_gpu_kvm_vm_h100_pcie()
        base = vm_h100_pcie_nvml(vm)
        (g,) = base.gpus
        mig = replace(g, mig=(1, 1), remapped_rows=None, compute_mode=None)
        return vm, replace(base, gpus=(mig,), recorded_without=MIG_DEVICE_CALLS)
    if name == "mig-instances":
        # MIG on with three instances made (`nvidia-smi mig -cgi 9,14,19 -C`: 3g.40gb, 2g.20gb,
        # 1g.10gb on an H100 80GB), slot 1 left empty by a destroyed instance. Memory sizes as
        # nvidia-smi -L shows them for those profiles.
        vm = fixturegen.single_gpu_kvm_vm_h100_pcie()
        base = vm_h100_pcie_nvml(vm)
        (g,) = base.gpus
        devices = (
            MigSpec("MIG-5c3a1e6b-9f2d-5b7e-8a41-2f6c0d9e7b13", 2, 0, 40320, 3),
            None,
            MigSpec("MIG-a8d2f4c1-3e5b-5c9a-b7d6-1e4f8a2c6d05", 3, 0, 20096, 2),
            MigSpec("MIG-e1b7c9d3-6a4f-5e2b-9c8d-7f3a5b1e4c26", 9, 0, 9856, 1),
        )
        mig = replace(g, mig=(1, 1), remapped_rows=None, compute_mode=None, mig_devices=devices)
        return vm, replace(base, gpus=(mig,))
    if name == "no-permission-counters":
        # NVLink error counters and the PCIe replay counter refused to this reader
        return host, replace(
            spec,
            errors=(
                ("nvmlDeviceGetNvLinkErrorCounter", None, "NoPermission"),
                ("nvmlDeviceGetPcieReplayCounter", None, "NoPermission"),
            ),
        )
    raise KeyError(name)


MIG_DEVICE_CALLS = ("nvmlDeviceGetMaxMigDeviceCount", "nvmlDeviceGetMigDeviceInfo")

NVML_CASES = (
    "library-not-found",
    "driver-library-mismatch",
    "driver-not-loaded",
    "no-permission",
    "gpu-lost",
    "gpu-lost-mid-nvlink",
    "mig-enabled",
    "mig-instances",
    "process-abi-mismatch",
    "function-not-found",
    "fabric-in-progress",
    "no-permission-counters",
)


# ==========================================================================================
# Recording and files
# ==========================================================================================


def record(host_root: Path | str, spec: NvmlSpec) -> dict[str, Any]:
    """Run mcpnode's discovery on the tree at `host_root` against the simulation, keeping
    every answer: `{"nvml": {"calls": [...]}}`."""
    rec = RecordingNvml(SimulatedNvml(spec))
    with Host(host_root) as host:
        discover(host, rec)
    calls = [c for c in rec.to_json() if c["fn"] not in spec.recorded_without]
    return {"nvml": {"calls": calls}}


def _calls_json(calls: Sequence[Mapping[str, Any]], indent: str) -> str:
    """`{"calls": [...]}` with one call per line: compact, and a diff shows which answer
    changed."""
    if not calls:
        return '{"calls": []}'
    body = ",\n".join(f"{indent}  {json.dumps(c, sort_keys=True)}" for c in calls)
    return '{"calls": [\n' + body + f"\n{indent}]}}"


def nvml_json(nvml: Mapping[str, Any]) -> str:
    """A standalone recording (tests/fixtures/nvml/<case>.json)."""
    return _calls_json(nvml["calls"], "") + "\n"


def snapshot_meta_json(host: HostSpec, nvml: Mapping[str, Any]) -> str:
    """`mcpnode-snapshot.json` for a generated root. Deliberately without `topology_sha256`
    and `mcpnode_version`: those describe a capture, and a generated fixture would then have
    to be regenerated for every unrelated change of the topology model."""
    meta: dict[str, Any] = {
        "format": SNAPSHOT_FORMAT,
        # The label the committed recordings carry (written when this file was tests/nvmlgen.py):
        # kept as it is so regeneration stays byte-identical with them.
        "generator": "tests/nvmlgen.py (simulated NVML; not a capture of a real machine)",
        "hostname": host.hostname,
        "kernel_release": host.osrelease,
        "captured_at": FAKE_CAPTURED_AT,
        "commands": {},
    }
    lines = [f"  {json.dumps(k)}: {json.dumps(v, sort_keys=True)}" for k, v in sorted(meta.items())]
    lines.append(f'  "nvml": {_calls_json(nvml["calls"], "  ")}')
    lines.sort(key=lambda line: line.split(":", 1)[0])
    return "{\n" + ",\n".join(lines) + "\n}\n"


def write_snapshot_meta(host: HostSpec, root: Path) -> bool:
    """Record the fixture's NVML over its tree at `root` and write `mcpnode-snapshot.json`
    there. False (nothing written) for a host without GPUs."""
    spec = fixture_nvml(host)
    if spec is None:
        return False
    text = snapshot_meta_json(host, record(root, spec)["nvml"])
    (root / SNAPSHOT_NAME).write_text(text)
    return True


def write_cases(dest: Path, names: Sequence[str] = NVML_CASES) -> list[Path]:
    """Record every failure case (each on a fresh tree of its host) into `dest/<case>.json`."""
    dest.mkdir(parents=True, exist_ok=True)
    written = []
    trees: dict[str, Path] = {}
    with tempfile.TemporaryDirectory(prefix="nvmlgen-") as tmp:
        for name in names:
            host, spec = nvml_case(name)
            root = trees.get(host.name)
            if root is None:
                root = Path(tmp) / host.name
                fixturegen.write_host(host, root)
                trees[host.name] = root
            out = dest / f"{name}.json"
            out.write_text(nvml_json(record(root, spec)["nvml"]))
            written.append(out)
    return written


# ==========================================================================================
# NVML event sets: what the agent's XID watcher asks (tests/fixtures/nvml-events/<case>.json)
# ==========================================================================================

EVENTS_DIR = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "nvml-events"


def event_cases() -> dict[str, tuple[HostSpec, NvmlSpec, int]]:
    """case -> (host, NVML, how many polls the recording holds). The HGX H100 unless said."""
    host = fixturegen.hgx_h100_8gpu_8nic()
    spec = hgx_h100_nvml(host)
    return {
        # Xid 79 on GPU 2 at the second poll, Xid 13 on GPU 5 at the third, then quiet
        "xid-79-then-13": (host, replace(spec, xid_events=((2, 79), (5, 13))), 4),
        # a vGPU / restricted driver: registering the XID event is refused on every GPU
        "register-not-supported": (
            host,
            replace(spec, errors=(("nvmlDeviceRegisterEvents", None, "NotSupported"),)),
            1,
        ),
        # an older libnvidia-ml without nvmlEventSetWait_v2
        "wait-function-not-found": (
            host,
            replace(spec, errors=(("nvmlEventSetWait_v2", None, "FunctionNotFound"),)),
            1,
        ),
    }


def record_events(host_root: Path | str, spec: NvmlSpec, polls: int) -> dict[str, Any]:
    """The agent's NVML XID watcher opening its event set on the host's GPUs and polling it
    `polls` times, against the simulation: only the watcher's calls are recorded (discovery's
    are the host fixture's). One XID is released per poll after the first, so a replay shows
    an empty poll, then the events one by one."""
    from mcpnode.agent.health import NvmlXidEvents

    sim = SimulatedNvml(replace(spec, xid_events=()))
    with Host(host_root) as host:
        topo = discover(host, sim)  # the host fixture's own recording holds these answers
    rec = RecordingNvml(sim)
    addresses = {g.nvml.index: g.address for g in topo.gpus if g.nvml is not None}

    class _Quiet:
        def __getattr__(self, _name: str) -> Callable[..., None]:
            return lambda *a, **k: None

    watcher = NvmlXidEvents(rec, addresses, _Quiet())
    watcher.register()
    pending = list(spec.xid_events)
    for i in range(polls):
        if i > 0 and pending:
            sim._xids.append(pending.pop(0))
        watcher.poll()
    watcher.close()
    return {"nvml": {"calls": rec.to_json()}}


def write_event_cases(dest: Path = EVENTS_DIR) -> list[Path]:
    dest.mkdir(parents=True, exist_ok=True)
    written = []
    for name, (host, spec, polls) in event_cases().items():
        root = fixturegen.fixture_hosts()[host.name]
        with tempfile.TemporaryDirectory(prefix="nvmlgen-") as tmp:
            tree = Path(tmp) / host.name
            fixturegen.write_host(root, tree)
            out = dest / f"{name}.json"
            out.write_text(nvml_json(record_events(tree, spec, polls)["nvml"]))
        written.append(out)
    return written
