"""apply → verify → drift → rollback of `tests/profiles/net-test.toml` on the real kernel,
harmlessly.

The profile is test-only, so it lives under tests/ (the wheel ships `profiles/` alone) and every
run names its directory with `--profiles-dir`.

The whole run happens in a child started by `unshare --net --mount`:

- the fresh **network namespace** gets its own copy of every per-netns `net.*` sysctl, so
  the writes never reach this machine's own network stack (net-test holds only such keys; a
  key that is global to the init netns is simply absent in the child);
- the fresh **mount namespace** (private propagation) gets tmpfs over `/var/lib`,
  `/etc/sysctl.d`, `/run` and `/etc/mcpnode` (when present), so the journal
  (`/var/lib/mcpnode/tuning-journal.json`), the persisted `/etc/sysctl.d/90-mcpnode.conf` and
  any local profile overrides live and die with the child. The child refuses to run mcpnode
  unless `/var/lib` and `/etc/sysctl.d` are really tmpfs in its mount namespace.

What a new netns starts with (observed on 6.18, see host-facts.md §2.2):
- `net.core.somaxconn`: the kernel default 4096, not the host's value;
- `net.ipv4.tcp_congestion_control`: *inherited* from init_net at creation, so on a host
  that already runs bbr the profile would have nothing to do. The child therefore first sets
  `reno` (built in everywhere, always allowed in a child netns) so apply must really change it;
- setting an algorithm outside `tcp_allowed_congestion_control` from a child netns fails with
  EPERM ("only init netns can set default to a restricted algorithm"), e.g. `cubic` on a host
  whose default is bbr. The profile's expected winner is computed from what this kernel has.

Outside the namespaces, the test reads the host's values (read-only) before and after and
requires them unchanged, along with the host's own journal and sysctl.d file.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
TEST_PROFILES = REPO / "tests" / "profiles"

KEYS = (
    "net.core.somaxconn",
    "net.ipv4.tcp_congestion_control",
    "net.ipv4.tcp_notsent_lowat",
    "net.ipv4.ip_local_port_range",
)
JOURNAL = "/var/lib/mcpnode/tuning-journal.json"
PERSISTED = "/etc/sysctl.d/90-mcpnode.conf"


def proc_path(key: str) -> Path:
    return Path("/proc/sys", *key.split("."))


def read_sysctl(key: str) -> str:
    """Whitespace-normalised, as `sysctl -n` users compare it (the kernel uses TABs)."""
    return " ".join(proc_path(key).read_text().split())


def host_file_state(path: str) -> tuple[bool, int | None]:
    p = Path(path)
    return (p.exists(), p.stat().st_mtime_ns if p.exists() else None)


def module_loadable(module: str) -> bool:
    """True when this kernel has loadable modules and a tcp_bbr.ko* under /lib/modules."""
    if not Path("/proc/modules").exists():
        return False  # CONFIG_MODULES=n: only built-in algorithms exist
    moddir = Path("/lib/modules", os.uname().release)
    return moddir.is_dir() and any(moddir.rglob(f"{module}.ko*"))


def expected_congestion_control() -> str:
    """net-test's preference {prefer = ["bbr3", "bbr"], fallback = "cubic", load = [tcp_bbr]}
    resolved against what this kernel offers."""
    available = read_sysctl("net.ipv4.tcp_available_congestion_control").split()
    if "bbr3" in available:
        return "bbr3"
    if "bbr" in available or module_loadable("tcp_bbr"):
        return "bbr"
    return "cubic"


# Runs as the child of `unshare --net --mount`; argv[1] is a JSON object of parameters.
# It prints one JSON object on its last line of stdout, whatever happens.
CHILD = r"""
import json, os, subprocess, sys
from pathlib import Path

params = json.loads(sys.argv[1])
keys, python, repo = params["keys"], params["python"], params["repo"]
profiles = ["--profiles-dir", params["profiles_dir"]]
sys.path.insert(0, repo)
from tests.support.nschild import private_tmpfs, set_sysctl, sysctl
report = {"steps": {}, "errors": []}

def values():
    return {k: sysctl(k) for k in keys}

def run(name, *args):
    proc = subprocess.run(
        [python, "-m", "mcpnode", *args], cwd=repo, capture_output=True, text=True,
        timeout=120, check=False,
    )
    report["steps"][name] = {
        "argv": list(args), "rc": proc.returncode, "stdout": proc.stdout[-4000:],
        "stderr": proc.stderr[-4000:], "values": values(),
        "journal": Path(params["journal"]).exists(),
        "persisted": Path(params["persisted"]).exists(),
        "persisted_text": (
            Path(params["persisted"]).read_text() if Path(params["persisted"]).exists() else ""
        ),
    }
    return proc

try:
    private_tmpfs(params["tmpfs_required"], params["tmpfs_optional"])
    report["netns_initial"] = values()
    # A new netns inherits init_net's congestion control: start from reno so apply must work.
    set_sysctl("net.ipv4.tcp_congestion_control", "reno")
    report["originals"] = values()
    run("dry_run", "apply", "--profile", "net-test", *profiles, "--root", "/", "--dry-run",
        "--format", "json")
    run("apply", "apply", "--profile", "net-test", *profiles, "--root", "/", "--persist")
    run("verify", "verify", "--profile", "net-test", *profiles)
    set_sysctl("net.core.somaxconn", "1024")
    run("verify_drift", "verify", "--profile", "net-test", *profiles)
    run("rollback", "rollback")
except Exception as err:  # reported to the parent, which fails the test with it
    report["errors"].append(f"{type(err).__name__}: {err}")
print(json.dumps(report))
"""


def skip_reason() -> str | None:
    if sys.platform != "linux":
        return "needs Linux network namespaces"
    if os.geteuid() != 0:
        return "needs root: unshare --net --mount and /proc/sys writes inside the namespace"
    for tool in ("unshare", "mount"):
        if shutil.which(tool) is None:
            return f"`{tool}` (util-linux) is not installed"
    if importlib.util.find_spec("mcpnode.tuning") is None:
        return "the tuning engine (mcpnode.tuning) is not built yet"
    probe = subprocess.run(
        ["unshare", "--net", "--mount", "--", "true"], capture_output=True, text=True, check=False
    )
    if probe.returncode != 0:
        return f"cannot create namespaces here: {probe.stderr.strip() or probe.returncode}"
    return None


pytestmark = pytest.mark.live


@pytest.fixture(scope="module")
def run_in_namespaces() -> dict[str, Any]:
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    host_before = {k: read_sysctl(k) for k in KEYS}
    files_before = {p: host_file_state(p) for p in (JOURNAL, PERSISTED)}
    params = {
        "keys": list(KEYS),
        "python": sys.executable,
        "repo": str(REPO),
        "profiles_dir": str(TEST_PROFILES),
        "journal": JOURNAL,
        "persisted": PERSISTED,
        # Where mcpnode writes (journal, sysctl.d): no run without a tmpfs over them.
        "tmpfs_required": ["/var/lib", "/etc/sysctl.d"],
        # Anything else it might touch, and local profiles that could shadow net-test.
        "tmpfs_optional": ["/run", "/etc/mcpnode"],
    }
    proc = subprocess.run(
        [
            "unshare",
            "--net",
            "--mount",
            "--propagation",
            "private",
            "--",
            sys.executable,
            "-c",
            CHILD,
            json.dumps(params),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    host_after = {k: read_sysctl(k) for k in KEYS}
    files_after = {p: host_file_state(p) for p in (JOURNAL, PERSISTED)}
    assert proc.returncode == 0, f"namespace child failed: {proc.stderr}"
    report: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    report["host_before"], report["host_after"] = host_before, host_after
    report["files_before"], report["files_after"] = files_before, files_after
    assert not report["errors"], f"{report['errors']}\n{json.dumps(report['steps'], indent=1)}"
    return report


def step(report: dict[str, Any], name: str) -> dict[str, Any]:
    result: dict[str, Any] = report["steps"][name]
    return result


def describe(result: dict[str, Any]) -> str:
    return f"rc={result['rc']}\nstdout:\n{result['stdout']}\nstderr:\n{result['stderr']}"


def test_this_machine_is_untouched(run_in_namespaces: dict[str, Any]) -> None:
    report = run_in_namespaces
    assert report["host_after"] == report["host_before"]
    assert report["files_after"] == report["files_before"]


def test_fresh_netns_starts_from_kernel_defaults(run_in_namespaces: dict[str, Any]) -> None:
    initial = run_in_namespaces["netns_initial"]
    # somaxconn is not inherited: a new netns always gets the compiled-in default.
    assert initial["net.core.somaxconn"] in {"4096", "128"}
    # tcp_congestion_control is inherited from init_net at netns creation (observed on 6.18);
    # kernels that do not inherit start from the compiled-in default.
    host_cc = run_in_namespaces["host_before"]["net.ipv4.tcp_congestion_control"]
    assert initial["net.ipv4.tcp_congestion_control"] in {host_cc, "cubic"}
    assert run_in_namespaces["originals"]["net.ipv4.tcp_congestion_control"] == "reno"


def test_dry_run_changes_nothing(run_in_namespaces: dict[str, Any]) -> None:
    result = step(run_in_namespaces, "dry_run")
    assert result["rc"] == 0, describe(result)
    assert result["values"] == run_in_namespaces["originals"]
    assert not result["journal"] and not result["persisted"]
    plan = json.loads(result["stdout"])
    assert plan["dry_run"] is True and plan["profile"] == "net-test"
    assert plan["writes"] == []
    actions = {item["key"]: (item["action"], item["desired"]) for item in plan["items"]}
    assert actions == {
        "net.core.somaxconn": ("set", "65535"),
        "net.ipv4.tcp_congestion_control": ("set", expected_congestion_control()),
        "net.ipv4.tcp_notsent_lowat": ("set", "131072"),
        "net.ipv4.ip_local_port_range": ("set", "32768 65535"),
    }


def test_apply_sets_what_the_kernel_reports(run_in_namespaces: dict[str, Any]) -> None:
    result = step(run_in_namespaces, "apply")
    assert result["rc"] == 0, describe(result)
    assert result["values"] == {
        "net.core.somaxconn": "65535",
        "net.ipv4.tcp_congestion_control": expected_congestion_control(),
        "net.ipv4.tcp_notsent_lowat": "131072",
        "net.ipv4.ip_local_port_range": "32768 65535",
    }
    assert result["journal"], "apply wrote no journal under /var/lib/mcpnode"
    assert result["persisted"], "--persist wrote no /etc/sysctl.d/90-mcpnode.conf"
    persisted = result["persisted_text"]
    assert "net-test" in persisted
    assert "net.core.somaxconn" in persisted and "65535" in persisted


def test_verify_passes_after_apply(run_in_namespaces: dict[str, Any]) -> None:
    result = step(run_in_namespaces, "verify")
    assert result["rc"] == 0, describe(result)


def test_verify_reports_drift(run_in_namespaces: dict[str, Any]) -> None:
    result = step(run_in_namespaces, "verify_drift")
    assert result["rc"] == 1, describe(result)
    assert "net.core.somaxconn" in result["stdout"] + result["stderr"]
    assert result["values"]["net.core.somaxconn"] == "1024"


def test_rollback_restores_the_originals(run_in_namespaces: dict[str, Any]) -> None:
    result = step(run_in_namespaces, "rollback")
    assert result["rc"] == 0, describe(result)
    assert result["values"] == run_in_namespaces["originals"]
    assert not result["persisted"], "rollback left /etc/sysctl.d/90-mcpnode.conf behind"
