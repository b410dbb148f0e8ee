"""tests/device/probe_compare.py, what check.sh runs on a GPU host to hold a live probe against
its replay, exercised off-GPU with the L40S fixture's recorded run standing in for the live one:
the replay root built from a snapshot and the report's raw run replays to the same report, a
changed figure is a DIFF, unreadable inputs exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mcpnode.cli.main import main as mcpnode_main
from mcpnode.host import Host
from tests.device.probe_compare import differences, figures, main
from tests.support import proberoot

L40S = "pcie-4x-l40s-2socket"


def mcpnode(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exc:
        mcpnode_main(argv)
    code = exc.value.code
    return (code if isinstance(code, int) else 2), capsys.readouterr().out


@pytest.fixture(scope="module")
def stand_in(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return proberoot.build(tmp_path_factory.mktemp("stand-in") / L40S, L40S)


def test_device_flow_off_gpu(
    stand_in: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """check.sh's three steps: a report with the run inside, a snapshot of the host without it,
    the replay root from both; its report equals the first but for `source`."""
    code, out = mcpnode(["probe", "--root", str(stand_in), "--format", "json"], capsys)
    assert code == 1
    live = json.loads(out)
    live["source"] = "measured now"  # what the live command says
    (tmp_path / "live.json").write_text(json.dumps(live))
    snap = tmp_path / "base.tar.gz"
    assert (
        mcpnode(["snapshot", "--root", str(proberoot.HOSTS / L40S), "-o", str(snap)], capsys)[0]
        == 0
    )
    assert main(["root", str(tmp_path / "live.json"), str(snap), str(tmp_path / "root")]) == 0
    root = Path(capsys.readouterr().out.strip())
    with Host(root) as replay:
        assert (
            replay.read_text("/mcpnode-probe.json") == (proberoot.RUNS / f"{L40S}.json").read_text()
        )
    code, out = mcpnode(["probe", "--root", str(root), "--format", "json"], capsys)
    assert code == 1
    (tmp_path / "replay.json").write_text(out)
    assert main(["compare", str(tmp_path / "live.json"), str(tmp_path / "replay.json")]) == 0
    printed = capsys.readouterr().out
    assert printed.rstrip().endswith("probe: live report and replay: 0 difference(s)")
    assert "  node 0: h2d 25.878 GB/s (ratio 0.9047, spread 0.0068, 2.292 us)" in printed
    assert "GPU0->GPU1 PCIe: 21.276 of 28.603 GB/s (ratio 0.7438)" in printed


def test_a_changed_figure_is_a_diff(stand_in: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, out = mcpnode(["probe", "--root", str(stand_in), "--format", "json"], capsys)
    a = json.loads(out)
    b = json.loads(out)
    b["source"] = "elsewhere"
    assert list(differences(a, b)) == []
    b["gpus"][2]["nodes"][0]["h2d"]["median_gbps"] = 1.0
    del b["problems"]
    b["peers"].pop()
    assert list(differences(a, b)) == [
        "$.gpus[2].nodes[0].h2d.median_gbps: live 26.147 | replay 1.0",
        "$.peers: 12 items live, 11 replayed",
        "$.problems: only in live",
    ]
    assert len(figures(a)) == 4 * 3 + 12


def test_unreadable_inputs_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "bad.json").write_text("{")
    assert main(["compare", str(tmp_path / "bad.json"), str(tmp_path / "bad.json")]) == 2
    assert "cannot read the inputs" in capsys.readouterr().out
    assert main(["compare", str(tmp_path / "missing.json"), str(tmp_path / "bad.json")]) == 2
