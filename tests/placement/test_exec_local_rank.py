"""`mcpnode exec --gpu local-rank`: real children launched the way torchrun, srun and mpirun
launch ranks (their variables, the caller's CUDA_VISIBLE_DEVICES), on a 2-GPU root shaped like
this machine (CPUs 0-1, one node; housekeeping none, so GPU 0's slice is CPU 0 and GPU 1's is
CPU 1). Hostile rank values end in one line and exit 64, the child never started."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mcpnode.host import Host
from mcpnode.placement.plan import plan_placement
from mcpnode.placement.rank import RANK_VARIABLES
from mcpnode.topology.discover import discover_host
from tests.support import placeroot

CHILD = (
    "import json, os; print(json.dumps({'cpus': sorted(os.sched_getaffinity(0)),"
    " 'cvd': os.environ.get('CUDA_VISIBLE_DEVICES'),"
    " 'order': os.environ.get('CUDA_DEVICE_ORDER')}))"
)
EX_USAGE = 64


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return placeroot.build(tmp_path_factory.mktemp("ranks"), gpus=2)


@pytest.fixture(scope="module")
def uuids(root: Path) -> list[str]:
    placed = plan_placement(discover_host(Host(root)))
    out = [g.uuid for g in placed.gpus]
    assert all(out) and len(out) == 2
    return [u for u in out if u is not None]


def launch(root: Path, env: dict[str, str], *extra: str) -> subprocess.CompletedProcess[str]:
    """One rank as a launcher starts it: this test's environment without any launcher's
    variables, plus `env`."""
    base = {
        k: v
        for k, v in os.environ.items()
        if k not in RANK_VARIABLES and k != "CUDA_VISIBLE_DEVICES"
    }
    argv = [sys.executable, "-m", "mcpnode", "exec", "--fresh", "--root", str(root)]
    argv += ["--housekeeping", "none", "--gpu", "local-rank", *extra]
    argv += ["--", sys.executable, "-c", CHILD]
    return subprocess.run(argv, capture_output=True, text=True, env={**base, **env}, timeout=60)


@placeroot.needs_machine
@pytest.mark.parametrize(
    ("env", "cpus", "said"),
    [
        ({"LOCAL_RANK": "1"}, [1], "local rank 1 from LOCAL_RANK: GPU 1"),
        ({"SLURM_LOCALID": "0"}, [0], "local rank 0 from SLURM_LOCALID: GPU 0"),
        ({"OMPI_COMM_WORLD_LOCAL_RANK": "1"}, [1], "from OMPI_COMM_WORLD_LOCAL_RANK: GPU 1"),
        ({"MPI_LOCALRANKID": "0"}, [0], "local rank 0 from MPI_LOCALRANKID: GPU 0"),
        # the order: torchrun's variable first, whatever srun or mpirun also set
        ({"SLURM_LOCALID": "1", "LOCAL_RANK": "0"}, [0], "from LOCAL_RANK: GPU 0"),
        ({"MPI_LOCALRANKID": "0", "OMPI_COMM_WORLD_LOCAL_RANK": "1"}, [1], "OMPI_COMM_WORLD"),
        # through the caller's CUDA_VISIBLE_DEVICES: rank 1 is its second entry, GPU 0
        (
            {"LOCAL_RANK": "1", "CUDA_VISIBLE_DEVICES": "1,0"},
            [0],
            "local rank 1 from LOCAL_RANK, CUDA_VISIBLE_DEVICES[1]=0: GPU 0",
        ),
    ],
)
def test_rank_is_placed(root: Path, env: dict[str, str], cpus: list[int], said: str) -> None:
    proc = launch(root, env)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert got["cpus"] == cpus
    assert said in proc.stderr and proc.stderr.count("\n") == 1
    # the caller's list is kept (cuda:LOCAL_RANK must still name the rank's GPU), the order set
    assert got["cvd"] == env.get("CUDA_VISIBLE_DEVICES")
    assert got["order"] == "PCI_BUS_ID"


@placeroot.needs_machine
def test_rank_by_uuid_in_the_list(root: Path, uuids: list[str]) -> None:
    other, mine = uuids[0], "GPU-" + uuids[1][4:].lower()  # hex case does not matter
    env = {"SLURM_LOCALID": "1", "CUDA_VISIBLE_DEVICES": f"{other},{mine}"}
    proc = launch(root, env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["cpus"] == [1]
    assert "local rank 1 from SLURM_LOCALID" in proc.stderr


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"LOCAL_RANK": "-1"}, "LOCAL_RANK='-1' is not a local rank"),
        ({"LOCAL_RANK": "9" * 30}, "is not a local rank"),
        ({"LOCAL_RANK": "1024"}, "LOCAL_RANK='1024' is not a local rank"),
        ({"LOCAL_RANK": "abc"}, "LOCAL_RANK='abc' is not a local rank"),
        ({"LOCAL_RANK": "01"}, "LOCAL_RANK='01' is not a local rank"),
        ({"LOCAL_RANK": " 1"}, "is not a local rank"),
        ({"LOCAL_RANK": "\u0661"}, "is not a local rank"),  # Arabic-Indic one: int() takes it
        ({"LOCAL_RANK": "1\x1b[2J"}, "LOCAL_RANK='1\\x1b[2J' is not a local rank"),
        # set but empty: an error naming it, not a quiet fall to SLURM_LOCALID
        ({"LOCAL_RANK": "", "SLURM_LOCALID": "0"}, "LOCAL_RANK='' is not a local rank"),
        ({"SLURM_LOCALID": "2"}, "rank 2 (from SLURM_LOCALID) but this host has 2 GPU(s)"),
        (
            {"LOCAL_RANK": "1", "CUDA_VISIBLE_DEVICES": "0"},
            "rank 1 (from LOCAL_RANK) but CUDA_VISIBLE_DEVICES lists 1 GPU(s)",
        ),
        ({"LOCAL_RANK": "0", "CUDA_VISIBLE_DEVICES": ""}, "CUDA_VISIBLE_DEVICES lists 0 GPU(s)"),
        (
            {"LOCAL_RANK": "0", "CUDA_VISIBLE_DEVICES": "7"},
            "is 'CUDA_VISIBLE_DEVICES[0]=7', which is not a GPU index or UUID of this host",
        ),
        (
            {"LOCAL_RANK": "0", "CUDA_VISIBLE_DEVICES": "GPU-00000000-dead"},
            "which is not a GPU index or UUID of this host",
        ),
        ({"LOCAL_RANK": "0", "CUDA_VISIBLE_DEVICES": "0\n1"}, "not a GPU index or UUID"),
        ({}, "none of LOCAL_RANK, SLURM_LOCALID, OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID"),
    ],
)
def test_bad_rank_is_one_line_and_exit_64(root: Path, env: dict[str, str], message: str) -> None:
    proc = launch(root, env)
    assert proc.returncode == EX_USAGE, proc.stderr
    assert proc.stdout == ""  # the child never ran
    assert message in proc.stderr, proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


def test_pin_refuses_local_rank(root: Path) -> None:
    argv = [sys.executable, "-m", "mcpnode", "pin", str(os.getpid()), "--fresh"]
    argv += ["--root", str(root), "--gpu", "local-rank"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert proc.returncode == EX_USAGE and "for exec only" in proc.stderr, proc.stderr
