"""The NVML layer: recording and replay, the error table, the live backend on a GPU-less machine,
snapshots that carry NVML answers, the simulation's answer shapes against LiveNvml's, and the GPU
NUMA fallback chain of merge_nvml.

The live tests use the real pynvml against this machine (no mocks): on a machine without the
NVIDIA driver, nvmlInit fails with LibraryNotFound, and discovery must say so and go on.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from click.testing import CliRunner

from mcpnode.codec.record import fields, replace
from mcpnode.host import Host
from mcpnode.snapshot import write_snapshot
from mcpnode.topology.discover import discover, discover_host, merge_nvml
from mcpnode.topology.jsonify import topology_json
from mcpnode.topology.model import (
    CpuSet,
    Gpu,
    NumaNode,
    NvmlGpu,
    NvmlState,
    PciAddress,
    PciDevice,
    PciLink,
)
from mcpnode.topology.nvml import (
    NVML_CODES,
    SNAPSHOT_META,
    LiveNvml,
    NvmlError,
    NvmlFunctionNotFound,
    NvmlGpuLost,
    NvmlNoSuchLink,
    NvmlNotRecorded,
    NvmlNotSupported,
    NvmlUnavailable,
    RecordedNvml,
    RecordingNvml,
    error_for,
    open_backend,
)
from mcpnode.topology.nvml_facts import collect
from mcpnode.topology.sysfs import Problems
from tools.fixturegen import fixturegen, nvmlgen

if TYPE_CHECKING:
    from mcpnode.topology.model import NumaSource

TESTS = Path(__file__).resolve().parents[1]
HOSTS = TESTS / "fixtures" / "hosts"
NVML_CASES = TESTS / "fixtures" / "nvml"


def _driver_present() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


NO_DRIVER = not _driver_present()


class Scripted:
    """A backend answering from a table: a value, or an NvmlError to raise."""

    def __init__(self, table: dict[tuple[str, tuple[int, ...]], Any]) -> None:
        self.table = table

    def call(self, fn: str, *args: int) -> Any:
        got = self.table[fn, args]
        if isinstance(got, NvmlError):
            raise got
        return got

    def close(self) -> None:
        pass


# -- recording and replay -------------------------------------------------------------------


def test_recording_round_trip_values_and_errors() -> None:
    table: dict[tuple[str, tuple[int, ...]], Any] = {
        ("nvmlInit", ()): None,
        ("nvmlDeviceGetCount", ()): 2,
        ("nvmlDeviceGetName", (0,)): "NVIDIA H100 80GB HBM3",
        ("nvmlDeviceGetEccMode", (0,)): [1, 0],
        ("nvmlDeviceGetPciInfo", (1,)): nvmlgen.pci_info("0000:18:00.0", 0x233010DE, 0),
        ("nvmlDeviceGetNvLinkState", (0, 18)): error_for("InvalidArgument", 2, "x"),
        ("nvmlDeviceGetNumaNodeId", (0,)): error_for("NotSupported", 3, "x"),
        ("nvmlDeviceGetComputeRunningProcesses", (1,)): error_for("LibraryMismatch", None, "x"),
    }
    rec = RecordingNvml(Scripted(table))
    for fn, args in table:
        with contextlib.suppress(NvmlError):
            rec.call(fn, *args)
    calls = json.loads(json.dumps(rec.to_json()))  # through JSON, as a snapshot stores it
    assert calls[0] == {"fn": "nvmlInit", "args": [], "value": None}
    assert {"fn": "nvmlDeviceGetNumaNodeId", "args": [0], "error": "NotSupported", "code": 3} in (
        calls
    )
    replay = RecordedNvml(calls)
    for (fn, args), want in table.items():
        if isinstance(want, NvmlError):
            with pytest.raises(NvmlError) as info:
                replay.call(fn, *args)
            assert (info.value.name, info.value.code) == (want.name, want.code)
        else:
            assert replay.call(fn, *args) == want


def test_collect_through_recording_equals_replay() -> None:
    host = fixturegen.hgx_h100_8gpu_8nic()
    rec = RecordingNvml(nvmlgen.SimulatedNvml(nvmlgen.hgx_h100_nvml(host)))
    live = collect(rec, cpu_words=3, node_words=1)
    replayed = collect(RecordedNvml(json.loads(json.dumps(rec.to_json()))), 3, 1)
    assert replayed == live
    assert live.available and len(live.gpus) == 8


ERROR_CLASSES: dict[str, type[NvmlError]] = {
    "NotSupported": NvmlNotSupported,
    "FunctionNotFound": NvmlFunctionNotFound,
    "GpuIsLost": NvmlGpuLost,
    "NotRecorded": NvmlNotRecorded,
}
AT_INIT_UNAVAILABLE = {
    "LibraryNotFound",
    "DriverNotLoaded",
    "LibRmVersionMismatch",
    "NoPermission",
    "Uninitialized",
    "Unknown",
}


@pytest.mark.parametrize("name", [*sorted(NVML_CODES.values()), "LibraryMismatch", "NotRecorded"])
def test_error_for_table(name: str) -> None:
    code = {v: k for k, v in NVML_CODES.items()}.get(name)
    err = error_for(name, code, "nvmlDeviceGetName", "detail")
    assert type(err) is ERROR_CLASSES.get(name, NvmlError)
    assert (err.name, err.code, err.fn) == (name, code, "nvmlDeviceGetName")
    on_link = error_for(name, code, "nvmlDeviceGetNvLinkState")
    want_link = NvmlNoSuchLink if name == "InvalidArgument" else ERROR_CLASSES.get(name, NvmlError)
    assert type(on_link) is want_link
    at_init = error_for(name, code, "nvmlInit")
    if name in AT_INIT_UNAVAILABLE:
        assert type(at_init) is NvmlUnavailable
    else:
        assert not isinstance(at_init, NvmlUnavailable)


@pytest.mark.parametrize(
    ("fn", "name"),
    [
        ("nvmlInit", "LibRmVersionMismatch"),
        ("nvmlDeviceGetUUID", "GpuIsLost"),
        ("nvmlDeviceGetNvLinkState", "InvalidArgument"),
        ("nvmlDeviceGetGpuFabricInfo", "FunctionNotFound"),
        ("nvmlDeviceGetMigMode", "NotSupported"),
        ("nvmlDeviceGetComputeRunningProcesses", "LibraryMismatch"),
        ("nvmlDeviceGetSerial", "NoPermission"),
    ],
)
def test_replay_raises_the_recorded_type(fn: str, name: str) -> None:
    code = {v: k for k, v in NVML_CODES.items()}.get(name)
    live_err = error_for(name, code, fn, "the binding's message")
    rec = RecordingNvml(Scripted({(fn, (0,)): live_err}))
    with pytest.raises(NvmlError):
        rec.call(fn, 0)
    with pytest.raises(type(live_err)) as info:
        RecordedNvml(rec.to_json()).call(fn, 0)
    assert type(info.value) is type(live_err)
    assert (info.value.name, info.value.code, info.value.fn) == (name, code, fn)
    assert info.value.detail == "the binding's message"  # replays read as the original did


def test_unrecorded_call() -> None:
    replay = RecordedNvml([{"fn": "nvmlInit", "args": [], "value": None}])
    assert replay.call("nvmlInit") is None
    with pytest.raises(NvmlNotRecorded) as info:
        replay.call("nvmlDeviceGetName", 0)
    assert info.value.name == "NotRecorded" and info.value.code is None
    with pytest.raises(NvmlNotRecorded):
        replay.call("nvmlDeviceGetNvLinkState", 0, 37)


def test_replay_without_answers_is_unavailable() -> None:
    with pytest.raises(NvmlUnavailable) as info:
        RecordedNvml(None).call("nvmlInit")
    assert info.value.name == "NotRecorded"
    state = collect(RecordedNvml(None, "no snapshot here"), 1, 1)
    assert not state.available and state.reason == "NotRecorded: no snapshot here"


# -- where a root's backend comes from ------------------------------------------------------


def test_open_backend_reads_a_fixture_snapshot() -> None:
    with Host(HOSTS / "hgx-h100-8gpu-8nic") as host:
        backend = open_backend(host)
        assert isinstance(backend, RecordedNvml)
        assert backend.call("nvmlDeviceGetCount") == 8


@pytest.mark.parametrize(
    ("content", "why"),
    [
        ("{not json", "malformed"),
        ('{"nvml": {"no-calls": []}}', "malformed"),
        ('["a list"]', "malformed"),
        ('{"nvml": null}', "holds no NVML answers"),
    ],
)
def test_open_backend_bad_snapshot_meta(tmp_path: Path, content: str, why: str) -> None:
    (tmp_path / SNAPSHOT_META.lstrip("/")).write_text(content)
    with Host(tmp_path) as host:
        backend = open_backend(host)
    with pytest.raises(NvmlUnavailable) as info:
        backend.call("nvmlInit")
    assert why in str(info.value)


# -- the live backend on this machine -----------------------------------------------------


@pytest.mark.skipif(not NO_DRIVER, reason="libnvidia-ml.so.1 is installed here")
def test_live_nvml_without_driver_is_library_not_found() -> None:
    live = LiveNvml()
    try:
        with pytest.raises(NvmlUnavailable) as info:
            live.call("nvmlInit")
        assert (info.value.name, info.value.code, info.value.fn) == (
            "LibraryNotFound",
            12,
            "nvmlInit",
        )
        # the failure is remembered: every later call answers the same, without retrying
        with pytest.raises(NvmlUnavailable) as again:
            live.call("nvmlDeviceGetCount")
        assert again.value is info.value
    finally:
        live.close()


@pytest.mark.live
@pytest.mark.skipif(not NO_DRIVER, reason="libnvidia-ml.so.1 is installed here")
def test_discover_live_host_reports_nvml_unavailable() -> None:
    with Host("/") as host:
        topo = discover_host(host)
    assert topo.nvml is not None
    assert not topo.nvml.available
    assert (topo.nvml.reason or "").startswith("LibraryNotFound: ")
    assert topo.nvml.gpus == ()
    unavailable = [p for p in topo.problems if p.code == "nvml.unavailable"]
    assert len(unavailable) == (1 if topo.gpus else 0)
    assert all(g.nvml is None for g in topo.gpus)


# -- snapshots carry NVML answers -----------------------------------------------------------


def _topo_json_cli(root: Path) -> dict[str, Any]:
    from mcpnode.cli.main import cli

    res = CliRunner().invoke(cli, ["topo", "--root", str(root), "--format", "json"])
    assert res.exit_code == 0, res.output
    doc: dict[str, Any] = json.loads(res.stdout)
    return doc


@pytest.mark.parametrize("name", ["hgx-h100-8gpu-8nic", "grace-hopper-gh200"])
def test_snapshot_of_fixture_replays_identically(tmp_path: Path, name: str) -> None:
    out = tmp_path / "snap.tar.gz"
    with Host(HOSTS / name) as host:
        result = write_snapshot(host, out)
    want = _topo_json_cli(HOSTS / name)
    assert want["nvml"]["available"]
    assert topology_json(result.topology) == want
    assert _topo_json_cli(out) == want
    with Host(out) as host:
        meta = json.loads(host.read_text(SNAPSHOT_META))
    fixture_meta = json.loads((HOSTS / name / SNAPSHOT_META.lstrip("/")).read_text())
    assert meta["nvml"]["calls"] == fixture_meta["nvml"]["calls"]  # same calls, same order


# -- the simulation answers in LiveNvml's shapes --------------------------------------------


def _shape(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _shape(x) for k, x in sorted(v.items())}
    if isinstance(v, list):
        return ["list", *{repr(_shape(x)) for x in v}]
    return type(v).__name__


def _live_samples() -> dict[str, Any]:
    """What pynvml hands LiveNvml for each call, built from pynvml's own types."""
    import pynvml

    pci = pynvml.nvmlPciInfo_t()
    pci.domain, pci.bus, pci.device = 0, 0x18, 0
    pci.pciDeviceId, pci.pciSubSystemId = 0x233010DE, 0x16C110DE
    pci.busId = b"00000000:18:00.0"
    mem = pynvml.c_nvmlMemory_t()
    mem.total, mem.free, mem.used = 85520809984, 85516615680, 4194304
    words = (ctypes.c_ulonglong * 3)(2**64 - 1, 0, 1)
    procs = [
        pynvml.nvmlFriendlyObject({"pid": 4242, "usedGpuMemory": 2**30}),
        pynvml.nvmlFriendlyObject({"pid": 4243, "usedGpuMemory": None}),
    ]
    return {
        "nvmlDeviceGetPciInfo": pci,
        "nvmlDeviceGetNvLinkRemotePciInfo": pci,
        "nvmlDeviceGetMemoryInfo": mem,
        "nvmlDeviceGetCpuAffinityWithinScope": words,
        "nvmlDeviceGetMemoryAffinity": (ctypes.c_ulonglong * 1)(1),
        "nvmlDeviceGetComputeRunningProcesses": procs,
        "nvmlDeviceGetCudaComputeCapability": (9, 0),
        "nvmlDeviceGetEccMode": [1, 1],
        "nvmlDeviceGetMigMode": [0, 0],
        "nvmlDeviceGetRemappedRows": (0, 0, 0, 0),
        "nvmlDeviceGetName": "NVIDIA H100 80GB HBM3",
        "nvmlDeviceGetUUID": "GPU-257d8671-d0e6-d1a7-dea9-952249a668fa",
        "nvmlDeviceGetSerial": "1652322036482",
    }


def _recorded_values() -> dict[str, list[Any]]:
    """Every answered call of the fixture hosts' snapshots and of the NVML case recordings
    (tests/fixtures/nvml: MIG devices are answered only there)."""
    out: dict[str, list[Any]] = {}
    docs = [json.loads(m.read_text())["nvml"] for m in HOSTS.glob(f"*/{nvmlgen.SNAPSHOT_NAME}")]
    docs += [json.loads(p.read_text()) for p in NVML_CASES.glob("*.json")]
    for doc in docs:
        for c in doc["calls"]:
            if "value" in c:
                out.setdefault(c["fn"], []).append(c["value"])
    return out


# Calls LiveNvml composes itself from several pynvml functions (handles never leave it).
COMPOSED = {
    "nvmlDeviceGetMigDeviceInfo": (
        "nvmlDeviceGetMigDeviceHandleByIndex",
        "nvmlDeviceGetUUID",
        "nvmlDeviceGetGpuInstanceId",
        "nvmlDeviceGetComputeInstanceId",
        "nvmlDeviceGetAttributes",
    ),
}


def test_simulated_answers_have_live_shapes() -> None:
    samples = _live_samples()
    plain = LiveNvml()._plain
    recorded = _recorded_values()
    system = {
        "nvmlInit": "NoneType",
        "nvmlSystemGetDriverVersion": "str",
        "nvmlSystemGetNVMLVersion": "str",
        "nvmlSystemGetCudaDriverVersion": "int",
        "nvmlDeviceGetCount": "int",
        # LiveNvml._fabric builds this dict itself from the fabric struct
        "nvmlDeviceGetGpuFabricInfo": {
            "cliqueId": "int",
            "clusterUuid": "str",
            "state": "int",
            "status": "int",
        },
        # LiveNvml._mig_device builds this one from the MIG handle's answers
        "nvmlDeviceGetMigDeviceInfo": {
            "computeInstanceId": "int",
            "gpuInstanceId": "int",
            "gpuInstanceSliceCount": "int",
            "memorySizeMB": "int",
            "uuid": "str",
        },
    }
    # Recorded on no host fixture nor NVML case: the agent's event registration
    # (tests/agent/test_agent_health.py). The R470 fallback, ...GetCurrentClocksThrottleReasons, is
    # answered in the function-not-found case, which counts here.
    elsewhere = {"nvmlDeviceRegisterEvents"}
    assert set(recorded) == (set(nvmlgen.DEVICE_CALLS) - elsewhere) | set(system)
    for fn, values in sorted(recorded.items()):
        if fn in system:
            want = system[fn]
        elif fn in samples:
            want = _shape(plain(fn, samples[fn]))
        else:
            want = _shape(plain(fn, 5))  # every other getter returns a C int
        for v in values:
            got = _shape(v)
            if isinstance(want, list) and isinstance(got, list):
                assert set(got[1:]) <= set(want[1:]), (fn, got, want)
            else:
                assert got == want, (fn, got, want)
    fabric = next(v for v in recorded["nvmlDeviceGetGpuFabricInfo"])
    assert len(fabric["clusterUuid"]) == 32  # 16 bytes, hex


def test_every_recorded_call_exists_in_pynvml() -> None:
    """LiveNvml calls pynvml.<fn> by name: a name the binding lacks would answer
    FunctionNotFound on every real machine."""
    import pynvml

    for fn in _recorded_values().keys() | {"nvmlDeviceGetNvLinkState"}:
        for name in COMPOSED.get(fn, (fn,)):
            assert hasattr(pynvml, name), name


def test_simulation_refuses_what_it_does_not_model() -> None:
    sim = nvmlgen.SimulatedNvml(nvmlgen.hgx_h100_nvml(fixturegen.hgx_h100_8gpu_8nic()))
    with pytest.raises(NvmlError) as info:
        sim.call("nvmlDeviceGetName", 0)
    assert info.value.name == "Uninitialized"
    sim.call("nvmlInit")
    with pytest.raises(nvmlgen.SimulationGap):
        sim.call("nvmlDeviceGetP2PStatus", 0, 1, 1)  # WRITE caps: not modelled
    with pytest.raises(nvmlgen.SimulationGap):
        sim.call("nvmlDeviceGetNvLinkState", 0)
    with pytest.raises(NvmlNoSuchLink):
        sim.call("nvmlDeviceGetNvLinkState", 0, 18)
    assert sim.call("nvmlDeviceGetNvLinkState", 0, 17) == 1


def test_simulated_gpu_stays_lost() -> None:
    spec = nvmlgen.hgx_h100_nvml(fixturegen.hgx_h100_8gpu_8nic())
    lost = nvmlgen.LostAt(2, "nvmlDeviceGetUUID")
    sim = nvmlgen.SimulatedNvml(nvmlgen.NvmlSpec(spec.gpus, lost=(lost,)))
    sim.call("nvmlInit")
    assert sim.call("nvmlDeviceGetName", 2) == "NVIDIA H100 80GB HBM3"
    for fn in ("nvmlDeviceGetUUID", "nvmlDeviceGetName"):
        with pytest.raises(NvmlGpuLost):
            sim.call(fn, 2)
    assert sim.call("nvmlDeviceGetName", 1) == "NVIDIA H100 80GB HBM3"


# -- GPU NUMA: the fallback chain of merge_nvml -------------------------------------------

ADDR = PciAddress(0, 0x18, 0, 0)
NODES = (
    NumaNode(0, CpuSet(range(4)), 1024, ((0, 10), (1, 21), (2, 80)), True, True),
    NumaNode(1, CpuSet(range(4, 8)), 1024, ((0, 21), (1, 10), (2, 80)), True, True),
    NumaNode(2, CpuSet(), 1024, ((0, 80), (1, 80), (2, 10)), False, True),  # GPU memory
)
LINK = PciLink(32.0, 16, 32.0, 16)


def _gpu(numa: int | None, source: NumaSource) -> tuple[Gpu, PciDevice]:
    dev = PciDevice(
        address=ADDR,
        sysfs_path="/sys/devices/pci0000:15/0000:15:01.0/0000:18:00.0",
        host_bridge="pci0000:15",
        ancestors=(PciAddress(0, 0x15, 1, 0),),
        class_code=0x0302,
        prog_if=0,
        vendor_id=0x10DE,
        device_id=0x2330,
        subsystem_vendor_id=0x10DE,
        subsystem_device_id=0x16C1,
        driver="nvidia",
        numa_node=numa,
        numa_source=source,
        numa_node_raw=numa if source == "own" else -1,
        local_cpus=None,
        link=LINK,
        physfn=None,
        sriov_numvfs=None,
    )
    gpu = Gpu(0, ADDR, 0x10DE, 0x2330, "nvidia", numa, source, None, LINK)
    return gpu, dev


def _facts(mem: set[int] | None, cpus: set[int] | None) -> NvmlGpu:
    values: dict[str, Any] = {name: None for name in fields(NvmlGpu)}
    values.update(
        index=0,
        address=ADDR,
        nvlinks=(),
        lost=False,
        unavailable=(),
        memory_affinity_nodes=None if mem is None else CpuSet(mem),
        cpu_affinity_node=None if cpus is None else CpuSet(cpus),
    )
    return NvmlGpu(**values)


DISAGREE = "gpu.numa.nvml-disagrees"
NUMA_TABLE: list[
    tuple[str, int | None, NumaSource, set[int] | None, set[int] | None, int | None, str, bool]
] = [
    # (case, sysfs node, sysfs source, NVML memory nodes, NVML CPUs, node, source, disagree)
    ("own agrees", 1, "own", {1}, set(range(4, 8)), 1, "own", False),
    ("own wins over memory", 0, "own", {1}, None, 0, "own", True),
    ("ancestor wins over cpus", 1, "ancestor", None, {0, 1}, 1, "ancestor", True),
    ("-1: memory affinity", None, "unknown", {1}, None, 1, "nvml-memory-affinity", False),
    ("guess loses to memory", 0, "host-bridge", {1}, None, 1, "nvml-memory-affinity", True),
    ("guess agrees", 1, "local-cpus", {1}, None, 1, "nvml-memory-affinity", False),
    ("no memory: cpus", None, "unknown", None, {4, 5}, 1, "nvml-cpu-affinity", False),
    ("empty memory mask: cpus", None, "unknown", set(), {4, 5}, 1, "nvml-cpu-affinity", False),
    (
        "memory spans: cpus",
        None,
        "unknown",
        {0, 1},
        set(range(4, 8)),
        1,
        "nvml-cpu-affinity",
        False,
    ),
    ("cpu-less node dropped", None, "unknown", {0, 2}, None, 0, "nvml-memory-affinity", False),
    ("neither: sysfs guess", 0, "local-cpus", None, None, 0, "local-cpus", False),
    ("cpus span nodes: guess", 0, "host-bridge", None, {3, 4}, 0, "host-bridge", False),
    ("nothing: unknown", None, "unknown", None, None, None, "unknown", False),
    ("empty masks: unknown", None, "unknown", set(), set(), None, "unknown", False),
]


@pytest.mark.parametrize(
    ("sys_node", "sys_source", "mem", "cpus", "node", "source", "disagree"),
    [row[1:] for row in NUMA_TABLE],
    ids=[row[0] for row in NUMA_TABLE],
)
def test_gpu_numa_fallback(
    sys_node: int | None,
    sys_source: NumaSource,
    mem: set[int] | None,
    cpus: set[int] | None,
    node: int | None,
    source: str,
    disagree: bool,
) -> None:
    gpu, dev = _gpu(sys_node, sys_source)
    state = NvmlState(True, None, "570.133.20", "12.8", "12.570.133.20", (_facts(mem, cpus),))
    problems = Problems()
    gpus, devices = merge_nvml((gpu,), (dev,), NODES, state, problems)
    (merged,) = gpus
    assert (merged.numa_node, merged.numa_source) == (node, source)
    (merged_dev,) = devices
    assert (merged_dev.numa_node, merged_dev.numa_source) == (node, source)  # NICs, NVMe agree
    assert merged.nvml is state.gpus[0]
    assert [p.code for p in problems.items] == ([DISAGREE] if disagree else [])


def test_merge_nvml_unavailable_keeps_sysfs() -> None:
    gpu, dev = _gpu(1, "own")
    problems = Problems()
    reason = "LibraryNotFound: libnvidia-ml.so.1 not found (no NVIDIA driver installed)"
    state = NvmlState(False, reason, None, None, None, ())
    gpus, devices = merge_nvml((gpu,), (dev,), NODES, state, problems)
    assert gpus == (gpu,) and devices == (dev,)
    assert [(p.code, p.detail) for p in problems.items] == [
        ("nvml.unavailable", f"NVML unavailable: {reason}")
    ]


def test_merge_nvml_memory_node_with_cpus_is_a_problem() -> None:
    gpu, dev = _gpu(0, "own")
    facts = _facts({0}, None)
    values = {name: getattr(facts, name) for name in fields(NvmlGpu)}
    values["memory_numa_node"] = 1  # a node with CPUs: not GPU memory
    state = NvmlState(True, None, None, None, None, (NvmlGpu(**values),))
    problems = Problems()
    (merged,), _ = merge_nvml((gpu,), (dev,), NODES, state, problems)
    assert merged.memory_numa_node == 1 and merged.numa_node == 0
    assert [p.code for p in problems.items] == ["gpu.memory-node-has-cpus"]


def test_discover_with_simulation_and_no_backend_agree_on_sysfs() -> None:
    """NVML joins facts; without a backend the sysfs view stands alone (nvml is None)."""
    with Host(HOSTS / "pcie-4x-l40s-2socket") as host:
        plain = discover(host)
        spec = nvmlgen.fixture_nvml(fixturegen.pcie_4x_l40s_2socket())
        assert spec is not None
        joined = discover(host, nvmlgen.SimulatedNvml(spec))
    assert plain.nvml is None and joined.nvml is not None
    stripped = tuple(replace(g, nvml=None, memory_numa_node=None) for g in joined.gpus)
    assert stripped == plain.gpus
