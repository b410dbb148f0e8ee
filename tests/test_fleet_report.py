"""`mcpnode fleet-report` (mcpnode/fleet, cli/fleet.py): a fleet of manifests built from the
committed host fixtures, with deliberate outliers made the way they happen (a GPU trained at x8,
another driver, a NIC whose driver did not bind, a sysctl off-profile), each reported under its
property and nothing else flagged; mixed fleets, ties, unreadable manifests, exit codes, the JSON
schema and a golden text report.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from mcpnode.cli.fleet import fleet_report
from mcpnode.errors import RootError
from mcpnode.fleet import render
from mcpnode.fleet.load import Fleet, HostManifest, load_fleet, natural_key
from mcpnode.fleet.properties import PROPERTIES, Property, Value, numa_layout, runs
from mcpnode.fleet.report import FleetReport, compare, compare_property
from mcpnode.host import Host
from mcpnode.placement.build import make_manifest
from mcpnode.placement.manifest import content_hash, dumps
from tests import auditroot
from tests.jsonschema_mini import validate

HERE = Path(__file__).resolve().parent
HOSTS = HERE / "fixtures" / "hosts"
SCHEMA_FILE = HERE.parent / "docs" / "fleet-report.schema.json"
HGX = "hgx-h100-8gpu-8nic"
L40S = "pcie-4x-l40s-2socket"
NOW = datetime(2025, 6, 1, 12, 0, 0, tzinfo=timezone.utc)
FLEET_SIZE = 24
NAMES = tuple(f"gpu-{i:02d}" for i in range(1, FLEET_SIZE + 1))
# The HGX GPU 3 (0000:5d:00.0) and its PIX NIC 0000:5e:00.0 (mlx5_3, ibp94s0).
GPU3 = "0000:5d:00.0"
NIC3 = "0000:5e:00.0"

Manifest = dict[str, Any]


# -- building manifests ------------------------------------------------------------------------


def build(root: Path) -> Manifest:
    return make_manifest(Host(root), now=NOW)


def with_hostname(doc: Manifest, hostname: str) -> Manifest:
    """A copy of `doc` as published by `hostname`: host.hostname changed, content_hash
    recomputed (what the host itself would have published)."""
    out = copy.deepcopy(doc)
    out["host"]["hostname"] = hostname
    out["content_hash"] = content_hash(out)
    return out


def edited(doc: Manifest, change: Callable[[Manifest], None]) -> Manifest:
    """A copy of `doc` with `change` applied and the hash recomputed: for facts no fixture
    edit produces (a GPU with no NIC in reach at all)."""
    out = copy.deepcopy(doc)
    change(out)
    out["content_hash"] = content_hash(out)
    return out


@dataclass(frozen=True)
class Edit:
    """Changes to a copy of a fixture, by path under its root (intermediate symlinks such as
    sys/bus/pci/devices/ADDR are followed): files given new text, entries taken away."""

    writes: dict[str, str] = field(default_factory=dict)
    removes: tuple[str, ...] = ()


@contextmanager
def patched(root: Path, edit: Edit) -> Iterator[None]:
    """`edit` applied to `root` for the duration of the block, then undone in reverse, so one
    copy of the fixture serves every variant (copying it costs more than all the builds)."""
    stash = root.parent / "stash"
    stash.mkdir()
    saved: list[tuple[Path, str | None]] = []
    moved: list[tuple[Path, Path]] = []
    try:
        for rel, text in edit.writes.items():
            path = root / rel
            saved.append((path, path.read_text() if path.exists() else None))
            path.write_text(text)
        for i, rel in enumerate(edit.removes):
            away = stash / str(i)
            os.rename(root / rel, away)  # a symlink itself, never its target
            moved.append((root / rel, away))
        yield
    finally:
        for path, away in reversed(moved):
            os.rename(away, path)
        for path, old in reversed(saved):
            if old is None:
                path.unlink()
            else:
                path.write_text(old)
        stash.rmdir()


def replaced(root: Path, rel: str, old: str, new: str) -> str:
    """The text of `rel` with its one occurrence of `old` replaced by `new`."""
    text = (root / rel).read_text()
    assert text.count(old) == 1, (rel, old)
    return text.replace(old, new)


SNAPSHOT = "mcpnode-snapshot.json"  # the NVML recording: what NVML answers on this root
NVML_WIDTH_3 = '{"args": [3], "fn": "nvmlDeviceGetCurrPcieLinkWidth", "value": '


def gpu_at_x8(root: Path) -> Edit:
    """GPU 3 trained at x8 (a bad riser): sysfs current_link_width and NVML both say so."""
    return Edit(
        {
            f"sys/bus/pci/devices/{GPU3}/current_link_width": "8\n",
            SNAPSHOT: replaced(root, SNAPSHOT, NVML_WIDTH_3 + "16}", NVML_WIDTH_3 + "8}"),
        }
    )


def other_driver(root: Path) -> Edit:
    """NVML reports another driver version."""
    return Edit({SNAPSHOT: replaced(root, SNAPSHOT, '"570.133.20"', '"565.57.01"')})


def nic_unbound(root: Path) -> Edit:
    """mlx5_core did not bind GPU 3's NIC: no driver link, no RDMA device, no netdev."""
    dev = f"sys/bus/pci/devices/{NIC3}"
    return Edit(
        removes=(
            f"{dev}/infiniband",
            f"{dev}/net",
            f"{dev}/driver",
            "sys/class/infiniband/mlx5_3",
            "sys/class/net/ibp94s0",
        )
    )


def numa_balancing_on(root: Path) -> Edit:
    """kernel.numa_balancing=1 where the base profile wants 0: drift."""
    return Edit({"proc/sys/kernel/numa_balancing": "1\n"})


# Outlier host -> (how the fixture is changed, the properties it must be flagged under).
# The x8 and the drifted hosts are flagged under audit_failed too: their audits FAIL
# gpu.pcie.width and tuning.drift, which an operator should see there as well.
OUTLIERS: dict[str, tuple[Callable[[Path], Edit], frozenset[str]]] = {
    "gpu-05": (gpu_at_x8, frozenset({"pcie_width", "audit_failed"})),
    "gpu-09": (other_driver, frozenset({"driver"})),
    "gpu-13": (nic_unbound, frozenset({"nic"})),
    "gpu-17": (numa_balancing_on, frozenset({"tuning", "audit_failed"})),
}


@pytest.fixture(scope="module")
def hgx() -> Manifest:
    return build(HOSTS / HGX)


@pytest.fixture(scope="module")
def l40s() -> Manifest:
    return build(HOSTS / L40S)


@pytest.fixture(scope="module")
def variants(tmp_path_factory: pytest.TempPathFactory, hgx: Manifest) -> dict[str, Manifest]:
    """The outlier hosts' manifests, each built from one copy of the HGX fixture with one
    change applied (and undone after)."""
    root = tmp_path_factory.mktemp("hgx") / "root"
    shutil.copytree(HOSTS / HGX, root, symlinks=True)
    out = {}
    for host, (change, _) in OUTLIERS.items():
        with patched(root, change(root)):
            out[host] = build(root)
    assert build(root) == hgx  # every change undone
    return out


def write_fleet(directory: Path, docs: dict[str, Manifest]) -> Path:
    """`directory/<host>/manifest.json` per host, as Ansible's fetch lays them out."""
    for host, doc in docs.items():
        (directory / host).mkdir(parents=True)
        (directory / host / "manifest.json").write_text(dumps(with_hostname(doc, host)))
    return directory


@pytest.fixture(scope="module")
def fleet_dir(
    tmp_path_factory: pytest.TempPathFactory, hgx: Manifest, variants: dict[str, Manifest]
) -> Path:
    docs = {name: variants.get(name, hgx) for name in NAMES}
    return write_fleet(tmp_path_factory.mktemp("fleet"), docs)


def report_of(directory: Path) -> FleetReport:
    with Host(directory) as host:
        return compare(load_fleet(host))


def flagged(report: FleetReport) -> dict[str, set[str]]:
    """host -> the properties it is an outlier under."""
    out: dict[str, set[str]] = {}
    for prop in report.properties:
        for o in prop.outliers:
            out.setdefault(o.host, set()).add(prop.name)
    return out


def prop(report: FleetReport, name: str) -> Any:
    return next(p for p in report.properties if p.name == name)


# -- the HGX fleet -----------------------------------------------------------------------------


def test_each_outlier_under_its_property_and_nothing_else(fleet_dir: Path) -> None:
    report = report_of(fleet_dir)
    assert report.hosts == NAMES
    assert report.unreadable == ()
    assert flagged(report) == {host: set(props) for host, (_, props) in OUTLIERS.items()}
    assert report.outlier_hosts == tuple(OUTLIERS)
    assert report.split_properties == ()
    for p in report.properties:
        expected = FLEET_SIZE - sum(p.name in props for _, props in OUTLIERS.values())
        if p.name.startswith("probe_"):
            expected = 0  # no host of this fleet ran a probe (tests/test_probe_fleet.py does)
        assert p.majority_hosts == expected, p.name


def test_outlier_details_name_the_gpu(fleet_dir: Path) -> None:
    report = report_of(fleet_dir)
    width = prop(report, "pcie_width")
    assert width.majority == "0-7:x16"
    (o,) = width.outliers
    assert (o.host, o.value) == ("gpu-05", "0-2:x16,3:x8,4-7:x16")
    assert [(d.index, d.value, d.fleet) for d in o.gpus] == [(3, "x8", "x16")]

    nic = prop(report, "nic")
    (o,) = nic.outliers
    assert o.host == "gpu-13"
    assert [(d.index, d.value, d.fleet) for d in o.gpus] == [
        (3, "mlx5_0+mlx5_1+mlx5_2(NODE)", "mlx5_3(PIX)")
    ]

    (o,) = prop(report, "driver").outliers
    assert (o.host, o.value, o.gpus) == ("gpu-09", "565.57.01", ())
    assert prop(report, "driver").majority == "570.133.20"

    (o,) = prop(report, "tuning").outliers
    assert (o.host, o.value) == ("gpu-17", "base: 1 drift (kernel.numa_balancing)")
    assert prop(report, "tuning").majority == "base: compliant"
    audit = prop(report, "audit_failed")
    assert [(o.host, o.value) for o in audit.outliers] == [
        ("gpu-05", "gpu.pcie.width"),
        ("gpu-17", "tuning.drift"),
    ]
    assert prop(report, "audit_failed").majority == "none"


def test_majority_values_of_the_hgx_fleet(fleet_dir: Path) -> None:
    majority = {p.name: p.majority for p in report_of(fleet_dir).properties}
    assert majority == {
        "gpus": "8x NVIDIA H100 80GB HBM3",
        "driver": "570.133.20",
        "kernel": "5.15.0-119-generic",
        "toolkit": "not installed",
        "numa": "2 nodes x 96 CPUs",
        "gpu_numa": "0-3:0,4-7:1",
        "pcie_width": "0-7:x16",
        "pcie_gen": "0-7:Gen5",
        "nic": ",".join(f"{i}:mlx5_{i}(PIX)" for i in range(8)),
        "nvlink": "0-7:18",
        "probe_node": None,
        "probe_pcie": None,
        "probe_nvlink": None,
        "tuning": "base: compliant",
        "audit_failed": "none",
    }


# The report of the fleet above, as docs/fleet.md shows it.
GOLDEN = """\
fleet: 24 host(s) read, 0 unreadable
gpus: majority 8x NVIDIA H100 80GB HBM3 (24/24 hosts)
driver: majority 570.133.20 (23/24 hosts)
  gpu-09: 565.57.01
kernel: majority 5.15.0-119-generic (24/24 hosts)
toolkit: majority not installed (24/24 hosts)
numa: majority 2 nodes x 96 CPUs (24/24 hosts)
gpu_numa: majority 0-3:0,4-7:1 (24/24 hosts)
pcie_width: majority 0-7:x16 (23/24 hosts)
  gpu-05: GPU 3 x8 (fleet: x16)
pcie_gen: majority 0-7:Gen5 (24/24 hosts)
nic: majority 0:mlx5_0(PIX),1:mlx5_1(PIX),2:mlx5_2(PIX),3:mlx5_3(PIX),4:mlx5_4(PIX),\
5:mlx5_5(PIX),6:mlx5_6(PIX),7:mlx5_7(PIX) (23/24 hosts)
  gpu-13: GPU 3 mlx5_0+mlx5_1+mlx5_2(NODE) (fleet: mlx5_3(PIX))
nvlink: majority 0-7:18 (24/24 hosts)
probe_node: not reported by any host
probe_pcie: not reported by any host
probe_nvlink: not reported by any host
tuning: majority base: compliant (23/24 hosts)
  gpu-17: base: 1 drift (kernel.numa_balancing)
audit_failed: majority none (22/24 hosts)
  gpu-05: gpu.pcie.width
  gpu-17: tuning.drift
4 outlier host(s): gpu-05, gpu-09, gpu-13, gpu-17
"""


def test_text_golden(fleet_dir: Path) -> None:
    assert render.as_text(report_of(fleet_dir)) == GOLDEN


def test_json_matches_schema(fleet_dir: Path) -> None:
    doc = json.loads(render.as_json(report_of(fleet_dir)))
    assert validate(doc, json.loads(SCHEMA_FILE.read_text())) == []
    assert doc["schema"] == "mcpnode.fleet-report/v1"
    assert doc["outlier_hosts"] == list(OUTLIERS)
    assert doc["ok"] is False
    assert [p["name"] for p in doc["properties"]] == [p.name for p in PROPERTIES]


def test_schema_rejects_unknown_fields(fleet_dir: Path) -> None:
    doc = json.loads(render.as_json(report_of(fleet_dir)))
    doc["properties"][0]["outliers"] = [{"host": "x", "value": None, "gpus": [], "why": "?"}]
    errors = validate(doc, json.loads(SCHEMA_FILE.read_text()))
    assert errors == ["$.properties[0].outliers[0]: unexpected 'why'"]


def test_uniform_fleet_is_ok(tmp_path: Path, hgx: Manifest) -> None:
    report = report_of(write_fleet(tmp_path, {n: hgx for n in NAMES[:3]}))
    assert report.ok
    assert render.as_text(report).endswith("\n0 outlier host(s)\n")


# -- mixed fleets, ties, missing values ----------------------------------------------------------


def test_two_models_clear_majority(tmp_path: Path, hgx: Manifest, l40s: Manifest) -> None:
    docs = {n: (l40s if i % 4 == 0 else hgx) for i, n in enumerate(NAMES)}
    minority = tuple(n for i, n in enumerate(NAMES) if i % 4 == 0)
    report = report_of(write_fleet(tmp_path, docs))
    gpus = prop(report, "gpus")
    assert (gpus.majority, gpus.majority_hosts) == ("8x NVIDIA H100 80GB HBM3", 18)
    assert tuple(o.host for o in gpus.outliers) == minority
    assert {o.value for o in gpus.outliers} == {"4x NVIDIA L40S"}
    assert [(g.value, g.hosts) for g in gpus.groups] == [
        ("8x NVIDIA H100 80GB HBM3", tuple(n for n in NAMES if n not in minority)),
        ("4x NVIDIA L40S", minority),
    ]
    assert report.outlier_hosts == minority
    # 4 GPUs against the fleet's 8: the whole value, no per-GPU pairing.
    width = prop(report, "pcie_width")
    assert all(o.gpus == () for o in width.outliers)


def test_tie_has_no_majority_and_lists_every_group(
    tmp_path: Path, hgx: Manifest, variants: dict[str, Manifest]
) -> None:
    docs = {n: (variants["gpu-09"] if i % 2 else hgx) for i, n in enumerate(NAMES[:6])}
    report = report_of(write_fleet(tmp_path, docs))
    driver = prop(report, "driver")
    assert (driver.split, driver.majority, driver.outliers) == (True, None, ())
    assert [(g.value, g.hosts) for g in driver.groups] == [
        ("565.57.01", ("gpu-02", "gpu-04", "gpu-06")),
        ("570.133.20", ("gpu-01", "gpu-03", "gpu-05")),
    ]
    assert report.split_properties == ("driver",)
    assert report.outlier_hosts == ()
    assert not report.ok
    text = render.as_text(report)
    assert (
        "driver: no majority (2 groups)\n  565.57.01 (3/6 hosts): gpu-02, gpu-04, gpu-06\n" in text
    )
    assert text.endswith("0 outlier host(s)\nno majority: driver\n")


def test_host_missing_a_property_is_an_outlier(tmp_path: Path, hgx: Manifest) -> None:
    def no_audit(doc: Manifest) -> None:
        doc["audit"] = None

    def no_nic_for_gpu_2(doc: Manifest) -> None:
        doc["placement"]["gpus"][2]["nics"] = []

    docs = {n: hgx for n in NAMES[:5]}
    docs["gpu-02"] = edited(hgx, no_audit)
    docs["gpu-04"] = edited(hgx, no_nic_for_gpu_2)
    report = report_of(write_fleet(tmp_path, docs))
    assert flagged(report) == {"gpu-02": {"audit_failed"}, "gpu-04": {"nic"}}
    (o,) = prop(report, "audit_failed").outliers
    assert (o.host, o.value) == ("gpu-02", None)
    assert prop(report, "audit_failed").groups[-1].value is None
    (o,) = prop(report, "nic").outliers
    assert [(d.index, d.value) for d in o.gpus] == [(2, "none")]
    assert "  gpu-02: not reported\n" in render.as_text(report)


def test_property_no_host_reports(tmp_path: Path, hgx: Manifest) -> None:
    def no_driver(doc: Manifest) -> None:
        doc["host"]["driver"] = None

    report = report_of(write_fleet(tmp_path, {n: edited(hgx, no_driver) for n in NAMES[:2]}))
    driver = prop(report, "driver")
    assert (driver.majority, driver.split, driver.outliers) == (None, False, ())
    assert report.ok
    assert "driver: not reported by any host\n" in render.as_text(report)


# -- reading the directory ---------------------------------------------------------------------


def test_unreadable_manifests_are_reported_and_the_rest_compared(
    tmp_path: Path, hgx: Manifest
) -> None:
    write_fleet(tmp_path, {n: hgx for n in NAMES[:4]})
    edited_by_hand = tmp_path / "gpu-02" / "manifest.json"
    edited_by_hand.write_text(edited_by_hand.read_text().replace('"base"', '"latency"', 1))
    (tmp_path / "gpu-03" / "manifest.json").write_text("{ truncated")
    newer = with_hostname(hgx, "gpu-05") | {"schema": "mcpnode.manifest/v2"}
    (tmp_path / "gpu-05.json").write_text(json.dumps(newer))
    (tmp_path / "gpu-06").mkdir()  # the fetch failed: a directory, no manifest
    shaped_wrong = {"schema": "mcpnode.manifest/v1", "gpus": "none"}
    shaped_wrong["content_hash"] = content_hash(shaped_wrong)
    (tmp_path / "gpu-07.json").write_text(json.dumps(shaped_wrong))

    report = report_of(tmp_path)
    assert report.hosts == ("gpu-01", "gpu-04")
    reasons = {u.host: (u.source, u.reason) for u in report.unreadable}
    assert list(reasons) == ["gpu-02", "gpu-03", "gpu-05", "gpu-06", "gpu-07"]
    assert reasons["gpu-02"] == (
        "gpu-02/manifest.json",
        "gpu-02/manifest.json: content_hash does not match the content (edited?)",
    )
    assert "not JSON" in reasons["gpu-03"][1]
    assert "newer than this mcpnode reads" in reasons["gpu-05"][1]
    assert reasons["gpu-06"] == (
        "gpu-06/manifest.json",
        "gpu-06/manifest.json: No such file or directory",
    )
    assert reasons["gpu-07"][1].startswith("gpu-07.json: not a v1 manifest (")
    assert report.outlier_hosts == ()
    assert not report.ok
    text = render.as_text(report)
    assert text.startswith("fleet: 2 host(s) read, 5 unreadable\nunreadable:\n  gpu-02: ")
    assert text.endswith("5 unreadable: gpu-02, gpu-03, gpu-05, gpu-06, gpu-07\n")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a mode-000 file anyway")
def test_unreadable_file_is_reported(tmp_path: Path, hgx: Manifest) -> None:
    write_fleet(tmp_path, {n: hgx for n in NAMES[:2]})
    locked = tmp_path / "gpu-02" / "manifest.json"
    locked.chmod(0)
    try:
        report = report_of(tmp_path)
    finally:
        locked.chmod(0o644)
    (u,) = report.unreadable
    assert (u.host, u.source) == ("gpu-02", "gpu-02/manifest.json")
    assert "ermission" in u.reason


def test_layouts_flat_files_fetch_default_and_bare(tmp_path: Path, hgx: Manifest) -> None:
    (tmp_path / "a.json").write_text(dumps(with_hostname(hgx, "a")))
    nested = tmp_path / "b" / "run" / "mcpnode"
    nested.mkdir(parents=True)
    (nested / "manifest.json").write_text(dumps(with_hostname(hgx, "b")))
    (tmp_path / "manifest.json").write_text(dumps(with_hostname(hgx, "c.example")))
    (tmp_path / "notes.txt").write_text("not a manifest")
    (tmp_path / ".a.json.1234.tmp").write_text("half-written")
    with Host(tmp_path) as host:
        fleet = load_fleet(host)
    assert [(m.host, m.source) for m in fleet.manifests] == [
        ("a", "a.json"),
        ("b", "b/run/mcpnode/manifest.json"),
        ("c.example", "manifest.json"),
    ]
    assert fleet.unreadable == ()


def test_duplicate_host_names_are_both_kept(tmp_path: Path, hgx: Manifest) -> None:
    write_fleet(tmp_path, {"a": hgx})
    (tmp_path / "a.json").write_text(dumps(with_hostname(hgx, "a")))
    with Host(tmp_path) as host:
        fleet = load_fleet(host)
    assert sorted(m.host for m in fleet.manifests) == ["a.json", "a/manifest.json"]


def test_empty_directory_raises(tmp_path: Path) -> None:
    (tmp_path / "README").write_text("nothing here")
    with Host(tmp_path) as host, pytest.raises(RootError, match="no manifests"):
        load_fleet(host)


def test_natural_order() -> None:
    assert sorted(["gpu-10", "gpu-9", "gpu-100", "a"], key=natural_key) == [
        "a",
        "gpu-9",
        "gpu-10",
        "gpu-100",
    ]


# -- the command -------------------------------------------------------------------------------


@pytest.fixture
def registered(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[list[str]], int]]:
    """`mcpnode.cli.main.main` with fleet-report registered (as main.py will), returning the
    exit status: the real error-to-exit mapping, not a copy of it."""
    from mcpnode.cli import main as cli_main

    monkeypatch.setitem(cli_main.cli.commands, "fleet-report", fleet_report)

    def run(argv: list[str]) -> int:
        with pytest.raises(SystemExit) as exc:
            cli_main.main(argv)
        assert isinstance(exc.value.code, int)
        return exc.value.code

    yield run


def test_exit_codes(
    tmp_path: Path,
    fleet_dir: Path,
    hgx: Manifest,
    registered: Callable[[list[str]], int],
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert registered(["fleet-report", str(fleet_dir)]) == 1
    assert capsys.readouterr().out == GOLDEN
    clean = write_fleet(tmp_path / "clean", {n: hgx for n in NAMES[:3]})
    assert registered(["fleet-report", str(clean)]) == 0
    empty = tmp_path / "empty"
    empty.mkdir()
    assert registered(["fleet-report", str(empty)]) == 2
    assert "no manifests" in capsys.readouterr().err
    assert registered(["fleet-report", str(tmp_path / "nope")]) == 2
    assert registered(["fleet-report", "--format", "yaml", str(clean)]) == 64


def test_command_json(fleet_dir: Path) -> None:
    group = click.Group(commands=[fleet_report])
    res = CliRunner().invoke(group, ["fleet-report", "--format", "json", str(fleet_dir)])
    assert res.exit_code == 1, res.output
    doc = json.loads(res.output)
    assert validate(doc, json.loads(SCHEMA_FILE.read_text())) == []
    assert doc["outlier_hosts"] == list(OUTLIERS)


# -- the pure pieces ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pairs", "text"),
    [
        ([], ""),
        ([(0, "a")], "0:a"),
        ([(0, "a"), (1, "a"), (2, "b"), (3, "a")], "0-1:a,2:b,3:a"),
        ([(0, "a"), (2, "a")], "0:a,2:a"),  # a gap in the indices is not a run
    ],
)
def test_runs(pairs: list[tuple[int, str]], text: str) -> None:
    assert runs(pairs) == text


@pytest.mark.parametrize(
    ("nodes", "text"),
    [
        ([("0-47,96-143", False), ("48-95,144-191", False)], "2 nodes x 96 CPUs"),
        ([("0-7", False)], "1 node x 8 CPUs"),
        ([("0-63", False), ("64-95", False)], "2 nodes: 64+32 CPUs"),
        ([("0-71", False)] + [("", True)] * 4, "1 node x 72 CPUs + 4 CPU-less"),
    ],
)
def test_numa_layout(nodes: list[tuple[str, bool]], text: str) -> None:
    doc = {
        "numa_nodes": [
            {"id": i, "cpus": cpus, "cpuless": cpuless} for i, (cpus, cpuless) in enumerate(nodes)
        ]
    }
    assert numa_layout(doc) == Value(text)


def test_compare_property_names_several_gpus() -> None:
    def width(*w: int) -> Value:
        pairs = tuple((i, f"x{v}") for i, v in enumerate(w))
        return Value(runs(pairs), pairs)

    p = Property("pcie_width", "width", True, lambda _: None)
    rep = compare_property(
        p, [("a", width(16, 16, 16)), ("b", width(16, 16, 16)), ("c", width(8, 16, 4))]
    )
    (o,) = rep.outliers
    assert [(d.index, d.value, d.fleet) for d in o.gpus] == [(0, "x8", "x16"), (2, "x4", "x16")]


def test_fleet_of_hand_made_manifests(hgx: Manifest) -> None:
    """compare() needs no directory: parsed manifests in, report out."""
    fleet = Fleet(
        tuple(HostManifest(n, f"{n}.json", with_hostname(hgx, n)) for n in ("x", "y")), ()
    )
    assert compare(fleet).ok


def _with_toolkit(root: Path, version: str) -> Path:
    """The toolkit's `--version` answers recorded in the root, as `mcpnode snapshot` stores
    them (the audit replays them: tests/test_audit_container.py)."""

    def answer(stdout: str) -> dict[str, Any]:
        return {"found": True, "returncode": 0, "stdout": stdout, "stderr": "", "reason": None}

    meta_path = root / "mcpnode-snapshot.json"
    meta = json.loads(meta_path.read_text())
    meta["commands"] = {
        "nvidia-ctk --version": answer(f"NVIDIA Container Toolkit CLI version {version}\n"),
        "nvidia-container-runtime --version": answer(
            f"NVIDIA Container Runtime version {version}\n"
        ),
        "nvidia-container-cli --version": answer(
            f"cli-version: {version}\nlib-version: {version}\n"
        ),
    }
    meta_path.write_text(json.dumps(meta))
    return root


def test_toolkit_version_outlier(tmp_path: Path) -> None:
    """The manifest carries the lowest toolkit component version the audit read; a host left
    on 1.17.7 (CVE-2025-23266) among 1.17.8 ones is named under `toolkit`, and its audit's
    FAIL under `audit_failed`."""
    current = build(_with_toolkit(auditroot.build(tmp_path / "a", auditroot.HGX), "1.17.8"))
    old = build(_with_toolkit(auditroot.build(tmp_path / "b", auditroot.HGX), "1.17.7"))
    assert current["host"]["container_toolkit"] == "1.17.8"
    docs = {n: current for n in NAMES[:4]}
    docs["gpu-03"] = old
    report = report_of(write_fleet(tmp_path / "fleet", docs))
    assert prop(report, "toolkit").majority == "1.17.8"
    assert flagged(report) == {"gpu-03": {"toolkit", "audit_failed"}}
    (o,) = prop(report, "toolkit").outliers
    assert (o.host, o.value) == ("gpu-03", "1.17.7")
