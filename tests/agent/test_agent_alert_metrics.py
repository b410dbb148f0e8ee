"""The metrics the shipped alert rules (deploy/prometheus/) need beyond the counters of events:
per-GPU health and error counters from the publish's discovery and audit, the last publish's
result, and the NFD feature file's expiry. Fed from a recorded HGX host's real topology."""

from __future__ import annotations

import pytest

from mcpnode.agent.metrics import AgentMetrics
from mcpnode.codec.record import replace
from mcpnode.topology.model import Gpu
from tests.agent.test_agent_metrics import samples
from tests.support.exportcase import topology

HGX = "hgx-h100-8gpu-8nic"


def gpu_series(m: AgentMetrics, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {labels: v for (n, labels), v in samples(m.render()).items() if n == name}


def test_every_gpu_has_a_health_series_and_the_failed_one_is_1() -> None:
    m = AgentMetrics()
    gpus = topology(HGX).gpus
    m.set_gpu_state(gpus, ["0000:3a:00.0"])
    health = gpu_series(m, "mcpnode_gpu_unhealthy")
    assert len(health) == len(gpus) == 8
    assert health[(("gpu", "0000:3a:00.0"),)] == 1
    assert sum(health.values()) == 1
    replays = gpu_series(m, "mcpnode_gpu_pcie_replays")
    assert set(replays) == set(health)
    errors = gpu_series(m, "mcpnode_gpu_nvlink_errors")
    # four NVML counters per GPU, all zero on this healthy host
    assert len(errors) == 8 * 4 and set(errors.values()) == {0}


def with_errors(gpu: Gpu, crc: int) -> Gpu:
    assert gpu.nvml is not None
    links = tuple(replace(link, crc_flit_errors=crc) for link in gpu.nvml.nvlinks)
    nvml = replace(gpu.nvml, nvlinks=links, pcie_replay_count=None)
    return replace(gpu, nvml=nvml)


def test_nvlink_counters_sum_over_links_and_unknown_has_no_series() -> None:
    m = AgentMetrics()
    first = with_errors(topology(HGX).gpus[0], 3)
    assert first.nvml is not None
    m.set_gpu_state([first], [])
    errors = gpu_series(m, "mcpnode_gpu_nvlink_errors")
    key = (("counter", "crc_flit"), ("gpu", str(first.address)))
    assert errors[key] == 3 * len(first.nvml.nvlinks)
    # NVML did not answer the replay counter: no series, never a 0
    assert gpu_series(m, "mcpnode_gpu_pcie_replays") == {}


def test_a_gpu_gone_loses_its_series() -> None:
    m = AgentMetrics()
    gpus = topology(HGX).gpus
    m.set_gpu_state(gpus, [])
    m.set_gpu_state(gpus[1:], [])
    assert (("gpu", str(gpus[0].address)),) not in gpu_series(m, "mcpnode_gpu_unhealthy")
    assert len(gpu_series(m, "mcpnode_gpu_unhealthy")) == 7


def test_publish_result_is_one_hot_and_checked() -> None:
    m = AgentMetrics()
    m.record_publish("ok")
    m.record_publish("failed")
    got = gpu_series(m, "mcpnode_publish_last_result")
    assert got == {(("result", "failed"),): 1, (("result", "ok"),): 0}
    with pytest.raises(ValueError, match="publish result"):
        m.record_publish("maybe")  # type: ignore[arg-type]


def test_gpu_process_counts_replace_the_last_scan_and_go_when_empty() -> None:
    m = AgentMetrics()
    assert "mcpnode_gpu_processes" not in m.render().decode()
    m.set_gpu_process_cpus({"0000:18:00.0": {"slice": 1, "node": 0, "off-node": 2, "unknown": 0}})
    m.set_gpu_process_cpus({"0000:3a:00.0": {"slice": 0, "node": 1, "off-node": 0, "unknown": 0}})
    got = gpu_series(m, "mcpnode_gpu_processes")
    assert got[(("cpus", "node"), ("gpu", "0000:3a:00.0"))] == 1
    assert len(got) == 4  # the first GPU's series went with the scan that no longer has it
    m.set_gpu_process_cpus({})
    assert gpu_series(m, "mcpnode_gpu_processes") == {}


def test_nfd_expiry_series_come_and_go() -> None:
    m = AgentMetrics()
    assert "mcpnode_nfd_expiry_timestamp_seconds" not in m.render().decode()
    m.set_nfd_expiry(100.0, 400.0)
    s = samples(m.render())
    assert s[("mcpnode_nfd_expiry_timestamp_seconds", ())] == 400.0
    assert s[("mcpnode_nfd_written_timestamp_seconds", ())] == 100.0
    m.set_nfd_expiry(200.0, None)
    assert "mcpnode_nfd_" not in m.render().decode()
    m.set_nfd_expiry(300.0, 600.0)
    assert samples(m.render())[("mcpnode_nfd_expiry_timestamp_seconds", ())] == 600.0
