"""`mcpnode systemd-dropin`: the text, its quoting, the atomic --write, the errors, and the real
`systemd-analyze verify` on a unit carrying the drop-in."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from mcpnode.errors import UsageError
from mcpnode.placement.apply import Target
from mcpnode.placement.systemd import DROPIN_NAME, quote_assignment, render_dropin, unit_name
from mcpnode.topology.model import CpuSet
from tests.support.tuningcli import run_cli

UUID = "GPU-3126d961-2891-5574-b3c1-87ce3c1e6eb9"
DROPIN = "etc/systemd/system/vllm.service.d/50-mcpnode-placement.conf"
EXPECTED = f"""\
# vllm.service: placement of GPU 0 ({UUID}, 0000:01:00.0).
# Written by mcpnode systemd-dropin (slice CPUs, preferred memory);
# regenerate rather than edit. Empty assignments reset what the unit set before.
[Service]
CPUAffinity=
CPUAffinity=1
NUMAPolicy=preferred
NUMAMask=
NUMAMask=0
Environment="CUDA_VISIBLE_DEVICES={UUID}" "CUDA_DEVICE_ORDER=PCI_BUS_ID" \
"NCCL_IB_HCA==mlx5_0:1" "NCCL_SOCKET_IFNAME==eth0" "UCX_NET_DEVICES=mlx5_0:1"
"""


@pytest.fixture
def root(placed_root: Path) -> Path:
    return placed_root


def test_prints_the_dropin(root: Path) -> None:
    code, out, err = run_cli(
        "systemd-dropin", "--gpu", "0", "--unit", "vllm", "--fresh", "--root", str(root)
    )
    assert (code, err) == (0, "")
    assert out == EXPECTED
    assert not (root / "etc").exists()


def test_node_scope_bind(root: Path) -> None:
    code, out, _ = run_cli(
        "systemd-dropin", "--gpu", UUID, "--unit", "vllm.service", "--scope", "node",
        "--membind", "--fresh", "--root", str(root),
    )  # fmt: skip
    assert code == 0
    assert "\nCPUAffinity=0-1\nNUMAPolicy=bind\n" in out


def test_write_is_atomic_and_matches_the_print(root: Path) -> None:
    args = ("systemd-dropin", "--gpu", "0", "--unit", "vllm", "--fresh", "--root", str(root))
    code, _, err = run_cli(*args, "--write")
    assert code == 0
    assert f"wrote /{DROPIN}" in err and "systemctl daemon-reload" in err
    path = root / DROPIN
    assert path.read_text() == EXPECTED
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert os.listdir(path.parent) == [DROPIN_NAME]  # no temporary left behind
    # Rewriting replaces it whole.
    assert run_cli(*args, "--scope", "node", "--write")[0] == 0
    assert "CPUAffinity=0-1\n" in path.read_text()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--gpu", "5", "--unit", "vllm"), "no GPU with that index"),
        (("--gpu", "GPU-nope", "--unit", "vllm"), "not a GPU index"),
        (("--gpu", "0", "--unit", "../../evil"), "not a valid systemd unit name"),
        (("--gpu", "0", "--unit", "x.socket"), ".service units only"),
        (("--gpu", "0", "--unit", ""), "not a valid systemd unit name"),
    ],
)
def test_bad_input_exits_64_and_writes_nothing(
    root: Path, args: tuple[str, ...], message: str
) -> None:
    code, out, err = run_cli("systemd-dropin", *args, "--fresh", "--root", str(root), "--write")
    assert (code, out) == (64, "")
    assert message in err
    assert not (root / "etc").exists()


@pytest.mark.parametrize(
    ("value", "quoted"),
    [
        ("plain", '"UCX_NET_DEVICES=plain"'),
        ("two words", '"UCX_NET_DEVICES=two words"'),
        ('say "hi"', '"UCX_NET_DEVICES=say \\"hi\\""'),
        ("back\\slash", '"UCX_NET_DEVICES=back\\\\slash"'),
        ("100%n", '"UCX_NET_DEVICES=100%%n"'),
        ("", '"UCX_NET_DEVICES="'),
        ("it's", '"UCX_NET_DEVICES=it\'s"'),
    ],
)
def test_quote_assignment(value: str, quoted: str) -> None:
    assert quote_assignment("UCX_NET_DEVICES", value) == quoted
    assert quote_assignment("NCCL_IB_HCA", "=mlx5_0:1") == '"NCCL_IB_HCA==mlx5_0:1"'


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("1A", "x"),
        ("A-B", "x"),
        ("", ""),
        ("CUDA_VISIBLE_DEVICES", "a\nb"),
        ("CUDA_VISIBLE_DEVICES", "a\x1b[31m"),
        ("CUDA_VISIBLE_DEVICES", "caf\u00e9"),
        ("LD_PRELOAD", "/tmp/evil.so"),  # never from a manifest, whoever wrote it
        ("PATH", "/tmp/evil"),
        ("NCCL_NET_PLUGIN", "evil"),  # dlopen()s libnccl-net-evil.so
        ("A", "plain"),
    ],
)
def test_quote_assignment_refuses(name: str, value: str) -> None:
    with pytest.raises(UsageError):
        quote_assignment(name, value)


@pytest.mark.parametrize(
    ("given", "unit"),
    [("vllm", "vllm.service"), ("vllm.service", "vllm.service"), ("a@1", "a@1.service"),
     ("x.y", "x.y.service")],
)  # fmt: skip
def test_unit_name(given: str, unit: str) -> None:
    assert unit_name(given) == unit


@pytest.mark.parametrize("given", ["a/b", "..", ".service", "a b", "x.timer", "a" * 250])
def test_unit_name_refuses(given: str) -> None:
    with pytest.raises(UsageError):
        unit_name(given)


# -- the real systemd-analyze ------------------------------------------------------------------

ANALYZE = shutil.which("systemd-analyze")
needs_analyze = pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze not installed")


def verify(unit_dir: Path, unit: str, dropin: str) -> subprocess.CompletedProcess[str]:
    """`systemd-analyze verify` of a unit in `unit_dir` with the drop-in beside it. The unit path
    ends in ':' so the built-in directories follow (the default target and its dependencies)."""
    (unit_dir / f"{unit}.d").mkdir(parents=True, exist_ok=True)
    (unit_dir / unit).write_text(
        f"[Unit]\nDescription=placed by mcpnode\n[Service]\nExecStart={shutil.which('true')}\n"
    )
    (unit_dir / f"{unit}.d" / DROPIN_NAME).write_text(dropin)
    assert ANALYZE is not None
    return subprocess.run(
        [ANALYZE, "verify", str(unit_dir / unit)],
        env={**os.environ, "SYSTEMD_UNIT_PATH": f"{unit_dir}:", "SYSTEMD_LOG_LEVEL": "notice"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@needs_analyze
def test_systemd_analyze_accepts_the_dropin(root: Path, tmp_path: Path) -> None:
    code, out, _ = run_cli(
        "systemd-dropin", "--gpu", "0", "--unit", "vllm", "--fresh", "--root", str(root)
    )
    assert code == 0
    proc = verify(tmp_path / "units", "vllm.service", out)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")


@needs_analyze
def test_systemd_analyze_accepts_hard_quoting(tmp_path: Path) -> None:
    """Values with spaces, quotes, backslashes and '%' pass without a warning (a stray '%' would
    be a specifier, an unbalanced quote a syntax error)."""
    env = (
        ("CUDA_VISIBLE_DEVICES", 'x "y" z'),
        ("UCX_NET_DEVICES", "back\\slash it's"),
        ("NCCL_SOCKET_IFNAME", "100%n"),
        ("NCCL_IB_HCA", "=mlx5_0:1"),
    )
    target = Target((), "node", CpuSet({0, 1}), "bind", CpuSet({0}), env)
    proc = verify(tmp_path / "units", "tricky.service", render_dropin("tricky.service", target))
    assert (proc.returncode, proc.stderr) == (0, "")


@needs_analyze
def test_systemd_analyze_reads_the_dropin(tmp_path: Path) -> None:
    """The control: a broken drop-in at the same place is reported, so the passes above mean
    the drop-in was read and accepted, not skipped."""
    proc = verify(tmp_path / "units", "broken.service", "[Service]\nNUMAPolicy=sideways\n")
    assert f"{DROPIN_NAME}:2: Invalid NUMA policy type" in proc.stderr
