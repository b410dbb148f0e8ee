"""Rough edges a first run meets, each as the user meets it (a real `mcpnode` child process):
`expect --format json`; `fleet-report` naming its DIR, not a `--root` it lacks; `topo --color`
on both the fast path and click's; `profiles explain` of a key nothing knows; `apply --dry-run
--root X` saying the root lacks a key, not the kernel."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.tuningcli import run_process

HOSTS = Path(__file__).resolve().parents[1] / "fixtures" / "hosts"
HGX = str(HOSTS / "hgx-h100-8gpu-8nic")
GREEN_NV18 = "\033[32mNV18\033[0m"


def test_expect_prints_json() -> None:
    toml = run_process("expect", "--root", HGX)
    got = run_process("expect", "--root", HGX, "--format", "json")
    assert got.returncode == 0, got.stderr
    doc = json.loads(got.stdout)
    assert doc["schema"] == "mcpnode.expect/v1" and doc["source"] == "hgx-h100-node01"
    assert doc["expect"]["gpu_count"] == 8 and doc["expect"]["nvlinks_per_gpu"] == 18
    # the same keys and values as the TOML table the audit reads
    for key, value in doc["expect"].items():
        assert f"{key} = {json.dumps(value)}" in toml.stdout


def test_expect_json_is_not_written_as_the_expect_file(tmp_path: Path) -> None:
    out = tmp_path / "e.toml"
    got = run_process("expect", "--root", HGX, "--format", "json", "--write", str(out))
    assert got.returncode == 64 and not out.exists()
    assert "--write writes the [expect] TOML file" in got.stderr


def test_fleet_report_names_its_dir(tmp_path: Path) -> None:
    got = run_process("fleet-report", str(tmp_path / "nonexistent"))
    assert got.returncode == 2
    assert (
        got.stderr
        == f"mcpnode: fleet-report DIR {tmp_path}/nonexistent: no such file or directory\n"
    )
    assert "--root" not in got.stderr


@pytest.mark.parametrize("fast", [True, False], ids=["fast-path", "click"])
def test_topo_takes_color_as_audit_does(fast: bool) -> None:
    # `--tree` after --color=... keeps the fast path; an option it does not serve (--p2p)
    # would hand it to click, which is the other case: the group's --color goes to click too.
    args = (
        ("topo", "--root", HGX, "--color", "always")
        if fast
        else ("--color", "always", "topo", "--root", HGX)
    )
    got = run_process(*args)
    assert got.returncode == 0, got.stderr
    gpu0 = got.stdout.splitlines()[1].split("\t")
    assert gpu0[0] == "GPU0" and gpu0[2] == GREEN_NV18
    assert "\033[31mSYS\033[0m" in got.stdout
    never = run_process("topo", "--root", HGX, "--color", "never")
    assert "\033[" not in never.stdout
    plain = run_process("topo", "--root", HGX)  # not a terminal: auto means none
    assert plain.stdout == never.stdout
    bad = run_process("topo", "--root", HGX, "--color", "sometimes")
    assert bad.returncode == 64


def test_profiles_explain_of_an_unknown_key_is_a_usage_error() -> None:
    got = run_process("profiles", "explain", "no.such.key", "--root", HGX)
    assert got.returncode == 64 and got.stdout == ""
    assert got.stderr.count("\n") == 1
    assert "unknown key 'no.such.key'" in got.stderr
    # a key the root lacks but mcpnode knows is still explained
    known = run_process("profiles", "explain", "vm.swappiness", "--root", HGX)
    assert known.returncode == 0 and "kernel default: 60" in known.stdout
    assert "not in this root" in known.stdout


def test_apply_dry_run_says_the_root_lacks_the_key() -> None:
    got = run_process("apply", "--dry-run", "--root", HGX, "--profile", "base")
    assert got.returncode == 0, got.stderr
    assert f"no /proc/sys/vm/swappiness in the root {HGX}" in got.stdout
    assert "on this kernel" not in got.stdout


@pytest.mark.parametrize(
    "argv",
    [
        ("topo", "--format", "yaml"),
        ("nosuch",),
        ("audit", "--bogus"),
        ("exec", "--gpu", "0"),
        ("audit", "--status", "FAIL,NOPE"),
    ],
)
def test_a_command_line_mistake_is_one_line_on_stderr(argv: tuple[str, ...]) -> None:
    got = run_process(*argv)
    assert got.returncode == 64 and got.stdout == ""
    assert got.stderr.count("\n") == 1, got.stderr  # as the README promises
    assert got.stderr.startswith("mcpnode") and "--help` lists the options" in got.stderr
