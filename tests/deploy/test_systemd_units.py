"""systemd/mcpnode.service and systemd/mcpnode-audit.service.

Three kinds of check, none of which touches this machine's systemd (no systemctl, nothing under
/etc/systemd; `systemd-analyze` reads unit files from a temporary directory):

- `systemd-analyze verify` on a copy of each unit whose ExecStart names this checkout's
  `mcpnode` entry point (verify refuses a unit whose binary does not exist). It needs no
  running systemd: it passes in a Firecracker VM whose PID 1 is not systemd. Unknown keys and
  bad values are only warnings (exit 0), so any output line naming our unit fails the test.
- `systemd-analyze security --offline=yes` (v250+): the overall exposure, gated with
  `--threshold=` (0..100, i.e. exposure x 10), and the rows that record a decision: what is
  relaxed on purpose is still relaxed, what is locked down stays locked down.
- The unit text itself, read with a small parser: the agent's contract (Type=notify,
  watchdog, restart policy, exit 78), and every file the code writes by default lies in a
  directory the unit makes writable. The list of written paths comes from the code's own
  constants, and a scan of the sources for writers makes a new one fail here until the unit
  (and the table below) account for it.

Measured here (systemd 252.38, Debian 12): verify prints nothing for either unit; exposure
3.4 for mcpnode.service (3.1 before it read the kernel log: ProtectKernelLogs=no, CAP_SYSLOG)
and 2.0 for mcpnode-audit.service.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path, PurePosixPath

import pytest

REPO = Path(__file__).resolve().parents[2]
AGENT_UNIT = REPO / "systemd" / "mcpnode.service"
AUDIT_UNIT = REPO / "systemd" / "mcpnode-audit.service"
UNITS = (AGENT_UNIT, AUDIT_UNIT)
SERVICE_DOC = REPO / "docs" / "service.md"
INSTALLED_BIN = "/opt/mcpnode/bin/mcpnode"  # where the units expect the venv's entry point

Unit = dict[str, dict[str, list[str]]]


# -- a unit-file reader (systemd.syntax(7), as much as these units use) ------------------------


def parse_unit(text: str) -> Unit:
    """Sections of KEY -> values in file order. Handles '#'/';' comment lines, a trailing
    backslash continuing a line, repeated keys accumulating, and an empty assignment resetting
    what came before (as it does for the list settings used here)."""
    sections: Unit = {}
    current: dict[str, list[str]] | None = None
    pending = ""
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not pending and (not line or line[0] in "#;"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = pending + line, ""
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        key, sep, value = line.partition("=")
        if current is None or not sep:
            raise ValueError(f"line {number}: not KEY=VALUE inside a section: {raw!r}")
        values = current.setdefault(key.strip(), [])
        if value.strip():
            values.append(value.strip())
        else:
            values.clear()
    return sections


def load(path: Path) -> Unit:
    return parse_unit(path.read_text(encoding="utf-8"))


def last(unit: Unit, section: str, key: str) -> str | None:
    """The value in force for a single-valued setting (the last assignment wins)."""
    values = unit.get(section, {}).get(key)
    return values[-1] if values else None


def words(unit: Unit, section: str, key: str) -> list[str]:
    """A list setting's items, all assignments together."""
    return [w for value in unit.get(section, {}).get(key, []) for w in value.split()]


def seconds(value: str) -> float:
    """A systemd time span as these units write it: `120s`, `30min`, `5m`, `2h`, `90`."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(s|sec|m|min|h)?", value.strip())
    if m is None:
        raise ValueError(f"unsupported time span {value!r}")
    scale = {None: 1, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600}[m.group(2)]
    return float(m.group(1)) * scale


def writable_dirs(unit: Unit) -> dict[str, str]:
    """Directories the unit makes writable under ProtectSystem=strict -> the setting doing so."""
    out: dict[str, str] = {}
    for item in words(unit, "Service", "ReadWritePaths"):
        out[item.lstrip("-+")] = "ReadWritePaths"
    bases = {
        "StateDirectory": "/var/lib",
        "RuntimeDirectory": "/run",
        "ConfigurationDirectory": "/etc",
        "CacheDirectory": "/var/cache",
        "LogsDirectory": "/var/log",
    }
    for key, base in bases.items():
        for item in words(unit, "Service", key):
            out[f"{base}/{item.split(':')[0]}"] = key
    return out


def inside(path: str, directory: str) -> bool:
    p, d = PurePosixPath(path), PurePosixPath(directory)
    return p == d or d in p.parents


def test_parser_reads_systemd_syntax() -> None:
    unit = parse_unit(
        "# comment\n[Unit]\nAfter=a.service\nAfter=b.service \\\n  c.service\n"
        "[Service]\n; also a comment\nCapabilityBoundingSet=CAP_X\nCapabilityBoundingSet=\n"
        "Environment=A=1\n"
    )
    assert words(unit, "Unit", "After") == ["a.service", "b.service", "c.service"]
    assert unit["Service"]["CapabilityBoundingSet"] == []
    assert last(unit, "Service", "Environment") == "A=1"
    assert seconds("120s") == 120 and seconds("30min") == 1800
    with pytest.raises(ValueError, match="line 1"):
        parse_unit("Orphan=1\n")


# -- what the code writes ----------------------------------------------------------------------

# Every module that writes files (through Host, or the audit's atomic writer), and what it
# writes. A writer not listed fails test_every_writer_is_accounted_for: add it here, and if the
# agent or the audit runs it by default, put its path in agent_write_paths() and make its
# directory writable in the unit (ReadWritePaths=, "-" prefixed when it may not exist).
WRITERS = {
    "mcpnode/tuning/apply.py": "sysctl and sysfs values; /etc/sysctl.d/90-mcpnode.conf",
    "mcpnode/tuning/journal.py": "the tuning journal",
    "mcpnode/tuning/plugins/base.py": "one-file values: sysctls, sysfs, IRQ affinity, rps_cpus",
    "mcpnode/placement/manifest.py": "the manifest",
    "mcpnode/state/agentstate.py": "the agent's state file",
    "mcpnode/placement/exporters/write.py": "exporter files (`mcpnode export`)",
    "mcpnode/agent/publish.py": "exporter files; removes the nfd and prom ones at stop",
    "mcpnode/agent/enforce.py": "removes the agent's state file at stop",
    "mcpnode/cli/main.py": "`mcpnode audit --output` (mcpnode-audit.service)",
    "mcpnode/placement/systemd.py": "`mcpnode systemd-dropin --write`: by hand, never the agent",
    "mcpnode/cli/fast.py": "`python -m mcpnode.cli.fast --write-help`: its own help_text.py",
    "mcpnode/probe/record.py": "`mcpnode probe` keeps its run: by hand, never the agent or audit",
    "mcpnode/cli/health_cmd.py": "`mcpnode expect --write FILE`: by hand, never the agent",
}
WRITE_CALL = re.compile(
    r"\b(write_file_atomic|write_atomic|write_text|write_bytes)\(|\bhost\.remove\("
)


def agent_write_paths() -> dict[str, str]:
    """Files the agent writes with its default configuration (any export kind enabled) -> why."""
    from mcpnode.placement.exporters.write import KINDS
    from mcpnode.placement.manifest import MANIFEST_PATH
    from mcpnode.state.agentstate import AGENT_STATE_PATH
    from mcpnode.state.places import JOURNAL_PATH
    from mcpnode.tuning import paths

    out = {
        JOURNAL_PATH: "tuning journal",
        paths.PERSIST_PATH: "[tuning] persist = true",
        MANIFEST_PATH: "manifest",
        AGENT_STATE_PATH: "agent state",
    }
    out.update({kind.path: f'[export] kinds = ["{name}"]' for name, kind in KINDS.items()})
    return out


def kernel_write_paths() -> tuple[str, ...]:
    """Where the tuning engine writes values: /proc/sys and /sys, not files the unit lists."""
    from mcpnode.tuning import paths

    return (paths.SYSCTL_ROOT, paths.THP_ENABLED, paths.CPUFREQ_DIR)


def test_every_writer_is_accounted_for() -> None:
    found = set()
    for py in sorted((REPO / "mcpnode").rglob("*.py")):
        if py.parent.name == "host" and py.parent.parent.name == "mcpnode":
            continue  # the primitives themselves (mcpnode/host/)
        for line in py.read_text(encoding="utf-8").splitlines():
            code = line.split("#", 1)[0]
            if WRITE_CALL.search(code) and not code.lstrip().startswith("def "):
                found.add(py.relative_to(REPO).as_posix())
    new, gone = sorted(found - set(WRITERS)), sorted(set(WRITERS) - found)
    assert not new, (
        f"{new} write files: list them in WRITERS, and make what the agent or the audit "
        "writes writable in systemd/*.service"
    )
    assert not gone, f"{gone} no longer write files: drop them from WRITERS"


def test_export_kinds_match_the_config() -> None:
    """The agent's config accepts exactly the kinds the unit was checked for."""
    from mcpnode.agent.config import EXPORT_KINDS
    from mcpnode.placement.exporters.write import KINDS

    assert set(EXPORT_KINDS) == set(KINDS)


def test_every_agent_write_is_writable() -> None:
    unit = load(AGENT_UNIT)
    rw = writable_dirs(unit)
    for path, why in agent_write_paths().items():
        # Files are replaced by temp + rename(2): the directory itself must be writable.
        parent = str(PurePosixPath(path).parent)
        assert any(inside(parent, d) for d in rw), (
            f"{path} ({why}) is not writable under ProtectSystem=strict; writable: {sorted(rw)}"
        )
    for path in kernel_write_paths():
        assert path.startswith(("/proc/sys", "/sys/")), path
    assert last(unit, "Service", "ProtectKernelTunables") == "no"


def test_no_stale_read_write_paths() -> None:
    """Every ReadWritePaths= entry is the directory of a file the agent writes: nothing is
    writable just in case. All are "-" prefixed: a missing one would otherwise fail the start
    with 226/NAMESPACE (exporters are optional, and so is /etc/sysctl.d on minimal images)."""
    unit = load(AGENT_UNIT)
    parents = {str(PurePosixPath(p).parent) for p in agent_write_paths()}
    for item in words(unit, "Service", "ReadWritePaths"):
        assert item.startswith("-"), f"{item}: prefix with '-' (may not exist)"
        assert item.lstrip("-+") in parents, f"{item} is writable but nothing writes there"


def test_runtime_directory_is_shared_and_kept() -> None:
    """Both units own /run/mcpnode; without RuntimeDirectoryPreserve=yes in both, a finished
    audit or a stopped agent would delete the other's files (the manifest)."""
    from mcpnode.placement.manifest import MANIFEST_PATH

    for path in UNITS:
        unit = load(path)
        assert words(unit, "Service", "RuntimeDirectory") == ["mcpnode"], path.name
        assert last(unit, "Service", "RuntimeDirectoryPreserve") == "yes", path.name
    assert inside(MANIFEST_PATH, "/run/mcpnode")


# -- the agent's unit ---------------------------------------------------------------------------


def test_agent_unit_contract() -> None:
    from mcpnode.exitcodes import EXIT_CONFIG

    unit = load(AGENT_UNIT)
    svc = unit["Service"]
    # Type=notify-reload is v253; the targets ship 249 (Ubuntu 22.04) and 252 (Debian 12).
    assert last(unit, "Service", "Type") == "notify"
    assert last(unit, "Service", "NotifyAccess") == "main"
    assert svc["ExecStart"] == [f"{INSTALLED_BIN} agent --config /etc/mcpnode/mcpnode.toml"]
    assert svc["ExecReload"] == ["/bin/kill -HUP $MAINPID"]
    watchdog = seconds(last(unit, "Service", "WatchdogSec") or "0")
    start = seconds(last(unit, "Service", "TimeoutStartSec") or "0")
    assert 30 <= watchdog <= 300, "the agent pings at WatchdogSec/2 from its one loop"
    assert start >= 120, "NVML init alone can take tens of seconds on an 8-GPU host"
    assert last(unit, "Service", "Restart") == "on-failure"
    assert seconds(last(unit, "Service", "RestartSec") or "0") > 0
    assert str(EXIT_CONFIG) in words(unit, "Service", "RestartPreventExitStatus")
    # Rate limits live in [Unit]; in [Service] they would be ignored.
    assert last(unit, "Unit", "StartLimitIntervalSec") and last(unit, "Unit", "StartLimitBurst")
    assert not {"StartLimitIntervalSec", "StartLimitBurst"} & set(svc)
    assert {"containerd.service", "kubelet.service", "slurmd.service"} <= set(
        words(unit, "Unit", "Before")
    )
    assert {"systemd-sysctl.service", "nvidia-persistenced.service"} <= set(
        words(unit, "Unit", "After")
    )
    assert words(unit, "Install", "WantedBy") == ["multi-user.target"]
    assert "User" not in svc and "DynamicUser" not in svc, "/proc/sys writes need euid 0"


def test_agent_capabilities() -> None:
    unit = load(AGENT_UNIT)
    caps = set(words(unit, "Service", "CapabilityBoundingSet"))
    assert caps == {
        "CAP_SYS_ADMIN",
        "CAP_NET_ADMIN",
        "CAP_SYS_NICE",
        "CAP_DAC_OVERRIDE",
        "CAP_SYSLOG",  # /dev/kmsg under kernel.dmesg_restrict=1: the XID watcher
    }
    # Module loading is either fully off or fully on, never half.
    assert last(unit, "Service", "ProtectKernelModules") == "yes"
    assert "CAP_SYS_MODULE" not in caps
    assert not words(unit, "Service", "AmbientCapabilities")


@pytest.mark.parametrize("path", UNITS, ids=lambda p: p.name)
def test_nvml_keeps_its_devices(path: Path) -> None:
    """No device allow-list, explicit or implied: NVML opens /dev/nvidia*. ProtectClock=yes
    implies DeviceAllow=char-rtc r on systemd < 252 (systemd#18142), and any allow-list blocks
    every device not on it."""
    unit = load(path)
    for key in ("DeviceAllow", "DevicePolicy"):
        assert key not in unit["Service"], f"{path.name}: {key}= blocks /dev/nvidia*"
    for key in ("ProtectClock", "PrivateDevices"):
        assert last(unit, "Service", key) in (None, "no"), f"{path.name}: {key}"


# Settings newer than the oldest target (systemd 249) that an edit might reach for.
NEWER_THAN_249 = {
    "ExitType": 250,
    "ExecSearchPath": 250,
    "ExtensionDirectories": 251,
    "OpenFile": 253,
    "ReloadSignal": 253,
}


@pytest.mark.parametrize("path", UNITS, ids=lambda p: p.name)
def test_nothing_newer_than_systemd_249(path: Path) -> None:
    unit = load(path)
    newer = {key for section in unit.values() for key in section} & set(NEWER_THAN_249)
    assert not newer, {k: f"systemd {NEWER_THAN_249[k]}" for k in newer}
    assert last(unit, "Service", "Type") != "notify-reload"


# -- the audit's unit ---------------------------------------------------------------------------


def test_audit_unit_contract() -> None:
    unit = load(AUDIT_UNIT)
    assert last(unit, "Service", "Type") == "oneshot"
    # Exit 1 (something FAILed) must fail the unit: the Ansible role gates on it.
    assert "1" not in words(unit, "Service", "SuccessExitStatus")
    # Every `systemctl start` runs a fresh audit.
    assert last(unit, "Service", "RemainAfterExit") in (None, "no")
    # No capabilities at all, and nothing writable beyond /run/mcpnode.
    assert unit["Service"]["CapabilityBoundingSet"] == []
    assert "ReadWritePaths" not in unit["Service"]
    assert last(unit, "Service", "ProtectKernelTunables") == "yes"
    # net.* sysctls are per network namespace: a private one would show its own defaults.
    assert last(unit, "Service", "PrivateNetwork") in (None, "no")
    argv = last(unit, "Service", "ExecStart")
    assert argv is not None and argv.split()[:2] == [INSTALLED_BIN, "audit"]
    output = argv.split()[argv.split().index("--output") + 1]
    assert inside(output, "/run/mcpnode") and output.endswith(".json")


# -- running what the units run ------------------------------------------------------------------


def entry_point() -> Path:
    """This checkout's `mcpnode` console script (what /opt/mcpnode/bin/mcpnode is installed)."""
    beside = Path(sys.executable).parent / "mcpnode"
    found = beside if beside.exists() else shutil.which("mcpnode")
    if found is None:
        pytest.skip("no `mcpnode` entry point: install the package (pip install -e .)")
    return Path(found)


def exec_start(path: Path) -> list[str]:
    argv = (last(load(path), "Service", "ExecStart") or "").split()
    assert argv and argv[0] == INSTALLED_BIN
    return [str(entry_point()), *argv[1:]]


def test_agent_command_line_and_exit_78(tmp_path: Path) -> None:
    """The unit's command line parses, and a missing configuration exits 78, which the unit
    does not restart."""
    argv = exec_start(AGENT_UNIT)
    proc = subprocess.run(
        [*argv, "--root", str(tmp_path)], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 78, proc.stderr
    assert "does not exist" in proc.stderr
    assert list(tmp_path.iterdir()) == []  # nothing written before the config was read
    assert "78" in words(load(AGENT_UNIT), "Service", "RestartPreventExitStatus")


def test_audit_command_line_writes_the_report(tmp_path: Path) -> None:
    """The unit's command line, on a recorded host, with the report sent to a temporary file."""
    argv = exec_start(AUDIT_UNIT)
    out = tmp_path / "audit.json"
    argv[argv.index("--output") + 1] = str(out)
    root = REPO / "tests" / "fixtures" / "hosts" / "no-gpu-host"
    proc = subprocess.run(
        [*argv, "--root", str(root)], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode in (0, 1), proc.stderr  # 1: something FAILed; 2 would be an error
    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["schema"].startswith("mcpnode.audit/")
    assert out.stat().st_mode & 0o777 == 0o644  # readable by all under UMask=0077


# -- the real systemd-analyze ---------------------------------------------------------------------

ANALYZE = shutil.which("systemd-analyze")
needs_analyze = pytest.mark.skipif(
    ANALYZE is None, reason="systemd-analyze not installed (package systemd): unit checks skipped"
)


def analyze(*args: str, unit_dir: Path) -> subprocess.CompletedProcess[str]:
    """systemd-analyze with units looked up in `unit_dir` first (the trailing ':' keeps the
    built-in directories for the dependencies), plain output, UTF-8 glyphs where available."""
    assert ANALYZE is not None
    env = {
        **os.environ,
        "SYSTEMD_UNIT_PATH": f"{unit_dir}:",
        "SYSTEMD_LOG_LEVEL": "notice",
        "SYSTEMD_COLORS": "0",
        "SYSTEMD_PAGER": "",
        "LC_ALL": "C.UTF-8",
    }
    return subprocess.run(
        [ANALYZE, "--no-pager", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def analyze_version() -> int:
    assert ANALYZE is not None
    out = subprocess.run(
        [ANALYZE, "--version"], capture_output=True, text=True, timeout=30, check=False
    ).stdout
    m = re.match(r"systemd (\d+)", out)
    return int(m.group(1)) if m else 0


def installable(unit_dir: Path, *dropins: tuple[str, str]) -> dict[str, Path]:
    """Both units in `unit_dir` with ExecStart pointing at this checkout's entry point, plus
    (file name, text) drop-ins for mcpnode.service."""
    unit_dir.mkdir(parents=True, exist_ok=True)
    out = {}
    for path in UNITS:
        text = path.read_text(encoding="utf-8")
        assert INSTALLED_BIN in text
        out[path.name] = unit_dir / path.name
        out[path.name].write_text(text.replace(INSTALLED_BIN, str(entry_point())))
    for name, text in dropins:
        d = unit_dir / f"{AGENT_UNIT.name}.d"
        d.mkdir(exist_ok=True)
        (d / name).write_text(text)
    return out


def complaints(proc: subprocess.CompletedProcess[str], name: str) -> list[str]:
    """Output lines about our unit (systemd may warn about other units on a machine)."""
    return [line for line in (proc.stdout + proc.stderr).splitlines() if name in line]


@needs_analyze
@pytest.mark.parametrize("path", UNITS, ids=lambda p: p.name)
def test_systemd_analyze_verify(path: Path, tmp_path: Path) -> None:
    units = installable(tmp_path / "units")
    proc = analyze("verify", str(units[path.name]), unit_dir=tmp_path / "units")
    assert proc.returncode == 0, proc.stderr
    assert complaints(proc, path.name) == []


@needs_analyze
def test_systemd_analyze_verify_reads_what_we_wrote(tmp_path: Path) -> None:
    """The control: a misspelt key and a bad value in the same unit are reported (exit 0, but
    with lines naming the unit), so the clean passes above mean the file was checked."""
    units = installable(tmp_path / "units")
    agent = units[AGENT_UNIT.name]
    agent.write_text(
        agent.read_text().replace("NoNewPrivileges=yes", "NoNewPrivilege=yes\nRestart=sometimes")
    )
    proc = analyze("verify", str(agent), unit_dir=tmp_path / "units")
    found = "\n".join(complaints(proc, AGENT_UNIT.name))
    assert proc.returncode == 0  # warnings only: hence the check for lines naming the unit
    assert "'NoNewPrivilege'" in found  # 252: "Unknown key 'NoNewPrivilege' in section [Service]"
    assert "sometimes" in found


@needs_analyze
def test_systemd_analyze_verify_needs_the_binary(tmp_path: Path) -> None:
    """Why the tests rewrite ExecStart: as shipped, verify fails where /opt/mcpnode is absent."""
    if Path(INSTALLED_BIN).exists():
        pytest.skip(f"{INSTALLED_BIN} is installed on this machine")
    (tmp_path / AGENT_UNIT.name).write_text(AGENT_UNIT.read_text())
    proc = analyze("verify", str(tmp_path / AGENT_UNIT.name), unit_dir=tmp_path)
    assert proc.returncode != 0
    assert f"Command {INSTALLED_BIN} is not executable" in proc.stderr


# `systemd-analyze security` table rows: mark, setting, description, exposure. The marks are
# ✓/✗ in a UTF-8 locale and +/- in the C locale.
ROW = re.compile(r"^([✓✗+\- ]) (\S+)\s+(.*?)\s*(\d+\.\d)?\s*$")
OVERALL = re.compile(r"Overall exposure level for (\S+): (\d+\.\d)")


def security(
    unit: Path, unit_dir: Path, threshold: int
) -> tuple[subprocess.CompletedProcess[str], float, dict[str, tuple[bool | None, str]]]:
    """Run the offline review; return the process, the overall exposure (0.0-10.0) and the
    rows: setting -> (True ✓ / False ✗ / None not applicable, description)."""
    if analyze_version() < 250:
        pytest.skip("systemd-analyze security --offline needs systemd 250 or newer")
    proc = analyze(
        "security", "--offline=yes", f"--threshold={threshold}", str(unit), unit_dir=unit_dir
    )
    m = OVERALL.search(proc.stdout)
    assert m is not None, proc.stdout + proc.stderr
    rows: dict[str, tuple[bool | None, str]] = {}
    for line in proc.stdout.splitlines()[1:]:
        r = ROW.match(line)
        if r:
            mark = {"✓": True, "+": True, "✗": False, "-": False}.get(r.group(1))
            rows[r.group(2)] = (mark, r.group(3))
    return proc, float(m.group(2)), rows


AGENT_RELAXED = (  # ✗ on purpose: docs/service.md says why
    "ProtectKernelTunables=",
    "CapabilityBoundingSet=~CAP_SYS_ADMIN",
    "CapabilityBoundingSet=~CAP_NET_ADMIN",
    "CapabilityBoundingSet=~CAP_SYS_(NICE|RESOURCE)",
    "CapabilityBoundingSet=~CAP_(DAC_*|FOWNER|IPC_OWNER)",
    "PrivateNetwork=",
    "PrivateDevices=",
    "ProtectClock=",
    "User=/DynamicUser=",
    "ProtectKernelLogs=",  # the XID watcher reads /dev/kmsg
)
AGENT_LOCKED = (
    "NoNewPrivileges=",
    "ProtectSystem=",
    "ProtectHome=",
    "PrivateTmp=",
    "ProtectKernelModules=",
    "ProtectControlGroups=",
    "CapabilityBoundingSet=~CAP_SYS_MODULE",
    "CapabilityBoundingSet=~CAP_SYS_PTRACE",
    "CapabilityBoundingSet=~CAP_SYS_TIME",
    "CapabilityBoundingSet=~CAP_BPF",
    "MemoryDenyWriteExecute=",
    "RestrictNamespaces=~user",
    "RestrictSUIDSGID=",
    "LockPersonality=",
    "RestrictRealtime=",
    "SystemCallArchitectures=",
    "SystemCallFilter=~@privileged",
    "SystemCallFilter=~@clock",
    "SystemCallFilter=~@module",
    "SystemCallFilter=~@mount",
    "RestrictAddressFamilies=~AF_PACKET",
    "NotifyAccess=",
)


@needs_analyze
def test_agent_exposure(tmp_path: Path) -> None:
    units = installable(tmp_path / "units")
    proc, exposure, rows = security(units[AGENT_UNIT.name], tmp_path / "units", threshold=40)
    assert proc.returncode == 0 and exposure <= 4.0, f"mcpnode.service exposure {exposure}"
    for name in AGENT_RELAXED:
        assert rows[name][0] is False, f"{name} is relaxed on purpose; now {rows[name]}"
    for name in AGENT_LOCKED:
        assert rows[name][0] is True, f"{name}: {rows[name]} (mcpnode.service exposure {exposure})"
    # The IP allow-list is loopback only (the metrics endpoint's default).
    assert "only localhost" in rows["IPAddressDeny="][1]


@needs_analyze
def test_security_threshold_gates(tmp_path: Path) -> None:
    """--threshold is on the 0..100 scale (exposure x 10): one below the measured exposure
    fails, so the gate above is real."""
    units = installable(tmp_path / "units")
    _, exposure, _ = security(units[AGENT_UNIT.name], tmp_path / "units", threshold=100)
    proc, _, _ = security(
        units[AGENT_UNIT.name], tmp_path / "units", threshold=round(exposure * 10) - 1
    )
    assert proc.returncode != 0, f"exposure {exposure} passed a lower threshold"


AUDIT_LOCKED = (
    "ProtectKernelTunables=",
    "CapabilityBoundingSet=~CAP_SYS_ADMIN",
    "CapabilityBoundingSet=~CAP_NET_ADMIN",
    "CapabilityBoundingSet=~CAP_(DAC_*|FOWNER|IPC_OWNER)",
    "CapabilityBoundingSet=~CAP_SYS_MODULE",
    "RestrictAddressFamilies=~AF_(INET|INET6)",
    "RestrictAddressFamilies=~AF_NETLINK",
    "SystemCallFilter=~@resources",
    "IPAddressDeny=",
    "NoNewPrivileges=",
    "ProtectSystem=",
    "MemoryDenyWriteExecute=",
)
AUDIT_RELAXED = ("PrivateNetwork=", "ProtectKernelModules=", "PrivateDevices=", "ProtectClock=")


@needs_analyze
def test_audit_exposure(tmp_path: Path) -> None:
    """The read-only unit stays well below the agent: 2.5 is a ratchet over the 2.0 measured."""
    units = installable(tmp_path / "units")
    proc, exposure, rows = security(units[AUDIT_UNIT.name], tmp_path / "units", threshold=25)
    assert proc.returncode == 0 and exposure <= 2.5, f"mcpnode-audit.service exposure {exposure}"
    for name in AUDIT_LOCKED:
        assert rows[name][0] is True, f"{name}: {rows[name]} (audit exposure {exposure})"
    for name in AUDIT_RELAXED:
        assert rows[name][0] is False, f"{name} is relaxed on purpose; now {rows[name]}"


# The drop-ins docs/service.md offers, checked as written there.
DROPIN_MODULES = """\
[Service]
ProtectKernelModules=no
CapabilityBoundingSet=CAP_SYS_MODULE
SystemCallFilter=@module
"""
DROPIN_REMOTE_METRICS = """\
[Service]
IPAddressAllow=10.0.0.0/8
"""


@needs_analyze
def test_documented_dropins(tmp_path: Path) -> None:
    doc = SERVICE_DOC.read_text(encoding="utf-8")
    assert DROPIN_MODULES in doc and DROPIN_REMOTE_METRICS in doc
    units = installable(
        tmp_path / "units",
        ("50-modules.conf", DROPIN_MODULES),
        ("60-metrics.conf", DROPIN_REMOTE_METRICS),
    )
    agent = units[AGENT_UNIT.name]
    proc = analyze("verify", str(agent), unit_dir=tmp_path / "units")
    assert proc.returncode == 0, proc.stderr
    for name in ("50-modules.conf", "60-metrics.conf", AGENT_UNIT.name):
        assert complaints(proc, name) == []
    # 4.2: the agent's own 3.4 plus what loading modules opens (measured 4.1, systemd 252)
    proc, exposure, rows = security(agent, tmp_path / "units", threshold=42)
    # The drop-ins were read: module loading is on, the allow-list has a non-local entry.
    assert rows["ProtectKernelModules="][0] is False
    assert rows["CapabilityBoundingSet=~CAP_SYS_MODULE"][0] is False
    assert rows["SystemCallFilter=~@module"][0] is False
    assert "non-localhost" in rows["IPAddressDeny="][1]
    # ... and added to the unit's lists rather than replacing them, as the doc says.
    assert rows["CapabilityBoundingSet=~CAP_SYS_ADMIN"][0] is False
    assert rows["SystemCallFilter=~@mount"][0] is True
    assert proc.returncode == 0 and exposure <= 4.2, f"with both drop-ins: exposure {exposure}"


# -- export directories moved by [export] <kind>_dir: the role's drop-in follows ---------------

EXPORT_DROPIN = REPO / "ansible/roles/mcpnode/templates/export-dirs-dropin.conf.j2"


def render_export_dropin(directories: list[str]) -> str:
    """The Ansible role's drop-in for these directories, rendered by Jinja2 as Ansible does
    (trim_blocks: Ansible's template module default)."""
    jinja2 = pytest.importorskip("jinja2", reason="jinja2 comes with ansible-core ([dev])")
    env = jinja2.Environment(trim_blocks=True, keep_trailing_newline=True, autoescape=False)
    text: str = env.from_string(EXPORT_DROPIN.read_text()).render(mcpnode_export_dirs=directories)
    return text


def test_moved_export_directories_are_writable_with_the_role_dropin() -> None:
    """The agent writes where `[export] <kind>_dir` says; the shipped unit covers the default
    directories only, and the role's drop-in adds the others (Debian's node_exporter reads
    /var/lib/prometheus/node-exporter). Without the drop-in they are not writable."""
    from mcpnode.agent.config import parse_config
    from mcpnode.placement.exporters.write import target_path

    config = parse_config(
        '[export]\nkinds = ["nfd", "prom"]\nprom_dir = "/var/lib/prometheus/node-exporter"\n'
        'nfd_dir = "/srv/nfd/features.d"\n'
    )
    written = [target_path(k, config.export_dir(k)) for k in config.export_kinds]
    moved = sorted(
        {str(PurePosixPath(p).parent) for p in written} - set(writable_dirs(load(AGENT_UNIT)))
    )
    assert moved == ["/srv/nfd/features.d", "/var/lib/prometheus/node-exporter"]
    unit = parse_unit(AGENT_UNIT.read_text() + "\n" + render_export_dropin(moved))
    rw = writable_dirs(unit)
    for path in written:
        assert any(inside(str(PurePosixPath(path).parent), d) for d in rw), (path, sorted(rw))
    assert "ReadWritePaths=--" not in render_export_dropin(moved)


@needs_analyze
def test_export_dirs_dropin_verifies(tmp_path: Path) -> None:
    text = render_export_dropin(["/var/lib/prometheus/node-exporter"])
    units = installable(tmp_path / "units", ("30-export-dirs.conf", text))
    proc = analyze("verify", str(units[AGENT_UNIT.name]), unit_dir=tmp_path / "units")
    assert proc.returncode == 0, proc.stderr
    assert complaints(proc, "30-export-dirs.conf") == []
