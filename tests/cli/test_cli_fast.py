"""The entry point's fast path (cli/fast.py) says exactly what click says: the same bytes for
topo and gpus on every fixture, the same help and version, the same errors and exit codes;
and whatever it does not serve reaches click unchanged."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from mcpnode.cli.help_text import HELP
from mcpnode.cli.main import cli
from tests.cli.test_outputs_stable import FIXTURES, GOLDEN, VIEWS

REPO = Path(__file__).resolve().parents[2]
HOSTS = REPO / "tests" / "fixtures" / "hosts"


def mcpnode(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mcpnode", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        check=False,
    )


def test_fast_outputs_are_the_committed_ones() -> None:
    """Every fixture, every view: the fast path's bytes hash to test_outputs_stable's."""
    import hashlib

    golden = json.loads(GOLDEN.read_text())
    for name in FIXTURES:
        for view, args in VIEWS.items():
            res = mcpnode(*args, "--root", str(HOSTS / name))
            assert res.returncode == 0, res.stderr
            got = hashlib.sha256(res.stdout.encode()).hexdigest()
            assert got == golden[name][view], (name, view)


def test_options_in_every_form_click_accepts() -> None:
    root = str(HOSTS / "hgx-h100-8gpu-8nic")
    want = mcpnode("topo", "--format", "json", "--root", root).stdout
    assert mcpnode("topo", f"--root={root}", "--format=json").stdout == want
    assert mcpnode("topo", "--tree", "--root", root).stdout == (
        CliRunner().invoke(cli, ["topo", "--tree", "--root", root]).stdout
    )


def test_help_and_version_are_clicks() -> None:
    runner = CliRunner()
    assert runner.invoke(cli, ["--help"], prog_name="mcpnode", terminal_width=80).output == HELP, (
        "cli/help_text.py is stale: python -m mcpnode.cli.fast --write-help"
    )
    for argv in (["--help"], ["-h"], []):
        assert mcpnode(*argv).stdout == HELP
    narrow = mcpnode("--help", env={"COLUMNS": "50"})
    assert narrow.stdout != HELP and "Usage: " in narrow.stdout  # click itself, 50 wide
    version = mcpnode("--version")
    assert version.returncode == 0
    assert version.stdout == runner.invoke(cli, ["--version"], prog_name="mcpnode").output


@pytest.mark.parametrize(
    "argv",
    [
        ["topo", "--help"],
        ["topo", "--bogus"],
        ["topo", "--format", "yaml"],
        ["topo", "--root"],
        ["gpus", "--tree"],
        ["topo", "--tree=yes"],
    ],
)
def test_what_the_fast_path_does_not_serve_goes_to_click(argv: list[str]) -> None:
    fast = mcpnode(*argv)
    slow = subprocess.run(
        [sys.executable, "-c", "from mcpnode.cli.main import main; main()", *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert (fast.returncode, fast.stdout, fast.stderr) == (
        slow.returncode,
        slow.stdout,
        slow.stderr,
    )


def test_errors_are_one_line_with_clicks_exit_code(tmp_path: Path) -> None:
    res = mcpnode("topo", "--root", str(tmp_path / "missing"))
    assert res.returncode == 2
    assert res.stderr == f"mcpnode: --root {tmp_path / 'missing'}: no such file or directory\n"
    (tmp_path / "file").write_text("x")
    res = mcpnode("gpus", "--root", str(tmp_path / "file"))
    assert res.returncode == 2 and "not a directory, .tar.gz or .tar.bz2" in res.stderr


def test_a_reader_that_leaves_early_is_no_error() -> None:
    root = str(HOSTS / "hgx-h100-8gpu-8nic")
    proc = subprocess.Popen(
        [sys.executable, "-m", "mcpnode", "topo", "--format", "json", "--root", root],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.read(10)
    proc.stdout.close()  # like `| head -c 10`
    err = proc.stderr.read()
    assert proc.wait(timeout=30) == 0 and err == b""


# -- exec and manifest show --published ---------------------------------------------------------


def click_path(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from mcpnode.cli.main import main; main()", *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "KEEP_ME": "1"},
        check=False,
    )


def fast_path(*argv: str) -> subprocess.CompletedProcess[str]:
    """`python -m mcpnode`, with the interpreter's import log on stderr (`-X importtime`): the
    proof that click was never imported, which a matching output alone would not be."""
    return subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "mcpnode", *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "KEEP_ME": "1"},
        check=False,
    )


def imported(proc: subprocess.CompletedProcess[str]) -> set[str]:
    return {
        line.rsplit("|", 1)[1].strip()
        for line in proc.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }


def said(proc: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in proc.stderr.splitlines() if not line.startswith("import time:")]


@pytest.fixture(scope="module")
def published_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.placement.test_exec_manifest import BOOT, stamp
    from tests.support import placeroot

    why = placeroot.skip_reason()
    if why is not None:
        pytest.skip(why)
    root = placeroot.build(tmp_path_factory.mktemp("fast-exec"))
    stamp(root, BOOT, 4711)
    assert click_path("manifest", "publish", "--root", str(root)).returncode == 0
    return root


@pytest.mark.parametrize(
    "opts",
    [
        ["--gpu", "0"],
        ["--gpu=0", "--scope", "node", "--membind"],
        ["--scope=slice", "--preferred", "--gpu", "0", "--"],
        ["--gpu", "0", "--fresh"],  # discovery, with its notice line
        ["--gpu", "0", "--housekeeping", "none"],  # another policy: discovery too
    ],
)
def test_exec_is_clicks_without_click(published_root: Path, opts: list[str]) -> None:
    from tests.placement.test_exec import CHILD

    argv = ["exec", "--root", str(published_root), *opts, sys.executable, "-c", CHILD, "--", "x"]
    fast, slow = fast_path(*argv), click_path(*argv)
    assert slow.returncode == 0, slow.stderr
    assert (fast.returncode, fast.stdout, said(fast)) == (0, slow.stdout, said(slow))
    # Neither click nor typing, nor dataclasses with the inspect and ast it imports: the
    # launcher's start (docs/architecture.md, "What a command imports").
    assert not {"click", "typing", "dataclasses", "inspect"} & imported(fast)
    # the child really was placed (not only the same bytes): its affinity is a slice or node
    assert json.loads(fast.stdout)["env"]["KEEP_ME"] == "1"


@pytest.mark.parametrize(
    "opts",
    [
        ["--gpu", "7"],  # no such GPU: a usage error
        ["--gpu", "0", "--housekeeping", "bogus"],  # a bad policy
        ["--gpu", "0", "--fresh", "--root", "/nonexistent/root"],  # repeated --root: click's
    ],
)
def test_exec_errors_read_as_clicks(published_root: Path, opts: list[str]) -> None:
    argv = ["exec", "--root", str(published_root), *opts, "true"]
    fast, slow = fast_path(*argv), click_path(*argv)
    assert slow.returncode != 0
    assert (fast.returncode, fast.stdout, said(fast)) == (slow.returncode, slow.stdout, said(slow))


def test_exec_command_not_found_reads_as_clicks(published_root: Path) -> None:
    argv = ["exec", "--root", str(published_root), "--gpu", "0", "--", "/nonexistent/serve"]
    fast, slow = fast_path(*argv), click_path(*argv)
    assert slow.returncode == 127, slow.stderr
    assert (fast.returncode, said(fast)) == (slow.returncode, said(slow))
    assert "click" not in imported(fast)


R = "{root}"


@pytest.mark.parametrize(
    "argv",
    [
        ["exec", "--root", R, "--gpu", "0", "--dry-run", "true"],  # --dry-run, --format: click
        ["exec", "--help"],
        ["exec", "--root", R, "--gpu", "0"],  # no COMMAND
        ["exec", "--root", R, "true"],  # no --gpu
        ["exec", "--root", R, "--scope", "core", "--gpu", "0", "true"],
        ["exec", "--root", R, "--membind", "--preferred", "--gpu", "0", "true"],
        ["manifest", "show", "--root", R],  # a new manifest: discovery, audit, profile
        ["manifest", "show", "--root", R, "--published", "--housekeeping", "none"],
    ],
)
def test_exec_and_manifest_forms_not_served_go_to_click(
    published_root: Path, argv: list[str]
) -> None:
    argv = [str(published_root) if a == R else a for a in argv]
    fast, slow = fast_path(*argv), click_path(*argv)
    assert (fast.returncode, fast.stdout, said(fast)) == (slow.returncode, slow.stdout, said(slow))
    assert "click" in imported(fast)


@pytest.mark.parametrize("fmt", [[], ["--format", "json"], ["--format=text"]])
def test_manifest_show_published(published_root: Path, fmt: list[str]) -> None:
    argv = ["manifest", "show", "--published", "--root", str(published_root), *fmt]
    fast, slow = fast_path(*argv), click_path(*argv)
    assert slow.returncode == 0, slow.stderr
    assert (fast.returncode, fast.stdout, said(fast)) == (0, slow.stdout, said(slow))
    assert "click" not in imported(fast)
    missing = ["manifest", "show", "--published", "--root", str(HOSTS / "no-gpu-host")]
    fast, slow = fast_path(*missing), click_path(*missing)
    assert slow.returncode != 0
    assert (fast.returncode, said(fast)) == (slow.returncode, said(slow))


def test_shell_completion_is_clicks() -> None:
    """Completion runs the program with no arguments and the words in the environment: the
    fast path must not answer that with --help."""
    env = {"_MCPNODE_COMPLETE": "bash_complete", "COMP_WORDS": "mcpnode pro", "COMP_CWORD": "1"}
    res = mcpnode(env=env)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["plain,probe", "plain,profiles"]


# -- one command layer --------------------------------------------------------------------------

HGX = str(HOSTS / "hgx-h100-8gpu-8nic")
MISSING = "/nonexistent/root"


@pytest.mark.parametrize(
    ("argv", "served"),
    [
        (["topo", "--root", HGX], True),
        (["topo", "--tree", "--root", HGX], True),
        (["topo", "--format", "json", "--root", HGX], True),
        (["gpus", "--root", HGX], True),
        (["gpus", "--format=json", "--root", HGX], True),
        (["gpus", "--root", MISSING], True),
        (["manifest", "show", "--published", "--root", R], True),
        (["manifest", "show", "--published", "--format", "json", "--root", R], True),
        (["manifest", "show", "--published", "--root", str(HOSTS / "no-gpu-host")], True),
        (["exec", "--root", R, "--gpu", "0", "--", "CHILD"], True),
        (["exec", "--root", R, "--gpu", "0", "--fresh", "--scope", "node", "CHILD"], True),
        (["exec", "--root", R, "--gpu", "bogus", "true"], True),
        (["exec", "--root", MISSING, "--gpu", "0", "true"], True),
        (["exec", "--root", R, "--gpu", "0", "--", "/nonexistent/serve"], True),
        (["exec", "--root", R, "--gpu", "0", "--dry-run", "true"], False),
        (["exec", "--root", R, "--gpu", "0", "--dry-run", "--format", "json", "true"], False),
    ],
)
def test_both_entry_points_say_the_same(
    published_root: Path, argv: list[str], served: bool
) -> None:
    """Each command both ways, `python -m mcpnode` (the console script's cli/fast.py main) and
    click's main: the same stdout, stderr and exit status, and the fast path really served what
    it serves (click never imported), so the two cannot drift apart unseen."""
    from tests.placement.test_exec import CHILD

    child = [sys.executable, "-c", CHILD]
    argv = [x for a in argv for x in (child if a == "CHILD" else [a])]
    argv = [str(published_root) if a == R else a for a in argv]
    fast, slow = fast_path(*argv), click_path(*argv)
    assert (fast.returncode, fast.stdout, said(fast)) == (slow.returncode, slow.stdout, said(slow))
    assert ("click" not in imported(fast)) == served


def test_the_fast_path_only_parses_and_prints() -> None:
    """cli/fast.py reaches the commands through cli/commands.py alone: no renderer, discovery or
    placement of its own (a second copy of a command's body would need one of those)."""
    import ast

    tree = ast.parse((REPO / "mcpnode" / "cli" / "fast.py").read_text())
    names = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    names |= {
        f"{node.module}.{alias.name}"
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    allowed = (
        "mcpnode.cli.commands",  # the command bodies
        "mcpnode.cli.placing.",  # exec's parsed placement options, the commands' input
        "mcpnode.cli.errors.",  # one line and an exit status per error
        "mcpnode.errors.",
        "mcpnode.cli.help_text.",  # click's --help text, generated
        "mcpnode.cli.main.",  # click's path, and write_help
        "mcpnode.cli.color.",  # the one rule for --color (use_color), as click's path decides
    )
    ours = {n for n in names if n.startswith("mcpnode")}
    assert {n for n in ours if not n.startswith(allowed)} == {"mcpnode.__version__"}, ours


# -- what the hot commands import ---------------------------------------------------------------

# Never imported by `topo` and `gpus` (codec/typenames.py says why): typing (on 3.11 it brings re,
# enum, collections, functools and contextlib) and contextlib. Nor, unless a snapshot's recorded
# NVML answers are read (json, which brings the rest), re, enum, collections and functools: the
# JSON output is written without json (codec/jsonout.py). A tarball's pax headers compile their
# record pattern (host/tarball.py): the one here is GNU tar's default format, which has none.
NEVER_IMPORTED = {"typing", "contextlib"}
JSON_ALONE_IMPORTS = {"json", "re", "enum", "collections", "functools"}
CONSOLE_SCRIPT = "import sys; from mcpnode.cli.fast import main; sys.exit(main())"


@pytest.mark.parametrize("view", sorted(VIEWS))
@pytest.mark.parametrize("fixture", ["no-gpu-host", "hgx-h100-8gpu-8nic", "no-gpu-host.tar.gz"])
def test_topo_and_gpus_import_neither_typing_nor_re(
    view: str, fixture: str, tmp_path: Path
) -> None:
    root = HOSTS / fixture
    if fixture.endswith(".tar.gz"):
        import tarfile

        root = tmp_path / fixture
        with tarfile.open(root, "w:gz", format=tarfile.GNU_FORMAT) as tar:
            tar.add(HOSTS / fixture.removesuffix(".tar.gz"), arcname=".")
    # As the console script runs it (`python -m` would add runpy's own imports).
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", CONSOLE_SCRIPT, *VIEWS[view], "--root", root],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, said(proc)
    got = imported(proc)
    assert "mcpnode.topology.discover" in got and "click" not in got  # the fast path's log
    assert not NEVER_IMPORTED & got
    snapshot = (HOSTS / fixture.removesuffix(".tar.gz") / "mcpnode-snapshot.json").exists()
    assert ("json" in got) == snapshot
    if not snapshot:
        assert not JSON_ALONE_IMPORTS & got
