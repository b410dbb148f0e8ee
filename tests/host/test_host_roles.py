"""Host's roles (mcpnode/host/roles.py): Host satisfies each, discovery and the audit are typed
against the reading one, and mypy refuses a write, a module load or a process call made
through a HostReader while it accepts the same calls through a Host."""

from __future__ import annotations

import inspect
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mcpnode.audit import context, facts, run
from mcpnode.audit.run import AREAS
from mcpnode.host import Host, HostProcess, HostReader, HostWriter
from mcpnode.topology import discover, nvml, sysfs
from mcpnode.tuning.journal import load_journal
from mcpnode.tuning.plugins import SUBSYSTEMS
from mcpnode.tuning.profile import load_profile
from mcpnode.tuning.state import read_state
from mcpnode.tuning.verify import verify

REPO = Path(__file__).resolve().parents[2]


def test_host_satisfies_every_role(tmp_path: Path) -> None:
    host = Host(tmp_path)
    # Checked by mypy (tests are part of `mypy`'s files): Host is each role structurally.
    reader: HostReader = host
    writer: HostWriter = host
    process: HostProcess = host
    # And at run time, member by member.
    assert isinstance(reader, HostReader)
    assert isinstance(writer, HostWriter)
    assert isinstance(process, HostProcess)


def test_the_reader_holds_no_write_or_process_call() -> None:
    reading = {n for n in dir(HostReader) if not n.startswith("_")}
    assert not reading & {"write_text", "write_file_atomic", "makedirs", "remove", "lock"}
    assert not reading & {"run_change", "load_module", "set_affinity", "set_mempolicy", "exec"}
    # Every public member of Host is in some role, or is the object's own lifecycle.
    roles = {n for r in (HostReader, HostWriter, HostProcess) for n in dir(r)}
    public = {n for n in dir(Host) if not n.startswith("_")}
    assert public - roles == {"close"}


def _host_annotation(fn: Callable[..., Any]) -> Any:
    return inspect.signature(fn).parameters["host"].annotation


def test_discovery_and_the_audit_take_the_reading_role() -> None:
    for fn in (
        discover.discover,
        discover.discover_host,
        nvml.open_backend,
        sysfs.read_cpus,
        sysfs.read_nodes,
        sysfs.walk_pci,
        context.build_context,
        facts.read_file,
        facts.list_dir,
        run.require_machine,
        # tuning's read side, which the audit's tuning and kernel areas call
        load_profile,
        read_state,
        verify,
        load_journal,
    ):
        assert _host_annotation(fn) == "HostReader", fn.__qualname__
    for area in AREAS:
        assert _host_annotation(area.collect) == "HostReader", area.collect.__module__
    for subsystem in SUBSYSTEMS:
        assert _host_annotation(subsystem.read) == "HostReader", subsystem.name


_SNIPPET = """
from mcpnode.host import {role}


def collect(host: {role}) -> None:
    host.read_optional("/proc/sys/vm/swappiness")
    host.write_text("/proc/sys/vm/swappiness", "10")
    host.write_file_atomic("/etc/sysctl.d/90-mcpnode.conf", b"")
    host.load_module("tcp_bbr")
    host.set_affinity(0, {{0}})
"""


@pytest.fixture(scope="module")
def mypy_config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A mypy configuration of its own (strict, this checkout's sources, a cache shared by the
    runs of this module), so the snippets are judged as the project's code is."""
    pytest.importorskip("mypy")
    base = tmp_path_factory.mktemp("mypy")
    ini = base / "mypy.ini"
    ini.write_text(
        textwrap.dedent(
            f"""\
            [mypy]
            python_version = 3.10
            strict = true
            mypy_path = {REPO}
            cache_dir = {base / "cache"}

            [mypy-mcpnode.*]
            follow_imports = silent
            """
        )
    )
    return ini


def _mypy(config: Path, path: Path, role: str) -> tuple[str, int]:
    from mypy import api

    path.write_text(_SNIPPET.format(role=role))
    out, err, status = api.run(["--config-file", str(config), "--no-error-summary", str(path)])
    assert not err, err
    return out, status


def test_mypy_refuses_a_write_through_the_reader(mypy_config: Path, tmp_path: Path) -> None:
    out, status = _mypy(mypy_config, tmp_path / "reader_writes.py", "HostReader")
    assert status == 1, out
    refused = [line for line in out.splitlines() if "error:" in line]
    assert len(refused) == 4, out
    for name in ("write_text", "write_file_atomic", "load_module", "set_affinity"):
        assert any(f'"HostReader" has no attribute "{name}"' in line for line in refused), out


def test_mypy_accepts_the_same_calls_through_host(mypy_config: Path, tmp_path: Path) -> None:
    out, status = _mypy(mypy_config, tmp_path / "host_writes.py", "Host")
    assert status == 0, out


def test_the_roles_are_imported_at_their_first_use() -> None:
    """mcpnode.host does not import roles.py (typing's Protocols) with Host; naming a role
    imports it, and any other unknown name is still an AttributeError."""
    import subprocess
    import sys

    code = (
        "import sys, mcpnode.host as h\n"
        "before = 'mcpnode.host.roles' in sys.modules\n"
        "from mcpnode.host import HostReader\n"
        "from mcpnode.host.roles import HostReader as same\n"
        "try:\n"
        "    h.NoSuchName\n"
        "except AttributeError as err:\n"
        "    print(before, HostReader is same, err)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout == "False True module 'mcpnode.host' has no attribute 'NoSuchName'\n"
