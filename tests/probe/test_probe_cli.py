"""`mcpnode probe`, `audit --probe` and `snapshot --probe` as commands: replayed from the recorded
runs of the HGX and L40S fixtures (table, JSON, exit codes), the same report from a snapshot
carrying the run, bad recorded runs, and the live command on this machine, which has no GPU and
no driver: with the extra it says there is no GPU, without it that the extra is missing, and the
bindings' cuInit fails for real with one line."""

from __future__ import annotations

import ctypes.util
import json
import os
import subprocess
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from mcpnode.cli.main import main
from mcpnode.errors import ProbeUnavailable
from tests.support import proberoot
from tests.support.fixtures import RootFactory
from tests.support.schema import validate

HGX = "hgx-h100-8gpu-8nic"
L40S = "pcie-4x-l40s-2socket"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def roots(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("probe-roots")
    return {name: proberoot.build(base / name, name) for name in (HGX, L40S)}


Run = Callable[[list[str]], tuple[int, str, str]]


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str]) -> Run:
    """main() as the console script runs it: (exit status, stdout, stderr)."""

    def go(argv: list[str]) -> tuple[int, str, str]:
        with pytest.raises(SystemExit) as exc:
            main(argv)
        out = capsys.readouterr()
        code = exc.value.code
        return (code if isinstance(code, int) else 2), out.out, out.err

    return go


def test_l40s_table(roots: dict[str, Path], run: Run) -> None:
    code, out, err = run(["probe", "--root", str(roots[L40S])])
    assert (code, err) == (1, "")
    lines = out.splitlines()
    assert lines[0].startswith("probe 2026-11-30T09:20:41+00:00 (/mcpnode-probe.json); CUDA 12.4;")
    assert (
        "GPU 2 0000:81:00.0 NVIDIA L40S: promised Gen4 x16 28.6 GB/s; under load Gen4 x16;"
        " placement node 1"
    ) in lines
    # GPU 2: node 0 fastest (*), node 1 the placement's (p)
    i = lines.index(next(x for x in lines if x.startswith("GPU 2 ")))
    assert lines[i + 2].split()[:5] == ["0*", "26.1", "0.91", "26.6", "0.93"]
    assert lines[i + 3].split()[:5] == ["1p", "21.7", "0.76", "22.6", "0.79"]
    assert "GPU0           X     21/29    no P2P    no P2P" in lines
    assert any(
        x.startswith("[FAIL] probe.placement GPU 2 (0000:81:00.0): node 0 is faster") for x in lines
    )
    assert lines[-1] == "7 PASS, 0 WARN, 1 FAIL, 1 SKIP, 12 INFO of 21 probe findings"


def test_hgx_json(roots: dict[str, Path], run: Run) -> None:
    code, out, _ = run(["probe", "--root", str(roots[HGX]), "--format", "json"])
    assert code == 1
    doc = json.loads(out)
    assert doc["schema"] == "mcpnode.probe-report/v1"
    assert doc["source"] == "/mcpnode-probe.json"
    gpu5 = doc["gpus"][5]
    assert gpu5["expected"]["gbps"] == 57.205 and gpu5["link_under_load"] == {"gen": 5, "width": 8}
    assert [n["node"] for n in gpu5["nodes"]] == [0, 1] and gpu5["fastest_node"] == 1
    assert gpu5["nodes"][1]["h2d"]["ratio"] == pytest.approx(0.474, abs=0.001)
    assert len(doc["peers"]) == 56 and {p["link"] for p in doc["peers"]} == {"NVLink"}
    assert doc["peers"][0]["expected_gbps"] == 450.0 and doc["peers"][0]["nvlinks"] == 18
    failed = [(f["id"], f["subject"]) for f in doc["findings"] if f["status"] == "FAIL"]
    assert failed == [("probe.pcie", "0000:ab:00.0")]
    recorded = json.loads((proberoot.RUNS / f"{HGX}.json").read_text())
    assert doc["run"] == recorded


def test_snapshot_carries_the_run_and_replays_the_same(
    roots: dict[str, Path], run: Run, tmp_path: Path
) -> None:
    out_file = tmp_path / "snap.tar.gz"
    code, out, _ = run(["snapshot", "--probe", "--root", str(roots[L40S]), "-o", str(out_file)])
    assert code == 0 and out.rstrip().endswith("; probe recorded")
    with tarfile.open(out_file) as tf:
        names = tf.getnames()
    assert "mcpnode-snapshot/mcpnode-probe.json" in names
    assert "mcpnode-snapshot/mcpnode-snapshot.json" in names
    direct = run(["probe", "--root", str(roots[L40S]), "--format", "json"])
    replay = run(["probe", "--root", str(out_file), "--format", "json"])
    assert direct == replay


def test_snapshot_probe_without_a_run_writes_nothing(run: Run, tmp_path: Path) -> None:
    out_file = tmp_path / "snap.tar.gz"
    code, out, err = run(
        ["snapshot", "--probe", "--root", str(proberoot.HOSTS / HGX), "-o", str(out_file)]
    )
    assert (code, out) == (2, "")
    assert err == (
        f"mcpnode: probe: {proberoot.HOSTS / HGX}: no probe recorded here to carry into the"
        " snapshot\n"
    )
    assert not out_file.exists() and list(tmp_path.iterdir()) == []


def test_recorded_root_without_a_run(run: Run) -> None:
    code, out, err = run(["probe", "--root", str(proberoot.HOSTS / L40S)])
    assert (code, out) == (2, "")
    assert err.startswith("mcpnode: probe: ") and "no probe recorded here" in err
    assert err.count("\n") == 1


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda t: t.replace('"h2d"', '"up"', 1), "host_cases[0].direction: 'up' is not h2d"),
        (lambda t: t[: len(t) // 2], "not JSON"),
        (lambda t: t.replace("mcpnode.probe/v1", "mcpnode.probe/v9"), "schema: mcpnode.probe/v9"),
    ],
)
def test_bad_recorded_run_is_one_line_exit_65(
    probe_root: RootFactory, run: Run, edit: Callable[[str], str], message: str
) -> None:
    text = (proberoot.RUNS / f"{L40S}.json").read_text()
    root = probe_root(L40S, edit(text))
    before = sorted(p.name for p in root.iterdir())
    code, out, err = run(["probe", "--root", str(root)])
    assert (code, out) == (65, "")
    assert err.startswith("mcpnode: /mcpnode-probe.json: ") and message in err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert sorted(p.name for p in root.iterdir()) == before  # nothing written


def test_audit_probe_replayed(roots: dict[str, Path], run: Run) -> None:
    code, out, _ = run(["audit", "--probe", "--root", str(roots[L40S]), "--format", "json"])
    assert code == 1
    doc: dict[str, Any] = json.loads(out)
    schema = json.loads((REPO / "docs" / "audit-schema.json").read_text())
    assert validate(doc, schema) == []
    ids = [f["id"] for f in doc["findings"] if f["id"].startswith("probe.")]
    assert ids[0] == "probe.run" and ids.count("probe.placement") == 4
    bad = [f for f in doc["findings"] if f["status"] == "FAIL" and f["id"].startswith("probe.")]
    assert [(f["id"], f["subject"]) for f in bad] == [("probe.placement", "0000:81:00.0")]
    code, out, _ = run(["audit", "--root", str(roots[L40S]), "--format", "json"])
    assert not [f for f in json.loads(out)["findings"] if f["id"].startswith("probe.")]


def test_audit_probe_without_a_run_fails_probe_run(run: Run) -> None:
    code, out, _ = run(
        [
            "audit",
            "--probe",
            "--only",
            "probe",
            "--root",
            str(proberoot.HOSTS / HGX),
            "--format",
            "json",
        ]
    )
    assert code == 1
    (f,) = json.loads(out)["findings"]
    assert (f["id"], f["status"]) == ("probe.run", "FAIL")
    assert "no probe recorded under this root" in f["summary"]


def test_help_lists_probe() -> None:
    result = CliRunner().invoke(__import__("mcpnode.cli.main", fromlist=["cli"]).cli, ["--help"])
    assert result.exit_code == 0 and "probe" in result.output


# -- live, on this machine (no GPU, no driver) -------------------------------------------------


def _has_gpu_or_driver() -> bool:
    return bool(ctypes.util.find_library("cuda")) or any(Path("/proc/driver/nvidia").glob("gpus/*"))


@pytest.mark.live
def test_live_without_gpus_says_so(run: Run) -> None:
    if _has_gpu_or_driver():
        pytest.skip("this machine has an NVIDIA driver or GPU: the no-GPU path is not reachable")
    code, out, err = run(["probe", "--no-save"])
    assert (code, out) == (2, "")
    assert (
        err == "mcpnode: probe: no NVIDIA GPU on this host (sysfs lists none): nothing to probe\n"
    )


@pytest.mark.live
def test_live_without_the_extra_says_so(tmp_path: Path) -> None:
    """A Python that has click and mcpnode but not cuda-bindings (site-packages switched off
    with -S, the two put on the path by hand): the extra is named, exit 2."""
    site = tmp_path / "site"
    site.mkdir()
    import click

    (site / "click").symlink_to(Path(click.__file__).parent)
    (site / "mcpnode").symlink_to(REPO / "mcpnode")
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(site)}
    proc = subprocess.run(
        [sys.executable, "-S", "-m", "mcpnode", "probe", "--no-save"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=120,
    )
    assert (proc.returncode, proc.stdout) == (2, ""), proc.stderr
    assert proc.stderr == (
        "mcpnode: probe: the CUDA driver API bindings are not installed:"
        " pip install 'mcpnode[probe]' (NVIDIA's cuda-bindings)\n"
    )


def test_bindings_without_a_driver_fail_cuinit_plainly() -> None:
    """The real bindings' cuInit on a machine without libcuda: ProbeUnavailable, one line."""
    pytest.importorskip("cuda.bindings.driver")
    if _has_gpu_or_driver():
        pytest.skip("this machine has an NVIDIA driver")
    from mcpnode.probe.live import Cuda, load_driver

    driver, version = load_driver()
    assert version is not None and version.startswith("12.")
    with pytest.raises(ProbeUnavailable) as exc:
        Cuda(driver).init()
    assert str(exc.value).startswith("no NVIDIA driver here: libcuda.so.1 could not be loaded (")
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("CUDA_ERROR_NO_DEVICE", "the driver sees no CUDA device"),
        ("CUDA_ERROR_SYSTEM_NOT_READY", "nvidia-fabricmanager must be running"),
        ("CUDA_ERROR_INSUFFICIENT_DRIVER", "older than these bindings need"),
        ("CUDA_ERROR_SOMETHING_NEW", "the driver could not start"),
    ],
)
def test_cuinit_messages(name: str, words: str) -> None:
    from mcpnode.probe.live import _init_message

    msg = _init_message(name)
    assert msg.startswith("cuInit failed: ") and words in msg and msg.endswith(f"({name})")


def test_audit_probe_without_gpus_is_skip(run: Run) -> None:
    code, out, _ = run(
        [
            "audit",
            "--probe",
            "--only",
            "probe",
            "--root",
            str(proberoot.HOSTS / "no-gpu-host"),
            "--format",
            "json",
        ]
    )
    assert code == 0
    (f,) = json.loads(out)["findings"]
    assert (f["id"], f["status"], f["summary"]) == (
        "probe.run",
        "SKIP",
        "no NVIDIA GPU here: nothing to probe",
    )
