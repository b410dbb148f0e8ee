"""`exec --gpu local-rank`: the GPU of one rank of a job a launcher started, from its environment.

Pure: the environment and the placement in, the GPU selector out. The rules, in the order they
are tried (docs/placement.md, "One process per GPU rank"):

1. The rank is the first of these variables that is **set** (an empty or garbage value is an
   error naming it, never a reason to try the next): `LOCAL_RANK` (torchrun, and the launchers
   built on it: DeepSpeed, Accelerate), `SLURM_LOCALID` (srun), `OMPI_COMM_WORLD_LOCAL_RANK`
   (Open MPI's mpirun), `MPI_LOCALRANKID` (MPICH's and Intel MPI's Hydra). A rank is ASCII
   digits without a leading zero, below MAX_GPUS.
2. When the caller's `CUDA_VISIBLE_DEVICES` is set, the rank indexes its comma-separated list
   (a job scheduler's or a container runtime's GPU list): the entry is a GPU index (nvidia-smi's
   PCI order, which is CUDA's once `CUDA_DEVICE_ORDER=PCI_BUS_ID` is set, as exec sets it) or a
   `GPU-`/`MIG-` UUID. Otherwise the rank is the GPU index itself.
3. A rank past the list, or past the host's GPUs, is an error saying both.

The launched process keeps the caller's `CUDA_VISIBLE_DEVICES` (placement/apply.py: a rank's
code addresses its GPU as `cuda:LOCAL_RANK`, which a one-GPU list would break), and gets the
rest of its GPU's environment (NCCL/UCX devices, the device order).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from mcpnode.codec.record import record
from mcpnode.errors import UsageError
from mcpnode.placement.plan import Placement

LOCAL_RANK = "local-rank"
RANK_VARIABLES = ("LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID")
MAX_GPUS = 1 << 10  # as the published manifest bounds a GPU index
_RANK = re.compile(r"0|[1-9][0-9]{0,3}", re.ASCII)
_INDEX = re.compile(r"0|[1-9][0-9]{0,3}", re.ASCII)
_UUID = re.compile(r"(?:GPU|MIG)-[0-9A-Fa-f-]{1,64}", re.ASCII)


@record(frozen=True)
class RankChoice:
    """Which GPU a rank runs on, and how that was decided (for the notice line)."""

    rank: int
    variable: str  # the environment variable the rank came from
    selector: str  # the GPU index or UUID, as select_gpus takes it
    via: str | None  # `CUDA_VISIBLE_DEVICES[3]=GPU-...` when the list mapped it

    def notice(self, index: int) -> str:
        mapped = f", {self.via}" if self.via is not None else ""
        return f"local rank {self.rank} from {self.variable}{mapped}: GPU {index}"


def local_rank(env: Mapping[str, str]) -> tuple[int, str]:
    """(rank, variable) from the first rank variable set in `env`. Raises UsageError naming the
    variable and its value (shown clipped and escaped) when it is not a rank, or listing the
    variables when none is set."""
    for name in RANK_VARIABLES:
        value = env.get(name)
        if value is None:
            continue
        if not _RANK.fullmatch(value) or int(value) >= MAX_GPUS:
            raise UsageError(
                f"--gpu local-rank: {name}={value[:40]!r} is not a local rank (a number from 0"
                f" to {MAX_GPUS - 1}, ASCII digits without a leading zero)"
            )
        return int(value), name
    raise UsageError(
        f"--gpu local-rank: none of {', '.join(RANK_VARIABLES)} is set (run it under torchrun,"
        " srun or mpirun, or name the GPU with --gpu N)"
    )


def choose_rank_gpu(env: Mapping[str, str], placement: Placement) -> RankChoice:
    """The GPU the local rank in `env` runs on (module docstring). Raises UsageError with one
    line saying which variable, which rank, and what it failed against."""
    rank, variable = local_rank(env)
    known = ", ".join(str(g.index) for g in placement.gpus) or "none"
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        if not any(g.index == rank for g in placement.gpus):
            raise UsageError(
                f"--gpu local-rank: rank {rank} (from {variable}) but this host has"
                f" {len(placement.gpus)} GPU(s) (indices: {known})"
            )
        return RankChoice(rank, variable, str(rank), None)
    entries = [e.strip() for e in visible.split(",")] if visible.strip() else []
    if rank >= len(entries):
        raise UsageError(
            f"--gpu local-rank: rank {rank} (from {variable}) but CUDA_VISIBLE_DEVICES lists"
            f" {len(entries)} GPU(s) ({visible[:80]!r})"
        )
    entry = entries[rank]
    via = f"CUDA_VISIBLE_DEVICES[{rank}]={entry[:80]}"
    if _INDEX.fullmatch(entry):
        if any(g.index == int(entry) for g in placement.gpus):
            return RankChoice(rank, variable, entry, via)
    elif _UUID.fullmatch(entry):
        low = entry.lower()
        if any(
            (g.uuid is not None and g.uuid.lower() == low)
            or any(m.uuid.lower() == low for m in g.mig)
            for g in placement.gpus
        ):
            return RankChoice(rank, variable, entry, via)
    raise UsageError(
        f"--gpu local-rank: rank {rank} (from {variable}) is {via!r}, which is not a GPU index or"
        f" UUID of this host (GPUs: {known})"
    )
