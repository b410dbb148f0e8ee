"""NVML recordings on the host fixtures and the failure recordings, replayed through mcpnode.

- each GPU fixture root holds the NVML answers its discovery got from tools/fixturegen/nvmlgen.py
  (`mcpnode-snapshot.json`): replaying them gives the same topology as the simulation did, with
  no call left unrecorded;
- the new hosts (H100 NVL pair with active and inactive bridges, GH200) give the matrix, NUMA
  and problems their hardware would;
- every failure recording under tests/fixtures/nvml/ yields its typed result: NVML unavailable
  with the reason, GPUs still listed from sysfs; or None facts with their reasons; never a
  crash, never a 0 standing in for an answer NVML did not give.
The matrices of hgx-h100-8gpu-8nic, pcie-4x-l40s-2socket, dgx-a100 and the KVM VM are compared
cell by cell with nvidia-smi in test_fixtures_nvsmi.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from mcpnode.host import Host
from mcpnode.topology.discover import discover, discover_host
from mcpnode.topology.jsonify import topology_json
from mcpnode.topology.matrix import build_matrix
from mcpnode.topology.model import CpuSet, NvmlGpu, PciAddress, Topology
from mcpnode.topology.nvml import RecordedNvml
from tests.support.nvsmi import parse_topo_matrix
from tools.fixturegen import fixturegen, nvmlgen

TESTS = Path(__file__).resolve().parents[1]
HOSTS = TESTS / "fixtures" / "hosts"
CASES = TESTS / "fixtures" / "nvml"
SPECS = fixturegen.fixture_hosts()
GPU_HOSTS = sorted(n for n, s in SPECS.items() if nvmlgen.gpu_functions(s))
PCIE_BUCKETS = ("PIX", "PXB", "PHB", "NODE", "SYS")

# NvmlGpu fields per fact name in `unavailable` (nvml_facts._collect_gpu)
FACT_FIELDS: dict[str, tuple[str, ...]] = {
    "pci": ("address",),
    "minor": ("minor",),
    "uuid": ("uuid",),
    "name": ("name",),
    "architecture": ("architecture",),
    "compute_capability": ("compute_capability",),
    "memory": ("memory_total_mib",),
    "serial": ("serial",),
    "board_id": ("board_id",),
    "module_id": ("module_id",),
    "persistence_mode": ("persistence_mode",),
    "ecc_mode": ("ecc_current", "ecc_pending"),
    "ecc_uncorrected_volatile": ("ecc_uncorrected_volatile",),
    "ecc_uncorrected_aggregate": ("ecc_uncorrected_aggregate",),
    "remapped_rows": (
        "remapped_rows_correctable",
        "remapped_rows_uncorrectable",
        "remapped_rows_pending",
        "remapped_rows_failure",
    ),
    "mig_mode": ("mig_current", "mig_pending"),
    "compute_mode": ("compute_mode",),
    "pcie_gen_current": ("pcie_gen_current",),
    "pcie_gen_max": ("pcie_gen_max",),
    "pcie_gen_gpu_max": ("pcie_gen_gpu_max",),
    "pcie_width_current": ("pcie_width_current",),
    "pcie_width_max": ("pcie_width_max",),
    "fabric": ("fabric_state", "fabric_status"),
    "cpu_affinity_node": ("cpu_affinity_node",),
    "cpu_affinity_socket": ("cpu_affinity_socket",),
    "memory_affinity": ("memory_affinity_nodes",),
    "memory_numa_node": ("memory_numa_node",),
    "processes": ("processes",),
    "clocks_event_reasons": ("clocks_event_reasons",),
    "temperature": ("temperature_c",),
    "temperature_slowdown": ("temperature_slowdown_c",),
    "temperature_shutdown": ("temperature_shutdown_c",),
    "power_usage": ("power_usage_mw",),
    "power_limit": ("power_limit_mw",),
    "power_default_limit": ("power_default_limit_mw",),
    "clock_sm": ("clock_sm_mhz",),
    "clock_max_sm": ("clock_sm_max_mhz",),
    "clock_mem": ("clock_mem_mhz",),
    "clock_max_mem": ("clock_mem_max_mhz",),
    "app_clock_sm": ("app_clock_sm_mhz",),
    "app_clock_mem": ("app_clock_mem_mhz",),
    "default_app_clock_sm": ("default_app_clock_sm_mhz",),
    "default_app_clock_mem": ("default_app_clock_mem_mhz",),
    "pcie_replay_count": ("pcie_replay_count",),
}
# NvLink fields per per-link fact suffix in `unavailable` (`nvlink3.speed`, ...)
LINK_FIELDS = {
    "speed": "speed_mbps",
    "replay_errors": "replay_errors",
    "recovery_errors": "recovery_errors",
    "crc_flit_errors": "crc_flit_errors",
    "crc_data_errors": "crc_data_errors",
}


def load_case(name: str) -> list[dict[str, Any]]:
    calls: list[dict[str, Any]] = json.loads((CASES / f"{name}.json").read_text())["calls"]
    return calls


def replay_case(name: str) -> Topology:
    host_spec, _ = nvmlgen.nvml_case(name)
    with Host(HOSTS / host_spec.name) as host:
        return discover(host, RecordedNvml(load_case(name)))


def fixture_topo(name: str) -> Topology:
    with Host(HOSTS / name) as host:
        return discover_host(host)


def codes(topo: Topology, code: str) -> list[str]:
    return [p.source for p in topo.problems if p.code == code]


def matrix_cells(topo: Topology) -> dict[tuple[str, str], str]:
    m = build_matrix(topo)
    return {(r.label, c): v for r in m.rows for c, v in zip(m.columns, r.cells, strict=True)}


def reasons(g: NvmlGpu) -> dict[str, str]:
    return dict(g.unavailable)


def assert_none_means_unavailable(g: NvmlGpu) -> None:
    """A fact is None exactly when `unavailable` says why (no silent None, no fake value)."""
    why = reasons(g)
    for fact, fields in FACT_FIELDS.items():
        values = [getattr(g, f) for f in fields]
        if fact in why:
            assert values == [None] * len(values), (g.index, fact, values)
        else:
            assert None not in values, (g.index, fact, values)
    if "nvlink" in why and not g.lost:  # a lost GPU keeps the links asked before the loss
        assert g.nvlinks == (), (g.index, g.nvlinks)
    extra = set(why) - set(FACT_FIELDS) - {"nvlink"}
    # mig_devices is asked only in MIG mode (unknown otherwise, so not in FACT_FIELDS)
    assert all(f.startswith(("nvlink", "mig_devices")) for f in extra), extra
    for link in g.nvlinks:
        for suffix, field in LINK_FIELDS.items():
            value = getattr(link, field)
            said = f"nvlink{link.link}.{suffix}" in why
            if suffix != "speed" and not said and value is None:
                # counters asked only while the first link answered: said once for all
                said = any(f"nvlink{x.link}.{suffix}" in why for x in g.nvlinks[:1])
            assert (value is None) == said, (g.index, link.link, suffix, value)


# -- the committed recordings are what the generator makes ----------------------------------


def test_nvml_cases_match_generator(tmp_path: Path) -> None:
    written = nvmlgen.write_cases(tmp_path)
    assert sorted(p.name for p in written) == sorted(p.name for p in CASES.glob("*.json")), (
        "regenerate with `python3 tools/fixturegen/fixturegen.py --nvml-cases tests/fixtures/nvml`"
    )
    for path in written:
        assert path.read_bytes() == (CASES / path.name).read_bytes(), (
            f"{CASES / path.name} differs from the generator; regenerate with "
            "`python3 tools/fixturegen/fixturegen.py --nvml-cases tests/fixtures/nvml` "
            "(do not hand-edit)"
        )


def test_recordings_are_json_one_call_per_line() -> None:
    text = (HOSTS / "hgx-h100-8gpu-8nic" / nvmlgen.SNAPSHOT_NAME).read_text()
    meta = json.loads(text)
    calls = meta["nvml"]["calls"]
    assert len(text.splitlines()) == len(calls) + 10  # braces, 7 keys, "]}": a line per call
    assert meta["format"] == "mcpnode.snapshot/v1"
    assert meta["captured_at"] == nvmlgen.FAKE_CAPTURED_AT
    for case in nvmlgen.NVML_CASES:
        assert json.loads((CASES / f"{case}.json").read_text()).keys() == {"calls"}


def test_no_gpu_host_has_no_nvml_recording() -> None:
    assert not (HOSTS / "no-gpu-host" / nvmlgen.SNAPSHOT_NAME).exists()
    topo = fixture_topo("no-gpu-host")
    assert topo.nvml is not None and not topo.nvml.available
    assert topo.nvml.reason == "NotRecorded: not a mcpnode snapshot (no mcpnode-snapshot.json)"
    assert codes(topo, "nvml.unavailable") == []  # no GPU that NVML would have described


@pytest.mark.parametrize("name", GPU_HOSTS)
def test_fixture_snapshot_meta(name: str) -> None:
    meta = json.loads((HOSTS / name / nvmlgen.SNAPSHOT_NAME).read_text())
    spec = SPECS[name]
    assert meta["hostname"] == spec.hostname
    assert meta["kernel_release"] == spec.osrelease
    assert meta["format"] == "mcpnode.snapshot/v1"


@pytest.mark.parametrize("name", GPU_HOSTS)
def test_replay_equals_simulation(name: str) -> None:
    """The recording holds every call discovery makes: replay == the simulated run."""
    spec = nvmlgen.fixture_nvml(SPECS[name])
    assert spec is not None
    with Host(HOSTS / name) as host:
        simulated = discover(host, nvmlgen.SimulatedNvml(spec))
    replayed = fixture_topo(name)
    assert topology_json(replayed) == topology_json(simulated)
    assert replayed.nvml is not None and replayed.nvml.available
    for gpu in replayed.gpus:
        assert gpu.nvml is not None, f"{name}: {gpu.address} not joined to NVML"
        assert "NotRecorded" not in reasons(gpu.nvml).values()
        assert_none_means_unavailable(gpu.nvml)
    assert [p for p in replayed.problems if p.code.startswith(("nvml.", "gpu."))] == []


# -- what the fixtures' NVML says -----------------------------------------------------------


def test_hgx_h100_facts() -> None:
    topo = fixture_topo("hgx-h100-8gpu-8nic")
    assert topo.nvml is not None
    assert (topo.nvml.driver_version, topo.nvml.cuda_driver_version) == ("570.133.20", "12.8")
    switches = {PciAddress(0, b, 0, 0) for b in (5, 6, 7, 8)}
    for gpu in topo.gpus:
        f = gpu.nvml
        assert f is not None
        assert (f.name, f.architecture, f.compute_capability) == (
            "NVIDIA H100 80GB HBM3",
            "Hopper",
            "9.0",
        )
        assert f.memory_total_mib == 81559
        assert (f.fabric_state, f.fabric_status) == ("COMPLETED", "Success")
        assert len(f.nvlinks) == 18 and f.active_links == 18
        assert {x.remote_type for x in f.nvlinks} == {"SWITCH"}
        assert {x.version for x in f.nvlinks} == {"4.0"}
        assert {x.remote_address for x in f.nvlinks} == switches
        assert (f.pcie_gen_current, f.pcie_gen_gpu_max, f.pcie_width_max) == (5, 5, 16)
        assert f.cpu_affinity_node == gpu.local_cpus  # driver and sysfs agree
        assert gpu.numa_node is not None
        assert f.memory_affinity_nodes == CpuSet([gpu.numa_node])
        assert reasons(f) == {"memory_numa_node": "NotSupported"}
    gpu0 = topo.gpus[0].nvml
    assert gpu0 is not None and gpu0.processes is not None
    assert [(p.pid, p.used_memory_mib) for p in gpu0.processes] == [(311207, 70 * 1024)]
    # GPU0's real `nvidia-smi nvlink -R`: 07 07 06 06 ... 08 08
    first = [x.remote_address for x in gpu0.nvlinks[:4]]
    assert [a.bus if a else None for a in first] == [7, 7, 6, 6]


def test_dgx_a100_facts() -> None:
    topo = fixture_topo("dgx-a100")
    for gpu in topo.gpus:
        f = gpu.nvml
        assert f is not None
        assert (f.name, f.architecture) == ("NVIDIA A100-SXM4-80GB", "Ampere")
        assert len(f.nvlinks) == 12 and {x.version for x in f.nvlinks} == {"3.1"}
        assert len({x.remote_address for x in f.nvlinks}) == 6  # two links per NVSwitch
        assert f.fabric_state is None and reasons(f)["fabric"] == "NotSupported"


def test_l40s_facts() -> None:
    topo = fixture_topo("pcie-4x-l40s-2socket")
    for gpu in topo.gpus:
        f = gpu.nvml
        assert f is not None
        assert f.nvlinks == ()
        assert reasons(f) == {
            "mig_mode": "NotSupported",
            "nvlink": "NotSupported",
            "fabric": "NotSupported",
            "memory_numa_node": "NotSupported",
        }
        # idle: the link is at gen1 (as sysfs says), gen4 is what it trains to
        assert (f.pcie_gen_current, f.pcie_gen_max, f.pcie_gen_gpu_max) == (1, 4, 4)


def test_vm_gpu_numa_from_nvml_memory_affinity() -> None:
    """sysfs numa_node is -1 in the guest; NVML's memory affinity gives node 0."""
    topo = fixture_topo("single-gpu-kvm-vm-h100-pcie")
    (gpu,) = topo.gpus
    assert (gpu.numa_node, gpu.numa_source) == (0, "nvml-memory-affinity")
    dev = topo.pci(gpu.address)
    assert dev is not None and dev.numa_node_raw == -1
    assert (dev.numa_node, dev.numa_source) == (0, "nvml-memory-affinity")
    assert gpu.memory_numa_node is None
    assert codes(topo, "gpu.numa.nvml-disagrees") == []


def test_h100_nvl_pair_bridge() -> None:
    topo = fixture_topo("h100-nvl-pair")
    a, b = topo.gpus
    assert (str(a.address), str(b.address)) == ("0001:00:00.0", "0002:00:00.0")
    for me, peer in ((a, b), (b, a)):
        assert me.nvml is not None
        assert me.nvml.name == "NVIDIA H100 NVL"
        assert me.nvml.active_links == 12
        assert {(x.remote_type, x.remote_address) for x in me.nvml.nvlinks} == {
            ("GPU", peer.address)
        }
    cells = matrix_cells(topo)
    assert cells["GPU0", "GPU1"] == cells["GPU1", "GPU0"] == "NV12"
    assert codes(topo, "nvlink.inactive") == []


def test_h100_nvl_pair_inactive_bridge() -> None:
    """Bridges present, no link up (Azure/azhpc-images#443): PCIe bucket and a problem."""
    topo = fixture_topo("h100-nvl-pair-inactive")
    for gpu in topo.gpus:
        assert gpu.nvml is not None
        assert len(gpu.nvml.nvlinks) == 12 and gpu.nvml.active_links == 0
    cells = matrix_cells(topo)
    assert cells["GPU0", "GPU1"] == cells["GPU1", "GPU0"] == "SYS"
    assert codes(topo, "nvlink.inactive") == ["0001:00:00.0", "0002:00:00.0"]


def test_grace_hopper_gpu_memory_node() -> None:
    topo = fixture_topo("grace-hopper-gh200")
    (gpu,) = topo.gpus
    node1 = topo.node(1)
    assert node1 is not None and node1.cpuless and node1.has_memory
    assert gpu.nvml is not None
    assert gpu.nvml.name == "NVIDIA GH200 480GB"
    assert gpu.nvml.memory_numa_node == gpu.memory_numa_node == 1
    assert gpu.nvml.memory_affinity_nodes == CpuSet([0])
    # node 1 holds the GPU's memory; the GPU is pinned to the Grace CPUs' node 0
    assert (gpu.numa_node, gpu.numa_source) == (0, "own")
    m = build_matrix(topo)
    row = next(r for r in m.rows if r.label == "GPU0")
    assert (row.cpu_affinity, row.numa_affinity, row.gpu_numa_id) == ("0-71", "0", "1")
    assert codes(topo, "gpu.memory-node-has-cpus") == []
    assert codes(topo, "gpu.numa.nvml-disagrees") == []


def test_grace_hopper_topo_text() -> None:
    from mcpnode.cli.main import cli

    res = CliRunner().invoke(cli, ["topo", "--root", str(HOSTS / "grace-hopper-gh200")])
    assert res.exit_code == 0, res.output
    m = parse_topo_matrix(res.stdout)
    assert m.gpu_numa_id["GPU0"] == "1"
    assert m.numa_affinity["GPU0"] == "0"
    assert m.cells["GPU0", "NIC0"] == "NODE"


# -- failure recordings -------------------------------------------------------------------

INIT_FAILURES = {  # case: (NVML error at nvmlInit, its code)
    "library-not-found": ("LibraryNotFound", 12),
    "driver-library-mismatch": ("LibRmVersionMismatch", 18),
    "driver-not-loaded": ("DriverNotLoaded", 9),
    "no-permission": ("NoPermission", 4),
}


def test_every_case_is_tested() -> None:
    tested = set(INIT_FAILURES) | {
        "gpu-lost",
        "gpu-lost-mid-nvlink",
        "mig-enabled",
        "mig-instances",  # tests/topology/test_mig.py
        "process-abi-mismatch",
        "function-not-found",
        "fabric-in-progress",
        "no-permission-counters",
    }
    assert tested == set(nvmlgen.NVML_CASES)
    assert {p.stem for p in CASES.glob("*.json")} == tested


@pytest.mark.parametrize("case", sorted(INIT_FAILURES))
def test_init_failure(case: str) -> None:
    name, code = INIT_FAILURES[case]
    assert load_case(case) == [{"fn": "nvmlInit", "args": [], "error": name, "code": code}]
    topo = replay_case(case)
    assert topo.nvml is not None
    assert not topo.nvml.available
    assert (topo.nvml.reason or "").startswith(f"{name}: ")
    assert topo.nvml.gpus == ()
    assert topo.nvml.driver_version is None and topo.nvml.cuda_driver_version is None
    assert len(topo.gpus) == 8  # sysfs still lists them
    assert all(g.nvml is None for g in topo.gpus)
    assert [p.detail for p in topo.problems if p.code == "nvml.unavailable"] == [
        f"NVML unavailable: {topo.nvml.reason}"
    ]
    cells = matrix_cells(topo)
    for i in range(8):
        for j in range(8):
            if i != j:
                assert cells[f"GPU{i}", f"GPU{j}"] in PCIE_BUCKETS


def _all_gpus_checked(topo: Topology) -> None:
    assert topo.nvml is not None and topo.nvml.available
    for gpu in topo.gpus:
        assert gpu.nvml is not None
        assert_none_means_unavailable(gpu.nvml)


def test_gpu_lost() -> None:
    topo = replay_case("gpu-lost")
    _all_gpus_checked(topo)
    lost = topo.gpus[3].nvml
    assert lost is not None and lost.lost
    assert str(lost.address) == "0000:5d:00.0"
    assert lost.name == "NVIDIA H100 80GB HBM3"  # asked before the GPU fell off the bus
    why = reasons(lost)
    assert why["ecc_uncorrected_volatile"] == "GpuIsLost"
    assert why["nvlink"] == "GpuIsLost"
    assert why["processes"] == "GpuIsLost"
    assert set(why.values()) == {"GpuIsLost"}
    assert lost.ecc_uncorrected_volatile is None and lost.nvlinks == ()
    assert codes(topo, "gpu.lost") == ["0000:5d:00.0"]
    for i, gpu in enumerate(topo.gpus):
        if i == 3:
            continue
        assert gpu.nvml is not None and not gpu.nvml.lost
        assert gpu.nvml.active_links == 18
        assert reasons(gpu.nvml) == {"memory_numa_node": "NotSupported"}
    cells = matrix_cells(topo)
    for i in range(8):
        for j in range(8):
            if i == j:
                continue
            want_nv = 3 not in (i, j)
            assert (cells[f"GPU{i}", f"GPU{j}"] == "NV18") == want_nv, (i, j)


def test_gpu_lost_mid_nvlink_has_no_partial_nv() -> None:
    """Lost at link 6: the six links asked before must not make GPU5 NV6 to everyone."""
    topo = replay_case("gpu-lost-mid-nvlink")
    _all_gpus_checked(topo)
    g5 = topo.gpus[5].nvml
    assert g5 is not None and g5.lost and len(g5.nvlinks) == 6
    assert reasons(g5)["nvlink"] == "GpuIsLost"
    assert codes(topo, "gpu.lost") == [str(topo.gpus[5].address)]
    cells = matrix_cells(topo)
    for j in range(8):
        if j != 5:
            assert cells["GPU5", f"GPU{j}"] in PCIE_BUCKETS
            assert cells[f"GPU{j}", "GPU5"] in PCIE_BUCKETS
    assert cells["GPU0", "GPU4"] == "NV18"


def test_mig_enabled() -> None:
    topo = replay_case("mig-enabled")
    _all_gpus_checked(topo)
    (gpu,) = topo.gpus
    f = gpu.nvml
    assert f is not None
    assert (f.mig_current, f.mig_pending) == (True, True)
    why = reasons(f)
    assert why["remapped_rows"] == "NotSupported"
    assert why["compute_mode"] == "NotSupported"
    assert f.remapped_rows_correctable is None and f.compute_mode is None
    assert f.ecc_current is True  # the rest still answers
    assert (gpu.numa_node, gpu.numa_source) == (0, "nvml-memory-affinity")


def test_process_abi_mismatch() -> None:
    topo = replay_case("process-abi-mismatch")
    _all_gpus_checked(topo)
    for gpu in topo.gpus:
        assert gpu.nvml is not None
        assert gpu.nvml.processes is None
        assert reasons(gpu.nvml)["processes"] == "LibraryMismatch"
    assert matrix_cells(topo)["GPU0", "GPU7"] == "NV18"


def test_function_not_found() -> None:
    topo = replay_case("function-not-found")
    _all_gpus_checked(topo)
    assert topo.nvml is not None
    assert (topo.nvml.driver_version, topo.nvml.cuda_driver_version) == ("470.57.02", "11.4")
    for gpu in topo.gpus:
        assert gpu.nvml is not None
        assert (gpu.nvml.fabric_state, gpu.nvml.fabric_status) == (None, None)
        assert reasons(gpu.nvml)["fabric"] == "FunctionNotFound"
    # no fabric state to wait for (as on A100 generally): the switch links still count
    assert matrix_cells(topo)["GPU0", "GPU7"] == "NV12"
    assert codes(topo, "nvlink.fabric-not-ready") == []


def test_function_not_found_falls_back_to_throttle_reasons() -> None:
    """R470 has no nvmlDeviceGetCurrentClocksEventReasons (R535 renamed it): the answer comes
    from the old name, recorded after the FunctionNotFound, and nothing is left unknown."""
    calls = load_case("function-not-found")
    asked = [c["fn"] for c in calls if c["args"][:1] == [0] and "Clocks" in c["fn"]]
    assert asked == [
        "nvmlDeviceGetCurrentClocksEventReasons",
        "nvmlDeviceGetCurrentClocksThrottleReasons",
    ]
    topo = replay_case("function-not-found")
    for gpu in topo.gpus:
        assert gpu.nvml is not None
        assert gpu.nvml.clocks_event_reasons == nvmlgen.REASON_GPU_IDLE
        assert "clocks_event_reasons" not in reasons(gpu.nvml)


def test_no_permission_counters() -> None:
    """NVLink error counters and the PCIe replay counter refused: None with NoPermission, the
    links themselves and every other fact still there."""
    topo = replay_case("no-permission-counters")
    _all_gpus_checked(topo)
    for gpu in topo.gpus:
        f = gpu.nvml
        assert f is not None
        why = reasons(f)
        assert why["pcie_replay_count"] == "NoPermission" and f.pcie_replay_count is None
        assert why["nvlink0.replay_errors"] == "NoPermission"
        assert all(x.replay_errors is None and x.crc_flit_errors is None for x in f.nvlinks)
        assert f.active_links == 18 and f.nvlinks[0].speed_mbps == 26562
        # counters refused on link 0 are not asked again for the other 17 links
        assert "nvlink1.replay_errors" not in why


def test_fixtures_carry_not_supported_health_facts() -> None:
    """NotSupported as real hosts answer it: a guest without the PCIe counters, a GH200 whose
    driver reports temperature thresholds relative to T.Limit only."""
    (vm,) = fixture_topo("single-gpu-kvm-vm-h100-pcie").gpus
    assert vm.nvml is not None and reasons(vm.nvml)["pcie_replay_count"] == "NotSupported"
    (gh,) = fixture_topo("grace-hopper-gh200").gpus
    assert gh.nvml is not None and gh.nvml.temperature_c == 41
    assert reasons(gh.nvml)["temperature_slowdown"] == "NotSupported"
    assert gh.nvml.temperature_slowdown_c is None


def test_p2p_status_recorded_for_every_pair() -> None:
    topo = fixture_topo("hgx-h100-8gpu-8nic")
    assert topo.nvml is not None
    got = {(p.a, p.b): p.status for p in topo.nvml.p2p_read}
    assert len(got) == 8 * 7 and set(got.values()) == {"OK"}
    l40s = fixture_topo("pcie-4x-l40s-2socket").nvml
    assert l40s is not None
    cross = {(p.a, p.b): p.status for p in l40s.p2p_read}
    assert cross[0, 1] == "OK" and cross[0, 3] == "CNS"  # same socket; across sockets
    lost = replay_case("gpu-lost").nvml
    assert lost is not None
    assert {p.reason for p in lost.p2p_read if 3 in (p.a, p.b)} == {"GpuIsLost"}


def test_fabric_in_progress() -> None:
    topo = replay_case("fabric-in-progress")
    _all_gpus_checked(topo)
    for gpu in topo.gpus:
        assert gpu.nvml is not None and gpu.nvml.fabric_state == "IN_PROGRESS"
    cells = matrix_cells(topo)
    assert not any(v.startswith("NV") for v in cells.values())
    assert cells["GPU0", "GPU1"] == "NODE" and cells["GPU0", "GPU4"] == "SYS"
    assert codes(topo, "nvlink.fabric-not-ready") == [str(g.address) for g in topo.gpus]


@pytest.mark.parametrize("case", nvmlgen.NVML_CASES)
def test_case_replays_without_unrecorded_calls(case: str) -> None:
    """Every answer discovery asks for is in the recording, but those a case leaves out on
    purpose (mig-enabled: recorded before MIG devices were enumerated)."""
    topo = replay_case(case)
    assert topo.nvml is not None
    _, spec = nvmlgen.nvml_case(case)
    for g in topo.nvml.gpus:
        why = reasons(g)
        if spec.recorded_without:
            assert why.pop("mig_devices") == "NotRecorded"
        assert "NotRecorded" not in why.values()
