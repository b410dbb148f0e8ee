"""The tuning commands as operators use them: profiles list/show/explain, apply, verify,
rollback; exit codes through main()."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.tuningcli import run_cli, run_process
from tests.support.tuningroot import put


@pytest.fixture
def dirs(tuning_root: Path, tuning_profiles: Path) -> tuple[str, str]:
    root = tuning_root
    profiles = tuning_profiles
    return str(root), str(profiles)


def test_help_lists_the_tuning_commands() -> None:
    proc = run_process("--help")
    assert proc.returncode == 0
    for command in ("apply", "verify", "rollback", "profiles"):
        assert command in proc.stdout
    proc = run_process("profiles", "--help")
    assert all(c in proc.stdout for c in ("list", "show", "explain"))


def test_profiles_list(dirs: tuple[str, str]) -> None:
    root, profiles = dirs
    put(Path(root), "etc/mcpnode/profiles/site.toml", '[profile]\nsummary = "ours"\n')
    code, out, _ = run_cli("profiles", "list", "--root", root, "--profiles-dir", profiles)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["NAME", "ORIGIN", "INCLUDES", "SUMMARY"]
    assert lines[1].split()[:3] == ["base", "system", "-"]
    assert lines[2].split()[:3] == ["latency", "system", "base"]
    assert lines[3].split()[:2] == ["site", "local"]
    code, out, _ = run_cli(
        "profiles", "list", "--root", root, "--profiles-dir", profiles, "--format", "json"
    )
    doc = json.loads(out)
    assert doc["schema"] == "mcpnode.tuning-profiles/v1"
    assert [p["name"] for p in doc["profiles"]] == ["base", "latency", "site"]


def test_profiles_show_merges_includes(dirs: tuple[str, str]) -> None:
    root, profiles = dirs
    code, out, _ = run_cli(
        "profiles", "show", "latency", "--root", root, "--profiles-dir", profiles
    )
    assert code == 0
    assert "merged: base -> latency" in out
    assert "vm.max_map_count = >= 1048576    (from " in out
    assert "    # Kernel default 60; keep the page cache." in out
    assert "net.ipv4.tcp_congestion_control = bbr > cubic" in out


def test_profiles_show_unknown_is_an_error(dirs: tuple[str, str]) -> None:
    root, profiles = dirs
    code, _, err = run_cli("profiles", "show", "nope", "--root", root, "--profiles-dir", profiles)
    assert code == 64 and err.startswith("mcpnode: unknown profile 'nope' (profiles: ")


def test_explain_net_key_says_per_netns(dirs: tuple[str, str]) -> None:
    root, profiles = dirs
    code, out, _ = run_cli(
        "profiles", "explain", "net.core.somaxconn", "--root", root, "--profiles-dir", profiles
    )
    assert code == 0
    assert "current: 4096" in out
    assert "kernel default: 4096" in out
    assert f"65535  in {profiles}/base.toml, used by: base\n" in out
    assert f"8192  in {profiles}/latency.toml, used by: latency\n" in out
    assert "per network namespace: host tuning does not reach pods" in out


def test_explain_numa_balancing_needs_cap_sys_admin(dirs: tuple[str, str]) -> None:
    root, profiles = dirs
    code, out, _ = run_cli(
        "profiles", "explain", "kernel.numa_balancing", "--root", root, "--profiles-dir", profiles
    )
    assert code == 0
    assert "CAP_SYS_ADMIN" in out and "network namespaces" not in out


def test_explain_global_net_key_and_missing_key(dirs: tuple[str, str]) -> None:
    root, profiles = dirs
    code, out, _ = run_cli(
        "profiles", "explain", "net.core.netdev_max_backlog", "--root", root,
        "--profiles-dir", profiles, "--format", "json",
    )  # fmt: skip
    doc = json.loads(out)["explain"]
    assert code == 0 and doc["netns"].startswith("global")
    assert doc["current"] is None and "not in this root" in doc["current_note"]
    code, _, err = run_cli("profiles", "explain", "../etc/passwd", "--root", root)
    assert code == 2 and "'../etc/passwd'" in err


def test_apply_json_golden(dirs: tuple[str, str]) -> None:
    root, profiles = dirs
    code, out, _ = run_cli(
        "apply", "--profile", "base", "--dry-run", "--format", "json", "--root", root,
        "--profiles-dir", profiles,
    )  # fmt: skip
    assert code == 0
    doc = json.loads(out)
    assert doc["journal"].endswith("/var/lib/mcpnode/tuning-journal.json")
    doc["journal"] = "JOURNAL"
    source = f"{profiles}/base.toml"
    assert doc == {
        "schema": "mcpnode.tuning-apply/v1",
        "profile": "base",
        "dry_run": True,
        "counts": {"set": 3, "ok": 0, "unsupported": 0, "needs-privilege": 0, "skipped": 0},
        "items": [
            {
                "key": "vm.swappiness",
                "path": "/proc/sys/vm/swappiness",
                "rule": "10",
                "current": "60",
                "desired": "10",
                "action": "set",
                "reason": "60 -> 10",
                "source": source,
            },
            {
                "key": "vm.max_map_count",
                "path": "/proc/sys/vm/max_map_count",
                "rule": ">= 1048576",
                "current": "65530",
                "desired": "1048576",
                "action": "set",
                "reason": "65530 < minimum 1048576",
                "source": source,
            },
            {
                "key": "net.core.somaxconn",
                "path": "/proc/sys/net/core/somaxconn",
                "rule": "65535",
                "current": "4096",
                "desired": "65535",
                "action": "set",
                "reason": "4096 -> 65535",
                "source": source,
            },
        ],
        "restores": [],
        "recovered": [],
        "loads": [],
        "writes": [],
        "managed": [],
        "persist": None,
        "journal": "JOURNAL",
        "notes": [],
    }


def test_default_profile_is_base(dirs: tuple[str, str]) -> None:
    root, profiles = dirs
    code, out, _ = run_cli("apply", "--dry-run", "--root", root, "--profiles-dir", profiles)
    assert code == 0 and out.startswith("plan: profile base")


def test_apply_then_rollback_as_real_processes(dirs: tuple[str, str]) -> None:
    root, profiles = dirs
    proc = run_process("apply", "--profile", "base", "--root", root, "--profiles-dir", profiles)
    assert proc.returncode == 0, proc.stderr
    assert "3 write(s)" in proc.stdout
    events = [json.loads(line) for line in proc.stderr.splitlines()]  # stderr is not a TTY
    assert {e["key"] for e in events} == {"vm.swappiness", "vm.max_map_count", "net.core.somaxconn"}
    proc = run_process("verify", "--profile", "base", "--root", root, "--profiles-dir", profiles)
    assert proc.returncode == 0 and "no drift" in proc.stdout
    proc = run_process("rollback", "--root", root, "--format", "json")
    assert proc.returncode == 0
    doc = json.loads(proc.stdout)
    assert doc["schema"] == "mcpnode.tuning-rollback/v1" and doc["profile"] == "base"
    assert [o["result"] for o in doc["outcomes"]] == ["restored"] * 3
