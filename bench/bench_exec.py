"""Launch benchmark: whole-process `mcpnode exec --gpu 0 -- true` with a published manifest,
against the floor any Python launcher pays (`python -c pass`) and the C launcher people use
(`numactl --cpunodebind=0 --membind=0 true`, Debian's numactl; skipped with a message when
absent), alternated round by round in one run. The same on a 1-GPU and an 8-GPU root, both
shaped like this machine (CPUs 0-1, node 0) so the placement really applies here: the manifest
path reads one file, so its cost should not grow with the GPU count. `--fresh` (discovery, the
recorded NVML replayed) is timed beside it for what the manifest saves.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from tests.support import placeroot
from tools.fixturegen import nvmlgen
from tools.fixturegen.fixturegen import write_host

NUMACTL = shutil.which("numactl")
ROOT = Path(__file__).resolve().parents[1]


def _root(dest: Path, gpus: int) -> Path:
    """placeroot's machine with `gpus` GPUs behind one host bridge, NVML recorded, stamped with
    a boot id and a uevent seqnum, its manifest published."""
    spec = placeroot.spec()
    (bridge,) = spec.host_bridges
    gpu_port, nic_port = bridge.children
    ports = tuple(replace(gpu_port, device=0x1BB0 + i) for i in range(gpus))
    host = replace(spec, host_bridges=(replace(bridge, children=(*ports, nic_port)),))
    write_host(host, dest)
    nvml = nvmlgen.NvmlSpec(nvmlgen.base_gpus(host, nvmlgen.H100_PCIE))
    meta = nvmlgen.snapshot_meta_json(host, nvmlgen.record(dest, nvml)["nvml"])
    (dest / nvmlgen.SNAPSHOT_NAME).write_text(meta)
    (dest / "proc/sys/kernel/random").mkdir(parents=True, exist_ok=True)
    (dest / "proc/sys/kernel/random/boot_id").write_text("5d1c3a9e-0000-4000-8000-00000000b007\n")
    (dest / "sys/kernel").mkdir(parents=True, exist_ok=True)
    (dest / "sys/kernel/uevent_seqnum").write_text("1234\n")
    return dest


def bench_exec(
    mcpnode: list[str],
    alternate: Callable[[dict[str, Callable[[], float]]], dict[str, float]],
    timed_run: Callable[[list[str]], float],
) -> dict[str, object]:
    print("\n== Launch: whole-process `mcpnode exec --gpu 0 -- true` from a published manifest")
    why = placeroot.skip_reason()
    if why is not None:
        print(f"   skipped: {why}")
        return {"skipped": why}
    # An installed mcpnode runs from compiled .pyc files; this environment may set
    # PYTHONDONTWRITEBYTECODE, which would make every launch compile its sources again.
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(ROOT / "mcpnode")],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    with tempfile.TemporaryDirectory(prefix="mcpnode-bench-exec-") as tmp:
        roots = {n: _root(Path(tmp) / f"gpus{n}", n) for n in (1, 8)}
        for root in roots.values():
            subprocess.run(
                [*mcpnode, "manifest", "publish", "--root", str(root)],
                check=True,
                stdout=subprocess.DEVNULL,
            )
        cases: dict[str, Callable[[], float]] = {
            "python -c pass": lambda: timed_run([sys.executable, "-c", "pass"]),
        }
        if NUMACTL is not None:
            numactl = [NUMACTL, "--cpunodebind=0", "--membind=0", "true"]
            cases["numactl --cpunodebind=0 --membind=0 true"] = lambda: timed_run(numactl)
        else:
            print("   numactl not found (apt-get install numactl): its comparison is skipped")
        for n, root in roots.items():
            argv = [*mcpnode, "exec", "--root", str(root), "--gpu", "0", "--", "true"]
            fresh = [*mcpnode, "exec", "--fresh", "--root", str(root), "--gpu", "0", "--", "true"]
            cases[f"mcpnode exec, manifest, {n} GPU(s)"] = lambda a=argv: timed_run(a)  # type: ignore[misc]
            cases[f"mcpnode exec --fresh, {n} GPU(s)"] = lambda a=fresh: timed_run(a)  # type: ignore[misc]
        t = alternate(cases)
    floor = t["python -c pass"]
    out: dict[str, object] = {"median_s": t}
    for name, value in t.items():
        print(f"   {name:44s} {value * 1000:8.1f} ms  {value / floor:5.2f}x python -c pass")
    one, eight = t["mcpnode exec, manifest, 1 GPU(s)"], t["mcpnode exec, manifest, 8 GPU(s)"]
    out["manifest_8_over_1"] = eight / one
    out["fresh_over_manifest_8"] = t["mcpnode exec --fresh, 8 GPU(s)"] / eight
    print(f"   8 GPUs / 1 GPU (manifest path)               {eight / one:5.2f}x (flat: ~1.0)")
    print(
        f"   --fresh / manifest (8 GPUs)                  "
        f"{t['mcpnode exec --fresh, 8 GPU(s)'] / eight:5.2f}x"
    )
    if NUMACTL is not None:
        ratio = one / t["numactl --cpunodebind=0 --membind=0 true"]
        out["manifest_1_over_numactl"] = ratio
        print(f"   mcpnode exec (1 GPU) / numactl               {ratio:5.2f}x")
    return out
