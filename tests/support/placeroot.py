"""A recorded root shaped like the test machine (CPUs 0-1, NUMA node 0) with one GPU (NVML
recording included, so it has a UUID) and one ConnectX NIC, for exec / pin / systemd-dropin.

The placement comes from this root; the effects land on the live kernel, so the tests that
apply it need CPUs 0 and 1 usable by this process and node 0 with memory (`skip_reason`)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from tools.fixturegen import nvmlgen
from tools.fixturegen.fixturegen import (
    CLASS_3D,
    CLASS_ETHERNET,
    GT32,
    V_INTEL,
    V_MELLANOX,
    V_NVIDIA,
    DeviceSpec,
    HostBridgeSpec,
    HostSpec,
    LinkSpec,
    NetdevSpec,
    NumaSpec,
    PortSpec,
    RdmaSpec,
    write_host,
)

# Two single-thread cores: housekeeping takes core 0, the GPU's exclusive slice is CPU 1.
SLICE = {1}
NODE_CPUS = {0, 1}


def spec() -> HostSpec:
    gpu = DeviceSpec(CLASS_3D, V_NVIDIA, 0x2331, driver="nvidia", link=LinkSpec(GT32, 16))
    nic = DeviceSpec(
        CLASS_ETHERNET,
        V_MELLANOX,
        0x1021,
        driver="mlx5_core",
        link=LinkSpec(GT32, 16),
        netdevs=(NetdevSpec("eth0", mtu=9000),),
        rdma=(RdmaSpec("mlx5_0", link_layer="Ethernet"),),
    )
    return HostSpec(
        name="this-machine",
        hostname="placed",
        osrelease="6.1.0",
        sockets=1,
        cores_per_socket=2,
        threads_per_core=1,
        numa=(NumaSpec(0, "0-1", 4194304, (10,)),),
        host_bridges=(
            HostBridgeSpec(
                0,
                0,
                (
                    PortSpec(V_INTEL, 0x1BBE, children=(gpu,)),
                    PortSpec(V_INTEL, 0x1BBF, children=(nic,)),
                ),
            ),
        ),
    )


def build(dest: Path, caches: tuple[int, int, int | None] | None = None, gpus: int = 1) -> Path:
    """Write the root under `dest`, NVML recording included; returns `dest`. `caches`: the
    cache directories to write (HostSpec.caches), none by default; `gpus`: how many GPUs, each
    behind a root port of its own on the one host bridge."""
    host = dataclasses.replace(spec(), caches=caches)
    if gpus != 1:
        (bridge,) = host.host_bridges
        gpu_port, nic_port = bridge.children
        ports = tuple(dataclasses.replace(gpu_port, device=0x1BB0 + i) for i in range(gpus))
        bridge = dataclasses.replace(bridge, children=(*ports, nic_port))
        host = dataclasses.replace(host, host_bridges=(bridge,))
    write_host(host, dest)
    nvml = nvmlgen.NvmlSpec(nvmlgen.base_gpus(host, nvmlgen.H100_PCIE))
    meta = nvmlgen.snapshot_meta_json(host, nvmlgen.record(dest, nvml)["nvml"])
    (dest / nvmlgen.SNAPSHOT_NAME).write_text(meta)
    return dest


def skip_reason() -> str | None:
    """Why this machine cannot take the root's placement, or None when it can."""
    if not hasattr(os, "sched_getaffinity"):
        return "no sched_getaffinity on this platform"
    if not NODE_CPUS.issubset(os.sched_getaffinity(0)):
        return f"CPUs 0-1 not usable by this process ({sorted(os.sched_getaffinity(0))})"
    if not Path("/sys/devices/system/node/node0").is_dir():
        return "no NUMA node 0 on this kernel"
    return None


# Tests that place a real child process on this machine's CPUs and nodes skip where it cannot.
needs_machine = pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")
