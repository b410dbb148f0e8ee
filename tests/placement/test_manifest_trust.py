"""The published manifest is a root input (mcpnode/published.py): planted, shared, hostile and
oversized manifests, tried the way an attacker on the node would — a user who can write
`/run/mcpnode/`, a container that mounts it read-write, a manifest copied in from elsewhere.

Each planted manifest carries a recomputed content hash, so the one thing wrong with it is the
thing planted. Every case is run the way a launch runs it (placement/source.py's resolve, or
the CLI as a real child process) and must end in one line naming the file and the reason, the
documented exit code, no traceback, and discovery instead of the planted values. The controls:
the same manifest, root-owned 0644 in a 0755 directory, is used."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mcpnode.errors import ManifestError
from mcpnode.host import Host
from mcpnode.placement.source import resolve
from mcpnode.published import MANIFEST_PATH, content_hash, parse_manifest, read_manifest
from tests.placement.test_exec_manifest import BOOT, stamp
from tests.support import irqroot, placeroot
from tests.support.tuningcli import run_cli, run_process

NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to nobody needs root")


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = placeroot.build(tmp_path_factory.mktemp("trust-manifest"))
    stamp(root, BOOT, 4711)
    code, _, err = run_cli("manifest", "publish", "--root", str(root))
    assert code == 0, err
    return root


@pytest.fixture
def root(template: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "root"
    shutil.copytree(template, dest, symlinks=True)
    return dest


def manifest_file(root: Path) -> Path:
    return root / MANIFEST_PATH.lstrip("/")


def doc_of(root: Path) -> dict[str, Any]:
    doc = json.loads(manifest_file(root).read_text())
    assert isinstance(doc, dict)
    return doc


def plant(root: Path, change: Callable[[dict[str, Any]], None]) -> None:
    """Rewrite the published manifest with `change` applied and its hash recomputed."""
    doc = doc_of(root)
    change(doc)
    doc["content_hash"] = content_hash(doc)
    manifest_file(root).write_text(json.dumps(doc, indent=2))


def placed_gpu(doc: dict[str, Any]) -> dict[str, Any]:
    gpu = doc["placement"]["gpus"][0]
    assert isinstance(gpu, dict)
    return gpu


def notice_of(root: Path) -> tuple[str, str | None]:
    with Host(root) as host:
        got = resolve(host)
    return got.source, got.notice


# -- trust: who may have written it -------------------------------------------------------------


def test_control_root_owned_0644_in_0755_is_used(root: Path) -> None:
    assert manifest_file(root).stat().st_mode & 0o777 == 0o644
    os.chmod(manifest_file(root).parent, 0o755)
    assert notice_of(root) == ("manifest", None)


@pytest.mark.parametrize(
    ("setup", "why"),
    [
        (lambda m: os.chmod(m, 0o666), "is group- and world-writable (mode 0666)"),
        (lambda m: os.chmod(m, 0o646), "is world-writable (mode 0646)"),
        (lambda m: os.chmod(m, 0o664), "is group-writable (mode 0664)"),
        (lambda m: os.chmod(m.parent, 0o777), "is group- or world-writable (mode 0777"),
        (lambda m: os.chmod(m.parent, 0o1777), "is group- or world-writable (mode 1777"),
        (lambda m: os.chmod(m.parent.parent, 0o777), "run is group- and world-writable"),
    ],
    ids=["0666", "0646", "0664", "dir-0777", "dir-1777", "run-0777"],
)
def test_a_shared_manifest_is_not_trusted(
    root: Path, setup: Callable[[Path], None], why: str
) -> None:
    setup(manifest_file(root))
    source, notice = notice_of(root)
    assert source == "discovery"
    assert notice is not None and notice.startswith(f"{MANIFEST_PATH}: refusing to trust it")
    assert why in notice and notice.endswith(": discovering the topology instead")


@needs_root
def test_a_manifest_owned_by_nobody_is_not_trusted(root: Path) -> None:
    os.chown(manifest_file(root), NOBODY, NOBODY)
    source, notice = notice_of(root)
    assert source == "discovery"
    assert notice is not None and f"is owned by uid {NOBODY}, not root" in notice


def test_a_symlinked_manifest_or_directory_is_refused(root: Path, tmp_path: Path) -> None:
    real = tmp_path / "elsewhere.json"
    shutil.move(manifest_file(root), real)
    manifest_file(root).symlink_to(real)
    assert notice_of(root)[0] == "discovery"
    manifest_file(root).unlink()
    shutil.move(real, manifest_file(root))
    run = root / "run"
    shutil.move(run / "mcpnode", tmp_path / "mcpnode-dir")
    (run / "mcpnode").symlink_to(tmp_path / "mcpnode-dir")
    source, notice = notice_of(root)
    assert source == "discovery" and notice is not None and "is a symbolic link" in notice


def test_a_16_mib_manifest_is_refused_while_reading(root: Path) -> None:
    with manifest_file(root).open("a") as f:
        f.write(" " * (16 << 20))
    source, notice = notice_of(root)
    assert source == "discovery" and notice is not None and "larger than" in notice


# -- fields: what it may say ---------------------------------------------------------------------


def _env(name: str, value: str) -> Callable[[dict[str, Any]], None]:
    return lambda d: placed_gpu(d)["env"].__setitem__(name, value)


def _set(key: str, value: object) -> Callable[[dict[str, Any]], None]:
    return lambda d: placed_gpu(d).__setitem__(key, value)


HOSTILE: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    ("ld-preload", _env("LD_PRELOAD", "/tmp/evil.so"), "env.LD_PRELOAD is not a variable"),
    ("path", _env("PATH", "/tmp/evil"), "env.PATH is not a variable mcpnode sets"),
    ("pythonpath", _env("PYTHONPATH", "/tmp"), "env.PYTHONPATH is not a variable"),
    ("bash-env", _env("BASH_ENV", "/tmp/x"), "env.BASH_ENV is not a variable"),
    ("nccl-plugin", _env("NCCL_NET_PLUGIN", "evil"), "env.NCCL_NET_PLUGIN is not a variable"),
    ("name-with-eq", _env("A=B", "x"), "env.'A=B' is not an environment variable name"),
    ("name-with-nul", _env("A\x00B", "x"), "is not an environment variable name"),
    ("empty-name", _env("", "x"), "env.'' is not an environment variable name"),
    ("value-with-nul", _env("CUDA_VISIBLE_DEVICES", "a\x00b"), "control or non-ASCII"),
    ("value-newline", _env("NCCL_IB_HCA", "=mlx5_0:1\nLD_PRELOAD=x"), "control or non-ASCII"),
    ("uuid-newline", _set("uuid", "GPU-1\nExecStartPre=/bin/sh"), ".uuid is not a GPU or MIG"),
    ("uuid-escape", _set("uuid", "GPU-\x1b]0;owned\x07"), ".uuid is not a GPU or MIG UUID"),
    ("cpu-5000-digits", _set("slice_cpus", "1" * 5000), "slice_cpus is not a usable cpulist"),
    ("cpulist-1mib", _set("slice_cpus", "1," * (1 << 19)), "slice_cpus is not a usable"),
    ("cpu-past-max", _set("slice_cpus", "70000"), "slice_cpus is not a usable cpulist"),
    ("index-huge", _set("index", 10**19), ".index is not an integer in 0..1023"),
    ("address", _set("address", "../../etc"), ".address is not a PCI address"),
    (
        "node-cpulist-huge",
        lambda d: d["numa_nodes"][0].__setitem__("cpus", "0-65535," * 9000),
        "numa_nodes[0].cpus is not a usable cpulist",
    ),
    (
        "node-id-huge",
        lambda d: d["numa_nodes"][0].__setitem__("id", 1 << 40),
        "numa_nodes[0].id is not an integer in 0..1023",
    ),
]


@pytest.mark.parametrize(("change", "why"), [h[1:] for h in HOSTILE], ids=[h[0] for h in HOSTILE])
def test_a_hostile_field_is_refused_and_discovery_used(
    root: Path, change: Callable[[dict[str, Any]], None], why: str
) -> None:
    plant(root, change)
    source, notice = notice_of(root)
    assert source == "discovery"
    assert (notice is not None and notice.startswith(f"{MANIFEST_PATH}: placement.gpus[0]")) or (
        notice is not None and notice.startswith(f"{MANIFEST_PATH}: numa_nodes[0]")
    )
    assert why in (notice or "")
    assert "\n" not in (notice or "") and "\x1b" not in (notice or "")


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ('{"schema": "mcpnode.manifest/v' + "9" * 5000 + '"}', "is not mcpnode.manifest/v1"),
        ("[" * 100_000 + "]" * 100_000, "not JSON (nested too deeply)"),
        ('{"schema": "mcpnode.manifest/v1", "x": ' + "9" * 5000 + "}", "integer of 5000 digits"),
        ('{"schema": "mcpnode.manifest/v1", "x": NaN}', "NaN is not a number"),
        ('{"schema": "mcpnode.manifest/v1", "x": 1e999}', "out of range"),
        (b'{"schema": "\xff"}', "not JSON"),
    ],
    ids=["schema-5000-digits", "nesting-100k", "int-5000-digits", "nan", "inf", "not-utf8"],
)
def test_bombs_are_refused_by_the_parser(text: str | bytes, why: str) -> None:
    with pytest.raises(ManifestError, match=why.replace("(", r"\(").replace(")", r"\)")):
        parse_manifest(text)


def test_a_cpu_past_the_possible_range_is_refused(root: Path) -> None:
    (root / "sys/devices/system/cpu/possible").write_text("0-1\n")
    plant(root, _set("local_cpus", "0-3"))
    with Host(root) as host, pytest.raises(ManifestError, match="past the last possible cpu 1"):
        read_manifest(host)


# -- as the commands run it -----------------------------------------------------------------------


def _no_traceback(proc: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in proc.stderr, proc.stderr


def test_exec_dry_run_falls_back_with_one_line_and_prints_no_escape(root: Path) -> None:
    plant(root, _set("uuid", "GPU-\x1b[2J\x1b]0;owned\x07"))
    proc = run_process("exec", "--root", str(root), "--gpu", "0", "--dry-run", "--", "true")
    _no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    notices = [ln for ln in proc.stderr.splitlines() if ln.startswith("mcpnode:")]
    assert len(notices) == 1 and "placement.gpus[0].uuid is not a GPU or MIG UUID" in notices[0]
    assert "\x1b" not in proc.stdout + proc.stderr and "\x07" not in proc.stdout + proc.stderr
    assert "env: CUDA_VISIBLE_DEVICES=GPU-" in proc.stdout  # the discovered UUID


@placeroot.needs_machine
def test_exec_never_passes_a_planted_environment(root: Path, tmp_path: Path) -> None:
    """LD_PRELOAD and PATH from a manifest: the command runs with the discovered placement and
    the caller's own environment, and ld.so is never asked to load the planted object."""
    marker = tmp_path / "loaded"
    evil_bin = tmp_path / "bin"
    evil_bin.mkdir()
    (evil_bin / "python3").write_text(f"#!/bin/sh\ntouch {marker}\n")
    (evil_bin / "python3").chmod(0o755)

    def change(d: dict[str, Any]) -> None:
        placed_gpu(d)["env"].update({"LD_PRELOAD": "/nonexistent/evil.so", "PATH": str(evil_bin)})

    plant(root, change)
    child = "import json, os; print(json.dumps(dict(os.environ)))"
    proc = run_process("exec", "--root", str(root), "--gpu", "0", "--", "python3", "-c", child)
    _no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    env = json.loads(proc.stdout)
    assert "LD_PRELOAD" not in env and str(evil_bin) not in env["PATH"]
    assert env["CUDA_VISIBLE_DEVICES"].startswith("GPU-")
    assert not marker.exists()
    assert "ld.so" not in proc.stderr and "evil.so" not in proc.stderr


@placeroot.needs_machine
def test_a_slice_naming_an_offline_cpu_is_exit_69(root: Path) -> None:
    (root / "sys/devices/system/cpu/possible").write_text("0-3\n")
    plant(root, _set("slice_cpus", "1-3"))  # 2 and 3 exist but are offline (online 0-1)
    proc = run_process("exec", "--root", str(root), "--gpu", "0", "--", "true")
    _no_traceback(proc)
    assert proc.returncode == 69, proc.stderr
    assert "slice CPUs 2-3 are not online on this machine (online: 0-1)" in proc.stderr


@pytest.mark.parametrize(
    "change",
    [
        _env("LD_PRELOAD", "/tmp/evil.so"),
        _set("uuid", "GPU-1\nExecStartPre=/bin/touch /tmp/owned"),
        _env("NCCL_IB_HCA", "=mlx5_0:1\nExecStartPre=/bin/touch /tmp/owned"),
    ],
    ids=["ld-preload", "uuid-newline", "env-newline"],
)
def test_systemd_dropin_writes_nothing_planted(
    root: Path, change: Callable[[dict[str, Any]], None]
) -> None:
    plant(root, change)
    proc = run_process(
        "systemd-dropin", "--root", str(root), "--gpu", "0", "--unit", "vllm", "--write"
    )
    _no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    assert "discovering the topology instead" in proc.stderr
    text = (root / "etc/systemd/system/vllm.service.d/50-mcpnode-placement.conf").read_text()
    assert "ExecStartPre" not in text and "LD_PRELOAD" not in text
    assert [ln.split("=", 1)[0] for ln in text.splitlines() if not ln.startswith("#")] == [
        "[Service]",
        "CPUAffinity",
        "CPUAffinity",
        "NUMAPolicy",
        "NUMAMask",
        "NUMAMask",
        "Environment",
    ]


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze")
def test_every_hostile_value_is_refused_before_a_unit_file(tmp_path: Path) -> None:
    """Straight at the drop-in renderer (no reader in front): each hostile value is refused
    (UsageError, nothing to write); what passes, systemd-analyze verify reads as exactly the
    directives written — no extra one appears."""
    from mcpnode.errors import UsageError
    from mcpnode.placement.apply import Target
    from mcpnode.placement.plan import GpuPlacement
    from mcpnode.placement.systemd import render_dropin
    from mcpnode.topology.model import CpuSet, PciAddress

    def target(uuid: str, env: tuple[tuple[str, str], ...]) -> Target:
        gpu = GpuPlacement(
            0, uuid, PciAddress(0, 1, 0, 0), 0, "own", CpuSet({0, 1}), CpuSet({1}),
            CpuSet({0}), (), (), env,
        )  # fmt: skip
        return Target((gpu,), "slice", CpuSet({1}), "bind", CpuSet({0}), env)

    good = (("CUDA_VISIBLE_DEVICES", "GPU-1"),)
    hostile = [
        target("GPU-1\nExecStartPre=/bin/touch /tmp/owned", good),
        target("GPU-1\rExecStartPre=/bin/true", good),
        target("GPU-1", (("LD_PRELOAD", "/tmp/evil.so"),)),
        target("GPU-1", (("PATH", "/tmp"),)),
        target("GPU-1", (("CUDA_VISIBLE_DEVICES", 'x"\nExecStartPre=/bin/true\n"'),)),
        target("GPU-1", (("CUDA_VISIBLE_DEVICES", "a\x00b"),)),
        target("GPU-1", (("CUDA_VISIBLE_DEVICES", "a\x1b[31m"),)),
        target("GPU-1", (("A=B", "x"),)),
    ]
    for t in hostile:
        with pytest.raises(UsageError):
            render_dropin("vllm.service", t)
    units = tmp_path / "units"
    (units / "vllm.service.d").mkdir(parents=True)
    (units / "vllm.service").write_text("[Service]\nExecStart=/bin/true\n")
    text = render_dropin(
        "vllm.service", target("GPU-1", (("CUDA_VISIBLE_DEVICES", 'a "b" %n \\ c'),))
    )
    (units / "vllm.service.d" / "50-mcpnode-placement.conf").write_text(text)
    proc = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(units / "vllm.service")],
        capture_output=True,
        text=True,
        env={**os.environ, "SYSTEMD_UNIT_PATH": f"{units}:"},
        check=False,
    )
    assert (proc.returncode, proc.stderr) == (0, ""), proc.stderr
    directives = [ln.split("=", 1)[0] for ln in text.splitlines() if ln and ln[0] != "#"]
    assert "ExecStartPre" not in directives and directives.count("Environment") == 1


@needs_root
def test_apply_never_places_irqs_from_a_planted_manifest(irq_root: irqroot.IrqRoot) -> None:
    """A nobody-owned manifest in a 0777 /run/mcpnode that moves housekeeping onto CPU 5: apply
    says it does not trust it, discovers, and places the interrupts by discovery's partition."""
    r = irq_root
    assert run_cli("manifest", "publish", "--root", str(r.root))[0] == 0

    def change(d: dict[str, Any]) -> None:
        d["placement"]["housekeeping_cpus"] = "5"
        for gpu in d["placement"]["gpus"]:
            gpu["slice_cpus"] = ""

    plant(r.root, change)
    os.chown(manifest_file(r.root), NOBODY, NOBODY)
    os.chmod(manifest_file(r.root).parent, 0o777)
    code, _, err = run_cli("apply", "--profile", "inference-throughput", "--root", str(r.root))
    assert code == 0, err
    notices = [ln for ln in err.splitlines() if ln.startswith("mcpnode:")]
    assert len(notices) == 1 and "refusing to trust it" in notices[0], notices
    assert notices[0].endswith("discovering the topology instead")
    nvidia = next(i for i in r.irqs if i.name == "nvidia")
    assert r.affinity(nvidia.number) == "0,96"  # discovery's housekeeping, not the planted 5


def test_fleet_report_parses_other_hosts_copies_without_trust(root: Path, tmp_path: Path) -> None:
    """fleet-report reads copies wherever they were fetched to (no trust walk), with the same
    parser and bounds: a world-writable copy is compared, a hostile field is unreadable."""
    fleet = tmp_path / "fleet"
    fleet.mkdir()
    good = fleet / "gpu-01.json"
    shutil.copy(manifest_file(root), good)
    good.chmod(0o666)
    plant(root, _env("LD_PRELOAD", "/tmp/evil.so"))
    shutil.copy(manifest_file(root), fleet / "gpu-02.json")
    proc = run_process("fleet-report", str(fleet), "--format", "json")
    _no_traceback(proc)
    report = json.loads(proc.stdout)
    assert report["hosts"] == ["gpu-01"]
    bad = report["unreadable"]
    assert [u["host"] for u in bad] == ["gpu-02"]
    assert "env.LD_PRELOAD is not a variable mcpnode sets" in bad[0]["reason"]


def test_one_definition_of_the_path_and_one_parse() -> None:
    """grep: the manifest's path is defined once, and no module but the reader both names the
    manifest and parses JSON."""
    pkg = Path(__file__).resolve().parents[2] / "mcpnode"
    defs, parses = [], []
    for path in sorted(pkg.rglob("*.py")):
        text = path.read_text()
        rel = str(path.relative_to(pkg))
        if '/manifest.json"' in text:
            defs.append(rel)
        if "json.loads(" in text and ("MANIFEST_PATH" in text or "manifest.json" in text):
            parses.append(rel)
    assert defs == ["published.py"], defs
    assert parses == ["published.py"], parses
