"""The Ansible role (ansible/roles/mcpnode, docs/ansible.md), run for real: ansible-lint, the
playbooks' syntax, and ansible-playbook against localhost (connection local) into a temporary
machine root, a copy of the recorded HGX H100 host. The role's every path is under
mcpnode_root, and mcpnode's --root is the same directory, so nothing touches this machine's
/etc, /opt or systemd.

One wheel is built from this checkout and one venv installed (into the first root); the runs
build on each other, in this order:

  1. site.yml on a fresh root: install, gate (passes), config, units, facts, manifest
  2. site.yml again: changed=0, the gate now checking tuning compliance too
  3. site.yml --tags mcpnode_service with another venv path: the drop-ins
  4. site.yml --tags mcpnode_config with a bad value: `validate:` keeps the old file
  5. preflight.yml on a root with a vulnerable container toolkit: the host fails
  6. preflight.yml there with mcpnode_audit_fail_on=never: reported, not failed
  7. report.yml over the collected manifest and two more hosts, one an outlier
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from mcpnode.agent.config import parse_config
from mcpnode.placement.manifest import content_hash, dumps, parse_manifest
from tests.support import auditroot

REPO = Path(__file__).resolve().parents[2]
ANSIBLE = REPO / "ansible"
BIN = Path(sys.executable).parent


def _tool(name: str) -> str | None:
    """The tool beside this interpreter (the dev venv), else on PATH."""
    here = BIN / name
    return str(here) if here.exists() else shutil.which(name)


PLAYBOOK = _tool("ansible-playbook")
LINT = _tool("ansible-lint")

if PLAYBOOK is None:
    pytest.skip(
        "ansible-playbook not installed (pip install -e '.[dev]' brings ansible-core)",
        allow_module_level=True,
    )

# The configuration the runs render: one value of each kind, and a regular expression whose
# backslash must survive TOML's escaping.
CMDLINE = r"vllm\.entrypoints|vllm serve"
CONFIG_VARS: dict[str, Any] = {
    "mcpnode_profile": "base",
    "mcpnode_drift_interval": 2.5,
    "mcpnode_drift_mode": "report",
    "mcpnode_placement_housekeeping": "first-core",
    "mcpnode_autopin_enabled": True,
    "mcpnode_autopin_rules": [
        {"name": "vllm", "exe": "python3", "cmdline": CMDLINE},
        {"name": "triton", "unit": "triton.service"},
    ],
    "mcpnode_metrics_listen": "127.0.0.1:9900",
    "mcpnode_export_kinds": ["prom", "ansible"],
    # Debian's node_exporter directory: the agent writes there, the unit gets a drop-in for it.
    "mcpnode_export_prom_dir": "/var/lib/prometheus/node-exporter",
    "mcpnode_log_format": "json",
}

RECAP = re.compile(
    r"^localhost\s*:\s*ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)\s+unreachable=\d+\s+"
    r"failed=(?P<failed>\d+)",
    re.MULTILINE,
)


@dataclass(frozen=True)
class Run:
    rc: int
    out: str
    seconds: float

    @property
    def text(self) -> str:
        """The output with every run of whitespace made one space: the YAML result format
        (ansible.cfg) folds long messages over several lines."""
        return " ".join(self.out.split())

    def recap(self) -> dict[str, int]:
        m = RECAP.search(self.out)
        assert m, f"no PLAY RECAP in:\n{self.out[-3000:]}"
        return {k: int(v) for k, v in m.groupdict().items()}


class Ansible:
    """ansible-playbook with this test's settings: the repo's ansible.cfg, Ansible's own state
    in a temporary directory, this interpreter on the "host", no become (no sudo needed: the
    root is a temporary directory)."""

    def __init__(self, work: Path, wheel: Path) -> None:
        self.work = work
        self.wheel = wheel
        self.fleet = work / "fleet"
        home = work / "ansible-home"
        self.env = {
            **_clean_env(),
            "ANSIBLE_CONFIG": str(ANSIBLE / "ansible.cfg"),
            "ANSIBLE_HOME": str(home),
            "ANSIBLE_LOCAL_TEMP": str(home / "tmp"),
            "ANSIBLE_REMOTE_TEMP": str(home / "tmp"),
            "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_FORCE_COLOR": "0",
        }
        self.count = 0

    def play(self, playbook: str, root: Path | None, *args: str, **extra: Any) -> Run:
        self.count += 1
        variables = {
            "ansible_python_interpreter": sys.executable,
            "ansible_become": False,
            "mcpnode_python": sys.executable,
            "mcpnode_wheel": str(self.wheel),
            "mcpnode_fleet_dir": str(self.fleet),
            **({} if root is None else {"mcpnode_root": str(root)}),
            **CONFIG_VARS,
            **extra,
        }
        vars_file = self.work / f"vars-{self.count}.json"
        vars_file.write_text(json.dumps(variables))
        argv = [PLAYBOOK or "ansible-playbook", "-i", "localhost,", "-c", "local"]
        argv += [str(ANSIBLE / playbook), "-e", f"@{vars_file}", *args]
        start = time.monotonic()
        proc = subprocess.run(
            argv, env=self.env, cwd=self.work, capture_output=True, text=True, timeout=600
        )
        run = Run(proc.returncode, proc.stdout + proc.stderr, time.monotonic() - start)
        print(f"ansible run {self.count} ({playbook} {' '.join(args)}): {run.seconds:.1f} s")
        return run


def _clean_env() -> dict[str, str]:
    """This process's environment without ANSIBLE_* settings that would change the runs."""
    return {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}


def _ok(run: Run) -> Run:
    assert run.rc == 0, run.out[-6000:]
    assert run.recap()["failed"] == 0
    return run


# -- lint and syntax: no wheel needed ---------------------------------------------------------


def test_ansible_lint_production() -> None:
    if LINT is None:
        pytest.skip("ansible-lint not installed (pip install -e '.[dev]')")
    # From ansible/, so that ansible/.ansible-lint (profile production, exclusions) applies.
    proc = subprocess.run(
        [LINT, "--offline", "--nocolor"],
        cwd=ANSIBLE,
        env={**_clean_env(), "ANSIBLE_CONFIG": str(ANSIBLE / "ansible.cfg")},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Profile 'production' was required, and it passed" in proc.stdout + proc.stderr


@pytest.mark.parametrize("playbook", ["site.yml", "preflight.yml", "report.yml"])
def test_syntax(playbook: str) -> None:
    proc = subprocess.run(
        [PLAYBOOK or "", "--syntax-check", "-i", "localhost,", str(ANSIBLE / playbook)],
        env={**_clean_env(), "ANSIBLE_CONFIG": str(ANSIBLE / "ansible.cfg")},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


# -- the real runs ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ansible(built_wheel: tuple[Path, str], tmp_path_factory: pytest.TempPathFactory) -> Ansible:
    """The wheel of this checkout as a release would ship it (units, profiles, man pages and
    completion scripts as data files; tests/support/wheelbuild.py), shared with test_wheel.py."""
    return Ansible(tmp_path_factory.mktemp("ansible"), built_wheel[0])


@dataclass(frozen=True)
class Site:
    root: Path
    first: Run
    second: Run


@pytest.fixture(scope="module")
def site(ansible: Ansible, tmp_path_factory: pytest.TempPathFactory) -> Site:
    """Runs 1 and 2 on a copy of the HGX H100 host (symlinks kept) with the audit's healthy
    overlay: modules, cgroup v2, and the base profile's sysctl values, so the gate passes with
    tuning compliance checked."""
    root = auditroot.build(tmp_path_factory.mktemp("site"), auditroot.HGX)
    first = ansible.play("site.yml", root)
    second = ansible.play("site.yml", root)
    return Site(root, first, second)


def test_first_run_installs_and_configures(site: Site, ansible: Ansible) -> None:
    _ok(site.first)
    assert site.first.recap()["changed"] > 0
    out = site.first.text
    # The gate ran, passed, and left tuning.drift out: no agent configuration existed yet.
    assert re.search(r"mcpnode audit: \d+ checks: \d+ PASS, 0 FAIL", out), out
    assert "tuning.drift not gated: no agent configuration yet" in out
    # Systemd was not asked: the root is not /.
    assert f"not enabled or started: mcpnode_root is {site.root}, not /" in out

    venv = site.root / "opt/mcpnode"
    version = subprocess.run(
        [str(venv / "bin/mcpnode"), "--version"], capture_output=True, text=True, check=True
    )
    assert version.stdout.strip() == f"mcpnode, version {ansible.wheel.name.split('-')[1]}"

    config = parse_config((site.root / "etc/mcpnode/mcpnode.toml").read_text())
    assert config.profile == "base"
    assert (config.drift_interval, config.drift_mode) == (2.5, "report")
    assert config.autopin and [r.name for r in config.pin_rules] == ["vllm", "triton"]
    vllm = config.pin_rules[0]
    assert vllm.exe == "python3" and vllm.cmdline is not None
    assert vllm.cmdline.pattern == CMDLINE
    assert config.pin_rules[1].unit == "triton.service"
    assert config.metrics_listen == "127.0.0.1:9900"
    assert config.export_kinds == ("prom", "ansible")
    assert config.export_dir("prom") == "/var/lib/prometheus/node-exporter"
    assert config.log_format == "json"

    units = site.root / "etc/systemd/system"
    for unit in ("mcpnode.service", "mcpnode-audit.service"):
        shipped = venv / "share/mcpnode/systemd" / unit
        assert (units / unit).read_bytes() == shipped.read_bytes()
    assert not (units / "mcpnode.service.d/10-venv.conf").exists()  # the shipped venv path
    exports = (units / "mcpnode.service.d/30-export-dirs.conf").read_text()
    assert "\n[Service]\nReadWritePaths=-/var/lib/prometheus/node-exporter\n" in exports


def test_command_man_pages_and_completion_linked(site: Site) -> None:
    """Links under /usr/local into the venv, as the booted host resolves them: the command on
    PATH (the completion scripts call it), one man page per command, three shells."""
    local = site.root / "usr/local"
    assert (local / "bin/mcpnode").readlink() == Path("/opt/mcpnode/bin/mcpnode")
    for link in (
        "share/bash-completion/completions/mcpnode",
        "share/zsh/site-functions/_mcpnode",
        "share/fish/vendor_completions.d/mcpnode.fish",
    ):
        target = (local / link).readlink()
        assert target == Path("/opt/mcpnode") / link
        assert (site.root / target.relative_to("/")).is_file()
    pages = sorted(p.name for p in (local / "share/man/man1").iterdir())
    assert "mcpnode.1" in pages and "mcpnode-export.1" in pages and len(pages) > 20
    shipped = sorted(p.name for p in (site.root / "opt/mcpnode/share/man/man1").iterdir())
    assert pages == shipped


def test_facts_written_and_read_back(site: Site) -> None:
    facts = json.loads((site.root / "etc/ansible/facts.d/mcpnode.fact").read_text())
    assert facts["schema"] == "mcpnode.ansible-facts/v1"
    assert facts["gpu_count"] == 8
    # site.yml's second play prints them from ansible_local, as the role re-gathered them.
    assert (
        "mcpnode facts: gpus=8 model=NVIDIA H100 80GB HBM3 numa_nodes=2 driver=570.133.20 "
        "audit_fail=0" in site.first.text
    )
    # ... and groups them by it, for the plays that follow.
    assert "mcpnode groups: gpu_nvidia_h100_80gb_hbm3 mcpnode_audit_pass numa_2" in site.first.text


def test_manifest_collected(site: Site, ansible: Ansible) -> None:
    published = (site.root / "run/mcpnode/manifest.json").read_text()
    collected = (ansible.fleet / "localhost/manifest.json").read_text()
    doc = parse_manifest(collected, "fleet/localhost/manifest.json")
    assert collected == published
    assert doc["host"]["hostname"] == "hgx-h100-node01"
    assert len(doc["gpus"]) == 8


def test_second_run_changes_nothing(site: Site) -> None:
    _ok(site.second)
    assert site.second.recap()["changed"] == 0, site.second.out
    # The configuration exists now: tuning compliance is part of the gate, and passes.
    assert "tuning.drift not gated" not in site.second.text
    assert re.search(r"mcpnode audit: \d+ checks: \d+ PASS, 0 FAIL", site.second.text)


def test_dropins_for_another_venv(site: Site, ansible: Ansible) -> None:
    """Run 3: the units point at /opt/mcpnode; a venv elsewhere gets a drop-in per unit that
    resets each Exec* line naming /opt/mcpnode. (The other path is a link to the installed
    venv: only the service tasks run.)"""
    (site.root / "opt/mcpnode-alt").symlink_to(site.root / "opt/mcpnode")
    run = _ok(
        ansible.play(
            "site.yml", site.root, "--tags", "mcpnode_service", mcpnode_venv="/opt/mcpnode-alt"
        )
    )
    assert run.recap()["changed"] > 0
    units = site.root / "etc/systemd/system"
    agent = (units / "mcpnode.service.d/10-venv.conf").read_text()
    assert "\n[Service]\nExecStart=\nExecStart=/opt/mcpnode-alt/bin/mcpnode agent " in agent
    for unit in ("mcpnode.service", "mcpnode-audit.service"):
        dropin = (units / f"{unit}.d/10-venv.conf").read_text()
        body = dropin.split("[Service]\n", 1)[1]
        assert "/opt/mcpnode/" not in body and "/opt/mcpnode-alt/bin/mcpnode" in body


def test_no_profile_configured_takes_the_recommended_one(site: Site, ansible: Ansible) -> None:
    """mcpnode_profile "" (the role's default): the gate and the configuration use the profile
    `mcpnode profiles recommend` picks for this root, and the run says why."""
    venv_bin = site.root / "opt/mcpnode/bin/mcpnode"
    answer = subprocess.run(
        [str(venv_bin), "profiles", "recommend", "--format", "json", "--root", str(site.root)],
        capture_output=True,
        text=True,
        check=True,
    )
    recommended = json.loads(answer.stdout)
    assert recommended["profile"] != "base"  # the HGX root gets an inference profile
    config_file = site.root / "etc/mcpnode/mcpnode.toml"
    before = config_file.read_text()
    try:
        run = _ok(
            ansible.play("site.yml", site.root, "--tags", "mcpnode_config", mcpnode_profile="")
        )
        assert f"mcpnode profile {recommended['profile']} (recommended for this host:" in run.text
        assert parse_config(config_file.read_text()).profile == recommended["profile"]
    finally:
        config_file.write_text(before)  # the later tests expect run 1's configuration


def test_validate_rejects_a_bad_config(site: Site, ansible: Ansible) -> None:
    """Run 4: `mcpnode config check` refuses the rendered file; the one in place stays."""
    path = site.root / "etc/mcpnode/mcpnode.toml"
    before = path.read_bytes()
    run = ansible.play("site.yml", site.root, "--tags", "mcpnode_config", mcpnode_drift_interval=0)
    assert run.rc != 0 and run.recap()["failed"] == 1
    assert "drift.interval" in run.text, run.out[-4000:]
    assert path.read_bytes() == before


@pytest.fixture(scope="module")
def vulnerable_root(site: Site, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The healthy HGX root with NVIDIA Container Toolkit 1.17.7 recorded (vulnerable to
    CVE-2025-23266/23267: container.toolkit.version FAILs, tests/audit/test_audit_container.py), and
    mcpnode from the first root's venv."""
    root = auditroot.build(tmp_path_factory.mktemp("vulnerable"), auditroot.HGX)
    meta_path = root / "mcpnode-snapshot.json"
    meta = json.loads(meta_path.read_text())
    meta["commands"] = _toolkit_commands("1.17.7")
    meta_path.write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
    (root / "opt").mkdir()
    (root / "opt/mcpnode").symlink_to(site.root / "opt/mcpnode")
    return root


def _toolkit_commands(version: str) -> dict[str, Any]:
    """The toolkit's `--version` answers as `mcpnode snapshot` records them."""

    def answer(stdout: str) -> dict[str, Any]:
        return {"found": True, "returncode": 0, "stdout": stdout, "stderr": "", "reason": None}

    return {
        "nvidia-ctk --version": answer(
            f"NVIDIA Container Toolkit CLI version {version}\ncommit: 0f8a3b1c\n"
        ),
        "nvidia-container-runtime --version": answer(
            f"NVIDIA Container Runtime version {version}\ncommit: 0f8a3b1c\nspec: 1.2.0\n"
        ),
        "nvidia-container-cli --version": answer(
            f"cli-version: {version}\nlib-version: {version}\n"
        ),
    }


def test_preflight_fails_the_host(vulnerable_root: Path, ansible: Ansible) -> None:
    """Run 5: the host fails the gate, naming the finding and its remedy."""
    run = ansible.play("preflight.yml", vulnerable_root)
    assert run.rc != 0 and run.recap()["failed"] == 1, run.out[-4000:]
    assert "FAIL container.toolkit.version: nvidia-ctk 1.17.7 is vulnerable" in run.text
    assert "remedy: Upgrade the toolkit" in run.text
    assert "finding(s) at or above FAIL on localhost: container.toolkit.version" in run.text


def test_preflight_never_lets_the_host_through(vulnerable_root: Path, ansible: Ansible) -> None:
    """Run 6: mcpnode_audit_fail_on=never reports the FAIL and fails nothing."""
    run = _ok(ansible.play("preflight.yml", vulnerable_root, mcpnode_audit_fail_on="never"))
    assert run.recap()["changed"] == 0
    assert "FAIL container.toolkit.version" in run.text
    assert "gate: never" in run.text


def test_fleet_report_outliers_do_not_fail_the_play(site: Site, ansible: Ansible) -> None:
    """Run 7: the collected manifest, a copy as a second host, and a third host on another
    driver: fleet-report exits 1 (an outlier), report.yml still succeeds and prints it."""
    collected = json.loads((ansible.fleet / "localhost/manifest.json").read_text())
    for name, driver in (("node-b", None), ("node-c", "535.216.03")):
        doc = json.loads(json.dumps(collected))
        doc["host"]["hostname"] = name
        if driver is not None:
            doc["host"]["driver"] = driver
        doc["content_hash"] = content_hash(doc)
        (ansible.fleet / name).mkdir()
        (ansible.fleet / name / "manifest.json").write_text(dumps(doc))
    run = _ok(
        ansible.play(
            "report.yml",
            None,
            mcpnode_controller_bin=str(site.root / "opt/mcpnode/bin/mcpnode"),
        )
    )
    assert "outliers found (fleet-report exit 1)" in run.text
    assert "535.216.03" in run.text and "node-c" in run.text
