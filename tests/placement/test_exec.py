"""`mcpnode exec` for real: the placement comes from a root shaped like this machine, the child
it execs reports its own CPU affinity, memory policy and environment. Plus the pure parts (env
merge, target choice) and the errors: unknown GPU, command not found, a placement from a
machine with other CPUs."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

import pytest

from mcpnode.errors import NotSupported, PlacementUnavailable, UsageError
from mcpnode.host import Host
from mcpnode.placement.apply import choose_target, merge_env
from mcpnode.placement.plan import plan_placement
from mcpnode.topology.discover import discover_host
from mcpnode.topology.model import CpuSet
from tests.support import placeroot
from tests.support.tuningcli import run_cli, run_process

FIXTURES = Path(__file__).parents[1] / "fixtures" / "hosts"
UUID = "GPU-3126d961-2891-5574-b3c1-87ce3c1e6eb9"

# What the exec'd child reports about itself: its affinity, the kernel's view of its memory
# policy (the second field of every /proc/self/numa_maps line: `prefer:0`, `bind:0`, `default`)
# and the placement variables it inherited.
CHILD = """
import json, os
status = dict(l.split(":", 1) for l in open("/proc/self/status") if ":" in l)
policies = sorted({l.split()[1] for l in open("/proc/self/numa_maps")})
names = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "NCCL_IB_HCA", "NCCL_SOCKET_IFNAME",
         "UCX_NET_DEVICES", "KEEP_ME")
print(json.dumps({
    "affinity": sorted(os.sched_getaffinity(0)),
    "mems_allowed": status["Mems_allowed_list"].strip(),
    "policies": policies,
    "env": {n: os.environ.get(n) for n in names},
}))
"""

needs_machine = placeroot.needs_machine


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return placeroot.build(tmp_path_factory.mktemp("placed"))


def exec_child(root: Path, *opts: str) -> dict[str, object]:
    proc = run_process(
        "exec", "--fresh", "--root", str(root), *opts, "--", sys.executable, "-c", CHILD,
        env={"KEEP_ME": "inherited"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    doc = json.loads(proc.stdout)
    assert isinstance(doc, dict)
    return doc


@needs_machine
def test_exec_slice_preferred(root: Path) -> None:
    got = exec_child(root, "--gpu", "0")
    assert got["affinity"] == sorted(placeroot.SLICE)
    assert got["mems_allowed"] == "0"
    assert got["policies"] == ["prefer:0"]
    assert got["env"] == {
        "CUDA_VISIBLE_DEVICES": UUID,
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "NCCL_IB_HCA": "=mlx5_0:1",
        "NCCL_SOCKET_IFNAME": "=eth0",
        "UCX_NET_DEVICES": "mlx5_0:1",
        "KEEP_ME": "inherited",
    }


@needs_machine
def test_exec_node_scope_membind_by_uuid(root: Path) -> None:
    got = exec_child(root, "--gpu", UUID.lower(), "--scope", "node", "--membind")
    assert got["affinity"] == sorted(placeroot.NODE_CPUS)
    assert got["policies"] == ["bind:0"]


@needs_machine
def test_exec_all_local(root: Path) -> None:
    # The root's process may use CPUs 0-1, all on GPU 0's node.
    got = exec_child(root, "--gpu", "all-local")
    assert got["affinity"] == sorted(placeroot.SLICE)
    assert got["env"]["CUDA_VISIBLE_DEVICES"] == UUID  # type: ignore[index]


@needs_machine
def test_dry_run_prints_and_runs_nothing(root: Path, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    code, out, err = run_cli(
        "exec", "--fresh", "--root", str(root), "--gpu", "0", "--dry-run", "--",
        sys.executable, "-c", f"open({str(marker)!r}, 'w')",
    )  # fmt: skip
    assert (code, err) == (0, "")
    assert not marker.exists()
    assert out.splitlines()[:4] == [
        f"GPU 0 ({UUID}, 0000:01:00.0), NUMA node 0 (own)",
        "cpus: 1 (slice)",
        "memory: preferred 0",
        f"env: CUDA_VISIBLE_DEVICES={UUID}",
    ]
    assert out.splitlines()[-1].startswith(f"exec: {sys.executable} -c ")
    assert "problem" not in out


def test_command_not_found_exits_127(root: Path) -> None:
    proc = run_process(
        "exec", "--fresh", "--root", str(root), "--gpu", "0", "--", "no-such-command-xyz"
    )
    assert proc.returncode == 127
    assert "no-such-command-xyz: command not found" in proc.stderr
    assert proc.stdout == ""


def test_dry_run_reports_a_missing_command(root: Path) -> None:
    code, out, _ = run_cli(
        "exec",
        "--fresh",
        "--root",
        str(root),
        "--gpu",
        "0",
        "--dry-run",
        "--",
        "no-such-command-xyz",
    )
    assert code == 0
    assert "problem: no-such-command-xyz: command not found" in out


@pytest.mark.parametrize("gpu", ["7", "GPU-00000000-0000-0000-0000-000000000000", "first"])
def test_unknown_gpu_is_a_usage_error(root: Path, gpu: str) -> None:
    code, out, err = run_cli("exec", "--fresh", "--root", str(root), "--gpu", gpu, "--", "true")
    assert code == 64
    assert out == ""
    assert f"--gpu {gpu!r}" in err


def test_placement_from_another_machine_is_refused() -> None:
    """GPU 0 of the HGX fixture wants CPUs this machine does not have: exit 69 before any
    change, naming them, rather than the kernel quietly dropping them."""
    if placeroot.skip_reason() is None and len(Host("/").get_affinity(0)) > 96:
        pytest.skip("this machine has the HGX fixture's CPUs")
    proc = run_process(
        "exec",
        "--fresh",
        "--root",
        str(FIXTURES / "hgx-h100-8gpu-8nic"),
        "--gpu",
        "0",
        "--",
        "true",
    )
    assert proc.returncode == 69, proc.stderr
    assert "are not online on this machine" in proc.stderr


def test_no_command_is_a_usage_error(root: Path) -> None:
    code, _, err = run_cli("exec", "--fresh", "--root", str(root), "--gpu", "0")
    assert code == 64
    assert "COMMAND" in err


# -- pure parts ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("envs", "merged"),
    [
        ([], ()),
        ([(("A", "1"),)], (("A", "1"),)),
        (
            [
                (("CUDA_VISIBLE_DEVICES", "GPU-a"), ("NCCL_IB_HCA", "=mlx5_0:1")),
                (("CUDA_VISIBLE_DEVICES", "GPU-b"), ("NCCL_IB_HCA", "=mlx5_0:1,mlx5_1:1")),
            ],
            (("CUDA_VISIBLE_DEVICES", "GPU-a,GPU-b"), ("NCCL_IB_HCA", "=mlx5_0:1,mlx5_1:1")),
        ),
        (
            [(("CUDA_DEVICE_ORDER", "PCI_BUS_ID"),), (("CUDA_DEVICE_ORDER", "PCI_BUS_ID"),)],
            (("CUDA_DEVICE_ORDER", "PCI_BUS_ID"),),
        ),
        ([(("A", "x"),), (("B", "y"),)], (("A", "x"), ("B", "y"))),
    ],
)
def test_merge_env(
    envs: list[tuple[tuple[str, str], ...]], merged: tuple[tuple[str, str], ...]
) -> None:
    assert merge_env(envs) == merged


def test_choose_target_on_the_hgx_fixture() -> None:
    with Host(FIXTURES / "hgx-h100-8gpu-8nic") as host:
        topo = discover_host(host)
    placement = plan_placement(topo)
    slice0 = choose_target(placement, "0", online=topo.cpus.online)
    node0 = choose_target(placement, "0", scope="node", policy="bind", online=topo.cpus.online)
    gpu0 = placement.gpus[0]
    assert slice0.cpus == gpu0.slice_cpus and slice0.cpus < node0.cpus
    assert node0.cpus == gpu0.local_cpus & topo.cpus.online
    assert (slice0.policy, node0.policy) == ("preferred", "bind")
    assert slice0.memory_nodes == node0.memory_nodes == gpu0.memory_nodes
    assert slice0.env == gpu0.env
    both = [g for g in placement.gpus if g.memory_nodes == gpu0.memory_nodes]
    cpus = both[0].local_cpus & topo.cpus.online
    local = choose_target(placement, "all-local", process_cpus=CpuSet(sorted(cpus)[:2]))
    assert [g.index for g in local.gpus] == [g.index for g in both]
    assert local.cpus == CpuSet().union(*(g.slice_cpus for g in both))


def test_choose_target_without_slice_says_try_node(tmp_path: Path) -> None:
    root = placeroot.build(tmp_path / "r")
    with Host(root) as host:
        topo = discover_host(host)
    # Reserving both CPUs for housekeeping leaves the GPU no slice (a problem, not a guess).
    placement = plan_placement(topo, "0-1")
    with pytest.raises(UsageError, match="no slice CPUs \\(try --scope node\\)"):
        choose_target(placement, "0")
    assert choose_target(placement, "0", scope="node").cpus == CpuSet({0, 1})


def test_the_live_check_comes_before_the_clip() -> None:
    """exec's one clip (plan_exec) narrows only a target whose CPUs are all online here: a
    target naming a CPU this machine lacks is refused, even where the caller's CPUs would have
    narrowed it to one that exists (docs/placement.md, "Clipped to the caller")."""
    from mcpnode.codec.record import replace
    from mcpnode.placement.apply import plan_exec

    with Host(FIXTURES / "hgx-h100-8gpu-8nic") as host:
        topo = discover_host(host)
    target = choose_target(plan_placement(topo), "0", online=topo.cpus.online)
    elsewhere = replace(target, cpus=CpuSet({0, 4095}))
    live = Host("/")
    plan = plan_exec(live, elsewhere, ["true"], {}, dry_run=True, allowed=CpuSet({0}))
    assert plan.target.cpus == CpuSet({0, 4095})  # not narrowed away
    assert "CPUs 4095 are not online on this machine" in plan.problems[0]
    with pytest.raises(PlacementUnavailable, match="computed for another topology"):
        plan_exec(live, elsewhere, ["true"], {}, dry_run=False, allowed=CpuSet({0}))


# -- Host primitives ------------------------------------------------------------------------------


def test_recorded_root_refuses_process_effects(root: Path) -> None:
    host = Host(root)
    with pytest.raises(NotSupported):
        host.set_affinity(0, {0})
    with pytest.raises(NotSupported):
        host.set_mempolicy("preferred", {0})
    with pytest.raises(NotSupported):
        host.resolve_command("true", {})
    with pytest.raises(NotSupported):
        host.list_tasks(1)


@needs_machine
def test_set_mempolicy_in_a_thread() -> None:
    """Per-thread: applied in a worker thread, visible in that thread's numa_maps only; a node
    this kernel lacks is PlacementUnavailable."""
    live = Host("/")
    seen: dict[str, object] = {}

    def worker() -> None:
        try:
            live.set_mempolicy("bind", {63})
        except PlacementUnavailable as err:
            seen["error"] = str(err)
        live.set_mempolicy("preferred", {0})
        tid = threading.get_native_id()
        with open(f"/proc/self/task/{tid}/numa_maps") as f:
            seen["policies"] = {line.split()[1] for line in f}

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert "refused the nodes" in str(seen["error"])
    assert seen["policies"] == {"prefer:0"}
    with open("/proc/self/numa_maps") as f:
        assert "prefer:0" not in {line.split()[1] for line in f}
