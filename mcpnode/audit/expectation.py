"""The expected inventory of a node as data (audit/expect.py parses and checks it): shared by
the audit context and the agent's configuration without importing either."""

from __future__ import annotations

from dataclasses import dataclass

from mcpnode.errors import FileKeyError


class ExpectError(FileKeyError):
    """An `[expect]` table or file that cannot be used. `file` and `key` say where (key None:
    the whole file)."""


@dataclass(frozen=True)
class Expectation:
    """What a node of its kind must have; None: not checked."""

    gpu_count: int | None = None  # on the PCI bus and in NVML alike
    gpu_model: str | None = None  # NVML's product name, "NVIDIA H100 80GB HBM3"
    nvlinks_per_gpu: int | None = None  # active NVLinks on every GPU
    pcie_gen: int | None = None  # every GPU's link reaches this generation
    pcie_width: int | None = None  # and trains this wide
    nic_count: int | None = None  # RDMA NICs (physical functions)
    nic_rate_gbps: float | None = None  # every InfiniBand/RoCE port's rate
    numa_nodes: int | None = None
    driver_min: str | None = None  # "550.54.15": this version or later
