"""NVML behind a small interface: the live backend over `pynvml` (distribution `nvidia-ml-py`)
and a recorded one that replays a snapshot's answers — values *and* errors — call by call.

Every NVML call goes through `GpuBackend.call(fn, *args)`: `fn` is the NVML function name,
`args` are plain ints (device index first, then link / scope / counter arguments), and the
answer is JSON-ready (int, str, list, dict). That one choke point is what makes recording exact:
the live backend turns handles, ctypes arrays and structs into plain values there, and turns
every pynvml exception into a typed `NvmlError` there (docs/nvml.md: each call and how it fails).
"""

from __future__ import annotations

import atexit

from mcpnode.codec.record import record
from mcpnode.codec.typenames import Protocol
from mcpnode.errors import HostError, McpnodeError

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (codec/typenames.py)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from mcpnode.host import HostReader

# Where a snapshot keeps what cannot be a file (written by mcpnode/snapshot.py).
SNAPSHOT_META = "/mcpnode-snapshot.json"

# nvml.h return codes (NVML API 13; nvidia-ml-py 13.615.71 pynvml.py l. 223-251).
NVML_CODES: dict[int, str] = {
    1: "Uninitialized",
    2: "InvalidArgument",
    3: "NotSupported",
    4: "NoPermission",
    5: "AlreadyInitialized",
    6: "NotFound",
    7: "InsufficientSize",
    8: "InsufficientPower",
    9: "DriverNotLoaded",
    10: "Timeout",
    11: "IrqIssue",
    12: "LibraryNotFound",
    13: "FunctionNotFound",
    14: "CorruptedInforom",
    15: "GpuIsLost",
    16: "ResetRequired",
    17: "OperatingSystem",
    18: "LibRmVersionMismatch",
    19: "InUse",
    20: "Memory",
    21: "NoData",
    22: "VgpuEccNotSupported",
    23: "InsufficientResources",
    24: "FreqNotSupported",
    25: "ArgumentVersionMismatch",
    26: "Deprecated",
    27: "NotReady",
    999: "Unknown",
}


class NvmlError(McpnodeError):
    """An NVML call failed. `name` is NVML's error name (`NotSupported`), `code` its number
    (None for errors raised by the Python binding itself)."""

    def __init__(self, name: str, code: int | None, fn: str, detail: str = "") -> None:
        super().__init__(f"{fn}: {name}" + (f" ({detail})" if detail else ""))
        self.name = name
        self.code = code
        self.fn = fn
        self.detail = detail


class NvmlUnavailable(NvmlError):
    """NVML cannot be used at all on this host: no library, driver not loaded, the user-space
    library and the kernel module disagree, no permission. Discovery goes on from sysfs."""


class NvmlNotSupported(NvmlError):
    """This GPU or driver does not support the call (code 3): a fact, not a fault."""


class NvmlNoSuchLink(NvmlError):
    """InvalidArgument on an NVLink call: link index past this GPU's real link count
    (NVML_NVLINK_MAX_LINKS is an upper bound, 36 in NVML 13; GB200 answers 18..35 this way)."""


class NvmlFunctionNotFound(NvmlError):
    """The installed driver's libnvidia-ml lacks the symbol (older driver than the binding)."""


class NvmlGpuLost(NvmlError):
    """GpuIsLost (15): the GPU fell off the bus (XID 79); every later call on it fails too."""


class NvmlNotRecorded(NvmlError):
    """Replay asked for an answer the snapshot does not hold (made by an older mcpnode)."""


_UNAVAILABLE = {"LibraryNotFound", "DriverNotLoaded", "LibRmVersionMismatch", "NoPermission"}


def error_for(name: str, code: int | None, fn: str, detail: str = "") -> NvmlError:
    """The typed error for an NVML error name; used by the live and the recorded backend alike,
    so a replayed error is the same type the live one was."""
    if fn == "nvmlInit" and name in _UNAVAILABLE | {"Uninitialized", "Unknown"}:
        return NvmlUnavailable(name, code, fn, detail)
    cls: type[NvmlError] = {
        "NotSupported": NvmlNotSupported,
        "FunctionNotFound": NvmlFunctionNotFound,
        "GpuIsLost": NvmlGpuLost,
        "NotRecorded": NvmlNotRecorded,
    }.get(name, NvmlError)
    if name == "InvalidArgument" and "NvLink" in fn:
        cls = NvmlNoSuchLink
    return cls(name, code, fn, detail)


class GpuBackend(Protocol):
    """Where NVML answers come from."""

    def call(self, fn: str, *args: int) -> Any:
        """Answer of NVML function `fn` (JSON-ready), or raise an NvmlError subclass."""
        ...

    def close(self) -> None: ...


@record
class Answer:
    """One recorded call: the value, or the error name, code and detail it raised."""

    fn: str
    args: tuple[int, ...]
    value: Any = None
    error: str | None = None
    code: int | None = None
    # Kept so a replayed error reads as the original did: nvml_facts._reason prints a
    # NotRecorded error's detail ("not a mcpnode snapshot ..."), and a snapshot of a plain dump
    # must replay to the same NVML reason (tests/topology/test_snapshot.py). Omitted when empty.
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"fn": self.fn, "args": list(self.args)}
        if self.error is None:
            out["value"] = self.value
        else:
            out["error"] = self.error
            out["code"] = self.code
            if self.detail:
                out["detail"] = self.detail
        return out


class RecordedNvml:
    """Replays answers recorded by `RecordingNvml` (a snapshot's `nvml.calls`).

    A call recorded several times with the same arguments (an event set polled again and
    again) replays its answers in the recorded order, the last one from then on; a discovery
    asks each question once, so for it this is the one answer recorded."""

    def __init__(self, calls: list[dict[str, Any]] | None, reason: str | None = None) -> None:
        self._answers: dict[tuple[str, tuple[int, ...]], list[dict[str, Any]]] = {}
        self._reason = reason
        for c in calls or ():
            key = (str(c["fn"]), tuple(int(a) for a in c.get("args", ())))
            self._answers.setdefault(key, []).append(c)
        if calls is None and reason is None:
            self._reason = "no NVML answers recorded"

    def call(self, fn: str, *args: int) -> Any:
        if self._reason is not None and fn == "nvmlInit":
            raise NvmlUnavailable("NotRecorded", None, fn, self._reason)
        queue = self._answers.get((fn, args))
        if not queue:
            raise NvmlNotRecorded("NotRecorded", None, fn, f"args {list(args)}")
        got = queue.pop(0) if len(queue) > 1 else queue[0]
        if "error" in got:
            raise error_for(str(got["error"]), got.get("code"), fn, str(got.get("detail", "")))
        return got.get("value")

    def close(self) -> None:
        pass


class RecordingNvml:
    """Wraps a backend and keeps every answer it gives, errors included, for a snapshot."""

    def __init__(self, inner: GpuBackend) -> None:
        self.inner = inner
        self.answers: list[Answer] = []

    def call(self, fn: str, *args: int) -> Any:
        try:
            value = self.inner.call(fn, *args)
        except NvmlError as err:
            self.answers.append(Answer(fn, args, error=err.name, code=err.code, detail=err.detail))
            raise
        self.answers.append(Answer(fn, args, value=value))
        return value

    def close(self) -> None:
        self.inner.close()

    def to_json(self) -> list[dict[str, Any]]:
        return [a.to_json() for a in self.answers]


# -- the live backend --------------------------------------------------------------------------

_NOT_AN_EVENT_CALL = object()


def _words_to_list(array: Any) -> list[int]:
    return [int(w) for w in array]


def _pci_info(info: Any) -> dict[str, Any]:
    # busId is "%08X:%02X:%02X.0"; keep the integer fields, which are what address
    # normalisation uses (domains are non-zero on Azure/Hyper-V and GB200).
    return {
        "domain": int(info.domain),
        "bus": int(info.bus),
        "device": int(info.device),
        "pciDeviceId": int(info.pciDeviceId),
        "pciSubSystemId": int(info.pciSubSystemId),
        "busId": _text(info.busId),
    }


def _text(v: Any) -> str:
    # nvidia-ml-py >= 11.5 decodes to str; older bindings (gpuopenanalytics 8.x) gave bytes.
    return v.decode(errors="replace") if isinstance(v, bytes) else str(v)


def _processes(procs: Any) -> list[dict[str, Any]]:
    out = []
    for p in procs:
        used = getattr(p, "usedGpuMemory", None)
        out.append({"pid": int(p.pid), "usedGpuMemory": None if used is None else int(used)})
    return out


class LiveNvml:
    """pynvml, initialised lazily under a lock on the first call and shut down at exit.

    Handles never leave this class: device arguments are NVML indexes. Versioned functions
    (fabric info V vs v1) are probed once per instance and the working one remembered.
    """

    def __init__(self) -> None:
        # threading here, not at import: only the live backend takes the lock, and every
        # `topo` of a recorded root imports this module.
        import threading

        self._lock = threading.Lock()
        self._nvml: Any = None
        self._handles: dict[int, Any] = {}
        self._init_error: NvmlError | None = None
        self._variant: dict[str, str] = {}
        self._event_sets: dict[int, Any] = {}
        self._next_set = 0

    def _load(self) -> Any:
        with self._lock:
            if self._nvml is not None:
                return self._nvml
            if self._init_error is not None:
                raise self._init_error
            try:
                import pynvml  # nvidia-ml-py; importing never fails without a GPU
            except ImportError as err:
                self._init_error = NvmlUnavailable("LibraryNotFound", 12, "nvmlInit", str(err))
                raise self._init_error from err
            try:
                pynvml.nvmlInit()
            except pynvml.NVMLError as err:
                self._init_error = self._translate(pynvml, err, "nvmlInit")
                raise self._init_error from err
            atexit.register(self.close)
            self._nvml = pynvml
            return pynvml

    @staticmethod
    def _translate(pynvml: Any, err: Exception, fn: str) -> NvmlError:
        if isinstance(err, pynvml.NVMLError):
            code = int(getattr(err, "value", 999))
            return error_for(NVML_CODES.get(code, "Unknown"), code, fn, str(err))
        # NVMLLibraryMismatchError subclasses Exception, not NVMLError (pynvml.py l. 1033):
        # the process-info struct of the binding does not match the driver (535.43/.86).
        return error_for("LibraryMismatch", None, fn, str(err))

    def _handle(self, nvml: Any, index: int) -> Any:
        h = self._handles.get(index)
        if h is None:
            h = nvml.nvmlDeviceGetHandleByIndex(index)
            self._handles[index] = h
        return h

    def call(self, fn: str, *args: int) -> Any:
        nvml = self._load()
        if fn == "nvmlInit":
            return None
        try:
            return self._dispatch(nvml, fn, args)
        except NvmlError:
            raise
        except nvml.NVMLError as err:
            raise self._translate(nvml, err, fn) from err
        except Exception as err:
            if type(err).__name__ == "NVMLLibraryMismatchError":
                raise self._translate(nvml, err, fn) from err
            raise

    def _dispatch(self, nvml: Any, fn: str, args: tuple[int, ...]) -> Any:
        system: dict[str, Callable[[], Any]] = {
            "nvmlSystemGetDriverVersion": lambda: _text(nvml.nvmlSystemGetDriverVersion()),
            "nvmlSystemGetNVMLVersion": lambda: _text(nvml.nvmlSystemGetNVMLVersion()),
            "nvmlSystemGetCudaDriverVersion": lambda: int(nvml.nvmlSystemGetCudaDriverVersion()),
            "nvmlDeviceGetCount": lambda: int(nvml.nvmlDeviceGetCount()),
        }
        if fn in system:
            return system[fn]()
        events = self._event_call(nvml, fn, args)
        if events is not _NOT_AN_EVENT_CALL:
            return events
        h = self._handle(nvml, args[0])
        rest = args[1:]
        if fn == "nvmlDeviceGetGpuFabricInfo":
            return self._fabric(nvml, h)
        if fn == "nvmlDeviceGetP2PStatus":
            # (device a, device b, caps index): both devices are NVML indexes here.
            return int(nvml.nvmlDeviceGetP2PStatus(h, self._handle(nvml, rest[0]), rest[1]))
        if fn == "nvmlDeviceGetFieldValues":
            return self._field_value(nvml, fn, h, rest)
        if fn == "nvmlDeviceGetMigDeviceInfo":
            return self._mig_device(nvml, h, rest[0])
        getter = getattr(nvml, fn, None)
        if getter is None:
            # An older binding without this function: same answer as a driver without the symbol.
            raise NvmlFunctionNotFound("FunctionNotFound", 13, fn, "not in this pynvml")
        value = getter(h, *rest)
        return self._plain(fn, value)

    def _plain(self, fn: str, value: Any) -> Any:
        if fn in ("nvmlDeviceGetPciInfo", "nvmlDeviceGetNvLinkRemotePciInfo"):
            return _pci_info(value)
        if fn == "nvmlDeviceGetMemoryInfo":
            return {"total": int(value.total), "free": int(value.free), "used": int(value.used)}
        if fn in ("nvmlDeviceGetCpuAffinityWithinScope", "nvmlDeviceGetMemoryAffinity"):
            return _words_to_list(value)
        if fn == "nvmlDeviceGetComputeRunningProcesses":
            return _processes(value)
        if isinstance(value, (list, tuple)):
            return [int(v) for v in value]
        if isinstance(value, (str, bytes)):
            return _text(value)
        return int(value)

    @staticmethod
    def _mig_device(nvml: Any, h: Any, slot: int) -> dict[str, Any]:
        """One MIG device, asked through its own handle (handles never leave this class, so
        the recording names the parent's index and the slot): nvmlDeviceGetMigDeviceHandleByIndex
        (NotFound for an empty slot), then nvmlDeviceGetUUID, ...GetGpuInstanceId,
        ...GetComputeInstanceId and nvmlDeviceGetAttributes (memorySizeMB,
        gpuInstanceSliceCount) on it."""
        mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(h, slot)
        attrs = nvml.nvmlDeviceGetAttributes(mig)
        return {
            "uuid": _text(nvml.nvmlDeviceGetUUID(mig)),
            "gpuInstanceId": int(nvml.nvmlDeviceGetGpuInstanceId(mig)),
            "computeInstanceId": int(nvml.nvmlDeviceGetComputeInstanceId(mig)),
            "memorySizeMB": int(attrs.memorySizeMB),
            "gpuInstanceSliceCount": int(attrs.gpuInstanceSliceCount),
        }

    def _field_value(self, nvml: Any, fn: str, h: Any, rest: tuple[int, ...]) -> Any:
        """One field (fieldId, scopeId) of nvmlDeviceGetFieldValues: its value, or the entry's
        own nvmlReturn raised as the typed error (the call succeeds while a field fails)."""
        field_id, scope = rest[0], (rest[1] if len(rest) > 1 else 0)
        (value,) = nvml.nvmlDeviceGetFieldValues(h, [(field_id, scope)])
        ret = int(value.nvmlReturn)
        if ret != 0:
            raise error_for(NVML_CODES.get(ret, "Unknown"), ret, fn, f"field {field_id}")
        kind = int(value.valueType)
        # nvmlValueType_t: DOUBLE 0, UNSIGNED_INT 1, UNSIGNED_LONG 2, UNSIGNED_LONG_LONG 3,
        # SIGNED_LONG_LONG 4, SIGNED_INT 5, UNSIGNED_SHORT 6
        member = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal",
                  6: "usVal"}.get(kind)  # fmt: skip
        if member is None:
            raise error_for("Unknown", None, fn, f"field {field_id}: value type {kind}")
        got = getattr(value.value, member)
        return float(got) if kind == 0 else int(got)

    # NVML's event set is a handle with no file descriptor; the agent polls it with timeout 0
    # (docs/service.md). Sets are kept here by number so handles never leave this class.
    def _event_call(self, nvml: Any, fn: str, args: tuple[int, ...]) -> Any:
        if fn == "nvmlEventSetCreate":
            self._next_set += 1
            self._event_sets[self._next_set] = nvml.nvmlEventSetCreate()
            return self._next_set
        if fn == "nvmlDeviceRegisterEvents":
            index, mask, number = args
            nvml.nvmlDeviceRegisterEvents(
                self._handle(nvml, index), mask, self._event_set(fn, number)
            )
            return None
        if fn == "nvmlEventSetWait_v2":
            number, timeout_ms = args
            data = nvml.nvmlEventSetWait_v2(self._event_set(fn, number), timeout_ms)
            return {
                "device": self._index_of(nvml, data.device),
                "eventType": int(data.eventType),
                "eventData": int(data.eventData),
            }
        if fn == "nvmlEventSetFree":
            (number,) = args
            nvml.nvmlEventSetFree(self._event_set(fn, number))
            del self._event_sets[number]
            return None
        return _NOT_AN_EVENT_CALL

    def _event_set(self, fn: str, number: int) -> Any:
        got = self._event_sets.get(number)
        if got is None:
            raise error_for("InvalidArgument", 2, fn, f"no event set {number}")
        return got

    def _index_of(self, nvml: Any, handle: Any) -> int | None:
        """The NVML index of a device handle an event carries (None: not one of ours)."""
        try:
            return int(nvml.nvmlDeviceGetIndex(handle))
        except nvml.NVMLError:
            return None

    def _fabric(self, nvml: Any, h: Any) -> dict[str, Any]:
        """Fabric state: nvmlDeviceGetGpuFabricInfoV (driver >= 550, v3 struct) when the driver
        has it, else the deprecated v1 call; the working variant is remembered."""
        variants = ["V", "v1"] if "fabric" not in self._variant else [self._variant["fabric"]]
        last: Exception | None = None
        for variant in variants:
            try:
                if variant == "V":
                    info = nvml.c_nvmlGpuFabricInfo_v3_t()
                    info.version = nvml.nvmlGpuFabricInfo_v3
                    nvml.nvmlDeviceGetGpuFabricInfoV(h, nvml.byref(info))
                else:
                    info = nvml.c_nvmlGpuFabricInfo_t()
                    nvml.nvmlDeviceGetGpuFabricInfo(h, nvml.byref(info))
            except (AttributeError, nvml.NVMLError_FunctionNotFound) as err:
                last = err
                continue
            self._variant["fabric"] = variant
            return {
                "state": int(info.state),
                "status": int(info.status),
                "cliqueId": int(info.cliqueId),
                "clusterUuid": bytes(info.clusterUuid).hex(),
            }
        if isinstance(last, nvml.NVMLError):
            raise last
        raise NvmlFunctionNotFound("FunctionNotFound", 13, "nvmlDeviceGetGpuFabricInfo")

    def close(self) -> None:
        import contextlib  # the live backend only: `topo` on a dump never loads it

        with self._lock:
            if self._nvml is not None:
                # Shutting down at exit: a failure here has no one left to tell.
                for event_set in self._event_sets.values():
                    with contextlib.suppress(Exception):
                        self._nvml.nvmlEventSetFree(event_set)
                self._event_sets.clear()
                with contextlib.suppress(Exception):
                    self._nvml.nvmlShutdown()
                self._nvml = None
                self._handles.clear()


def open_backend(host: HostReader) -> GpuBackend:
    """The live NVML for the live root; for any other root, the answers its snapshot recorded
    (none for a plain sysfs dump: NVML is then reported unavailable, and sysfs still lists the
    GPUs)."""
    if host.is_live:
        return LiveNvml()
    try:
        text = host.read_optional(SNAPSHOT_META)
    except HostError as err:
        return RecordedNvml(None, f"{SNAPSHOT_META} unreadable: {err}")
    if text is None:
        return RecordedNvml(None, "not a mcpnode snapshot (no mcpnode-snapshot.json)")
    try:
        import json  # a snapshot's: a live host or a plain dump has none to read

        meta = json.loads(text)
        nvml = meta.get("nvml")
        calls = None if nvml is None else list(nvml["calls"])
    except (ValueError, AttributeError, KeyError, TypeError) as err:
        return RecordedNvml(None, f"{SNAPSHOT_META} is malformed: {err}")
    if calls is None:
        return RecordedNvml(None, "the snapshot holds no NVML answers")
    return RecordedNvml(calls)
