"""NVML recordings for the audit (tests/fixtures/audit/nvml/<case>.json): tools/fixturegen/
nvmlgen.py's simulation over the committed HGX H100 tree with one GPU broken each way, recorded
through mcpnode's own discovery like tests/fixtures/nvml/.

    python3 tools/fixturegen/auditnvml.py [DEST]   # default: tests/fixtures/audit/nvml

rewrites them; tests/audit/test_audit_golden.py checks the committed ones are current.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

if __name__ == "__main__":
    # Run as a script: the repository on sys.path, for `tools.fixturegen` (mcpnode comes from the
    # venv or the same checkout).
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from mcpnode.codec.record import replace
from tools.fixturegen import fixturegen, nvmlgen

HOSTS = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "hosts"
AUDIT_NVML = HOSTS.parent / "audit" / "nvml"

HGX = "hgx-h100-8gpu-8nic"
SICK_GPU = 2  # the GPU each per-GPU failure recording breaks (0000:3a:00.0 on the HGX)


def _hgx_case(change: Callable[[nvmlgen.GpuSpec], nvmlgen.GpuSpec]) -> nvmlgen.NvmlSpec:
    host = fixturegen.hgx_h100_8gpu_8nic()
    spec = nvmlgen.hgx_h100_nvml(host)
    gpus = tuple(change(g) if i == SICK_GPU else g for i, g in enumerate(spec.gpus))
    return replace(spec, gpus=gpus)


def _x8(g: nvmlgen.GpuSpec) -> nvmlgen.GpuSpec:
    assert g.pcie is not None
    gen_cur, gen_max, gen_gpu, _width, width_max = g.pcie
    return replace(g, pcie=(gen_cur, gen_max, gen_gpu, 8, width_max))


def _links_down(g: nvmlgen.GpuSpec) -> nvmlgen.GpuSpec:
    assert g.nvlinks is not None
    links = tuple(replace(x, active=i not in (4, 5)) for i, x in enumerate(g.nvlinks))
    return replace(g, nvlinks=links)


def _one_gpu_missing() -> nvmlgen.NvmlSpec:
    spec = _hgx_case(lambda g: g)
    return replace(spec, gpus=spec.gpus[:-1])  # GPU 7 on the bus, unknown to NVML


def _links_missing(g: nvmlgen.GpuSpec) -> nvmlgen.GpuSpec:
    assert g.nvlinks is not None
    return replace(g, nvlinks=g.nvlinks[:16])  # links 16, 17 answer InvalidArgument: gone


# Recordings generated here (the HGX H100 with one GPU broken each way).
AUDIT_NVML_CASES: dict[str, Callable[[], nvmlgen.NvmlSpec]] = {
    # (correctable, uncorrectable, pending, failure): a remap waiting for a GPU reset
    "remap-pending": lambda: _hgx_case(lambda g: replace(g, remapped_rows=(0, 1, 1, 0))),
    "remap-failure": lambda: _hgx_case(lambda g: replace(g, remapped_rows=(0, 512, 0, 1))),
    "ecc-uncorrected": lambda: _hgx_case(lambda g: replace(g, ecc_uncorrected=(3, 3))),
    "persistence-off": lambda: _hgx_case(lambda g: replace(g, persistence=False)),
    "pcie-x8-on-x16": lambda: _hgx_case(_x8),
    "nvlink-down": lambda: _hgx_case(_links_down),
    "gpu-missing-from-nvml": _one_gpu_missing,
    # clocks, thermal, power (nvmlClocksEventReason bits: HwSlowdown 0x8, SwThermal 0x20)
    "throttle-hw-slowdown": lambda: _hgx_case(
        lambda g: replace(g, clocks_event_reasons=nvmlgen.REASON_HW_SLOWDOWN)
    ),
    "throttle-sw-thermal": lambda: _hgx_case(
        lambda g: replace(g, clocks_event_reasons=nvmlgen.REASON_SW_THERMAL)
    ),
    "temperature-slowdown": lambda: _hgx_case(lambda g: replace(g, temperature=(88, 87, 92))),
    "power-capped": lambda: _hgx_case(lambda g: replace(g, power=(72_000, 500_000, 700_000))),
    "app-clocks-low": lambda: _hgx_case(lambda g: replace(g, app_clocks=(1410, 2619, 1980, 2619))),
    # 5 million replays in the fixtures' three days up: ~1157 per minute
    "pcie-replays": lambda: _hgx_case(lambda g: replace(g, pcie_replays=5_000_000)),
    # (link, counter, value): DL_REPLAY 0, DL_RECOVERY 1, DL_CRC_FLIT 2
    "nvlink-replay-errors": lambda: _hgx_case(
        lambda g: replace(g, nvlink_errors=((3, 0, 12), (3, 1, 2)))
    ),
    "nvlink-crc-storm": lambda: _hgx_case(
        lambda g: replace(g, nvlink_errors=((7, 2, 30_000_000_000),))
    ),
    "nvlink-missing": lambda: _hgx_case(_links_missing),
}


def write_audit_nvml(dest: Path = AUDIT_NVML) -> list[Path]:
    """Record every audit NVML case over the committed HGX tree into `dest/<case>.json`."""
    dest.mkdir(parents=True, exist_ok=True)
    out = []
    for name, make in AUDIT_NVML_CASES.items():
        path = dest / f"{name}.json"
        path.write_text(nvmlgen.nvml_json(nvmlgen.record(HOSTS / HGX, make())["nvml"]))
        out.append(path)
    return out


if __name__ == "__main__":
    for p in write_audit_nvml(Path(sys.argv[1]) if len(sys.argv) > 1 else AUDIT_NVML):
        print(p)
