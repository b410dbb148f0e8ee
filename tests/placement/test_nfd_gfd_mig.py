"""The NFD labels GPU Feature Discovery also writes for MIG and the machine, with GFD's spellings
and values: each case of GFD's own label tests (NVIDIA/k8s-device-plugin internal/lm/
mig-strategy_test.go, TestMigStrategySingleLabels; nvml.go's mig.capable; machine-type.go) on a
recorded HGX H100 host whose GPUs are put in the MIG layout of the case."""

from __future__ import annotations

import pytest

from mcpnode.codec.record import replace
from mcpnode.placement.exporters import nfd
from mcpnode.placement.plan import plan_placement
from mcpnode.topology.model import Gpu, MigDevice, Topology
from tests.support.exportcase import topology

HGX = "hgx-h100-8gpu-8nic"
# H100 80GB profiles: the GPU instance's slices and its memory (nvidia-smi mig -lgip)
ONE_G = (1, 9856)  # 1g.10gb
THREE_G = (3, 40320)  # 3g.40gb


def mig(*profiles: tuple[int, int]) -> tuple[MigDevice, ...]:
    return tuple(
        MigDevice(i, f"MIG-{i}", i, 0, memory, slices)
        for i, (slices, memory) in enumerate(profiles)
    )


def with_mig(gpu: Gpu, devices: tuple[MigDevice, ...] | None) -> Gpu:
    """`devices` None: MIG mode off (a full GPU); a tuple, possibly empty: MIG mode on."""
    assert gpu.nvml is not None
    nvml = replace(gpu.nvml, mig_current=devices is not None, mig_devices=devices)
    return replace(gpu, nvml=nvml)


def node(*layouts: tuple[MigDevice, ...] | None) -> Topology:
    base = topology(HGX)
    gpus = tuple(with_mig(g, layouts[i]) for i, g in enumerate(base.gpus[: len(layouts)]))
    return replace(base, gpus=gpus)


def mig_labels(topo: Topology) -> dict[str, str]:
    found = dict(nfd.labels(topo, plan_placement(topo), None))
    return {
        k.removeprefix("mcpnode.io/"): v for k, v in found.items() if "mig" in k or "machine" in k
    }


# GFD's case -> the strategy whose labels are valid for it (GFD's `single` labels the INVALID
# ones `MIG-INVALID`; `mixed` is what they need), and the per-profile counts.
CASES = [
    ("single non-mig device returns non-mig (none) labels", (None,), None, {}),
    ("multiple non-mig device returns non-mig (none) labels", (None, None), None, {}),
    ("single mig-enabled device returns mig labels", (mig(ONE_G),), "single", {"1g.10gb": 1}),
    (
        "multiple mig-enabled devices returns mig labels",
        (mig(ONE_G), mig(ONE_G)),
        "single",
        {"1g.10gb": 2},
    ),
    ("empty mig devices returns MIG invalid label", ((),), "mixed", {}),
    (
        "mixed mig config returns MIG invalid label",
        (mig(ONE_G, THREE_G),),
        "mixed",
        {"1g.10gb": 1, "3g.40gb": 1},
    ),
    (
        "mixed mig enabled and disabled returns invalid config",
        (mig(ONE_G), None),
        "mixed",
        {"1g.10gb": 1},
    ),
    (
        "enabled, disabled, and empty returns invalid config",
        (mig(ONE_G), None, ()),
        "mixed",
        {"1g.10gb": 1},
    ),
]


@pytest.mark.parametrize(
    ("case", "layouts", "strategy", "counts"), CASES, ids=[c[0] for c in CASES]
)
def test_gfd_mig_cases(
    case: str,
    layouts: tuple[tuple[MigDevice, ...] | None, ...],
    strategy: str | None,
    counts: dict[str, int],
) -> None:
    got = mig_labels(node(*layouts))
    want = {"gpu.machine": "SYS-821GE-TNHR", "mig.capable": "true"}
    if strategy is not None:
        want["mig.strategy"] = strategy
    want.update({f"mig-{p}.count": str(n) for p, n in counts.items()})
    assert got == want, case
    for key, value in got.items():
        nfd.validate_label(f"mcpnode.io/{key}", value)


def test_mig_capable_false_only_when_every_gpu_said_not_supported() -> None:
    l40s = mig_labels(topology("pcie-4x-l40s-2socket"))  # NVML: NotSupported on every L40S
    assert l40s["mig.capable"] == "false" and "mig.strategy" not in l40s
    base = topology(HGX)
    first = base.gpus[0]
    assert first.nvml is not None
    unknown = replace(
        first, nvml=replace(first.nvml, mig_current=None, unavailable=(("mig_mode", "Unknown"),))
    )
    one = replace(base, gpus=(unknown,))
    assert "mig.capable" not in mig_labels(one)  # an error is not an answer


def test_machine_is_dmi_with_dashes_and_unknown_without_dmi() -> None:
    base = topology(HGX)
    assert mig_labels(base)["gpu.machine"] == "SYS-821GE-TNHR"
    dgx = mig_labels(topology("dgx-a100"))
    assert dgx["gpu.machine"] == "DGXA100-920-23687-2530-000"  # GFD: spaces -> dashes
    vm = mig_labels(topology("single-gpu-kvm-vm-h100-pcie"))
    # "Standard PC (Q35 + ICH9, 2009)": GFD would write a value Kubernetes rejects
    nfd.validate_label("mcpnode.io/gpu.machine", vm["gpu.machine"])
    none = replace(base, identity=replace(base.identity, machine=None))
    assert mig_labels(none)["gpu.machine"] == "unknown"  # GFD's machineTypeUnknown
    assert "gpu.machine" not in mig_labels(topology("no-gpu-host"))  # GFD: no GPU, no labels
