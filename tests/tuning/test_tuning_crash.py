"""Crash safety: SIGKILL after the N-th write (MCPNODE_FAULT_KILL_AFTER_WRITES=N), for every N,
then the next run restores exactly the original values.

The runs that get killed in the exhaustive loops over apply are real `mcpnode` subprocesses
(the hook kills the whole process, as a power cut would). Recovery runs, the loop over rollback
and the random sequences fork this process instead (the same `main()`, without an interpreter
start-up each time), so the whole file stays well under 20 s on a 2-CPU machine. Roots live in
/dev/shm where there is one: copying a tree to a virtual disk costs more than the runs.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import io
import os
import shutil
import signal
import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mcpnode.cli.render_tuning

# Imported here so that forked children do not import them again, each time.
import mcpnode.logs
import mcpnode.tuning.apply  # noqa: F401
from mcpnode.cli.main import main
from mcpnode.host import FAULT_ENV
from mcpnode.host import write as host_module
from tests.support.tuningcli import run_process
from tests.support.tuningroot import build, kernel_view, write_profiles

KILLED = -signal.SIGKILL
PROFILE = ("--profile", "latency")


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        path = Path(tempfile.mkdtemp(prefix="mcpnode-crash-", dir="/dev/shm"))
        yield path
        shutil.rmtree(path, ignore_errors=True)
    else:
        yield tmp_path_factory.mktemp("crash")


@pytest.fixture(scope="module")
def template(scratch: Path) -> tuple[Path, Path]:
    return build(scratch / "template/root"), write_profiles(scratch / "template/profiles")


@pytest.fixture
def tmp(scratch: Path, request: pytest.FixtureRequest) -> Path:
    path = scratch / str(request.node.name)
    path.mkdir()
    return path


def fresh(template: tuple[Path, Path], dest: Path) -> Path:
    root = dest / "root"
    shutil.copytree(template[0], root, symlinks=True)
    return root


def settled(root: Path) -> dict[str, object]:
    """The kernel view minus the empty directories mcpnode may leave (var/lib/mcpnode)."""
    view = kernel_view(root)
    leftovers = {"var", "var/lib", "var/lib/mcpnode"}
    return {k: v for k, v in view.items() if k not in leftovers}


def forked(argv: list[str], kill_after: int | None = None) -> int:
    """Run `mcpnode ARGV` in a forked child; its exit status, or -signal when killed."""
    gc.freeze()  # the child's collector must not walk (and so copy) the parent's whole heap
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        gc.disable()
        code = 70
        try:
            with (
                contextlib.redirect_stdout(io.StringIO()),
                contextlib.redirect_stderr(io.StringIO()),
            ):
                if kill_after is None:
                    os.environ.pop(FAULT_ENV, None)
                else:
                    os.environ[FAULT_ENV] = str(kill_after)
                host_module._writes_done = 0
                try:
                    main(argv)
                except SystemExit as exit_:
                    code = exit_.code if isinstance(exit_.code, int) else 1
        finally:
            os._exit(code)
    gc.unfreeze()
    _, status = os.waitpid(pid, 0)
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def _apply_argv(root: Path, profiles: Path, *extra: str) -> list[str]:
    return [
        "apply",
        *PROFILE,
        "--persist",
        "--root",
        str(root),
        "--profiles-dir",
        str(profiles),
        *extra,
    ]


def _rollback_argv(root: Path) -> list[str]:
    return ["rollback", "--root", str(root)]


def _parallel(jobs: list[Callable[[], None]]) -> None:
    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 2)) as pool:
        for future in [pool.submit(job) for job in jobs]:
            future.result()


def test_apply_killed_after_every_write_then_rollback(
    template: tuple[Path, Path], tmp: Path
) -> None:
    original = settled(template[0])
    total = count_apply_writes(template, tmp)
    assert total == 12  # journal, 9 values, persisted file, journal again

    roots = {n: fresh(template, tmp / f"n{n}") for n in range(1, total + 2)}

    def crash(n: int) -> None:
        crashed = run_process(*_apply_argv(roots[n], template[1]), env={FAULT_ENV: str(n)})
        assert crashed.returncode == (KILLED if n <= total else 0), crashed.stderr

    _parallel([functools.partial(crash, n) for n in roots])
    for n, root in roots.items():
        assert forked(_rollback_argv(root)) == 0
        assert settled(root) == original, f"after a kill at write {n}"


def test_apply_killed_after_every_write_then_apply_then_rollback(
    template: tuple[Path, Path], tmp: Path
) -> None:
    original = settled(template[0])
    total = count_apply_writes(template, tmp)
    roots = {n: fresh(template, tmp / f"n{n}") for n in range(1, total + 2)}

    def crash(n: int) -> None:
        crashed = run_process(*_apply_argv(roots[n], template[1]), env={FAULT_ENV: str(n)})
        assert crashed.returncode == (KILLED if n <= total else 0), crashed.stderr

    _parallel([functools.partial(crash, n) for n in roots])
    verify_argv = ["verify", *PROFILE, "--profiles-dir", str(template[1])]
    for n, root in roots.items():
        assert forked(_apply_argv(root, template[1])) == 0
        assert forked([*verify_argv, "--root", str(root)]) == 0, f"drift after a kill at {n}"
        assert forked(_rollback_argv(root)) == 0
        assert settled(root) == original, f"after a kill at write {n}"


def count_apply_writes(template: tuple[Path, Path], tmp: Path) -> int:
    for n in range(1, 100):
        root = fresh(template, tmp / f"count{n}")
        if forked(_apply_argv(root, template[1]), n) != KILLED:
            return n - 1
    raise AssertionError("apply never finished")


def test_rollback_killed_after_every_write_then_rollback_or_apply(
    template: tuple[Path, Path], tmp: Path
) -> None:
    original = settled(template[0])
    n = 0
    while True:
        n += 1
        root = fresh(template, tmp / f"n{n}")
        assert forked(_apply_argv(root, template[1])) == 0
        status = forked(_rollback_argv(root), n)
        if n % 2:
            # finish with a rollback
            assert forked(_rollback_argv(root)) == 0
        else:
            # an apply first finishes the interrupted rollback, then applies; then roll back
            assert forked(_apply_argv(root, template[1])) == 0
            assert forked(_rollback_argv(root)) == 0
        assert settled(root) == original, f"after a kill at rollback write {n}"
        if status != KILLED:
            assert n > 10
            break


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["apply-latency", "apply-base", "rollback"]),
            st.one_of(st.none(), st.integers(1, 14)),
        ),
        min_size=1,
        max_size=4,
    )
)
def test_random_kills_always_recover(
    template: tuple[Path, Path], tmp: Path, runs: list[tuple[str, int | None]]
) -> None:
    original = settled(template[0])
    root = fresh(template, Path(tempfile.mkdtemp(dir=tmp)))
    for what, kill_after in runs:
        if what == "rollback":
            argv = _rollback_argv(root)
        else:
            name = what.removeprefix("apply-")
            argv = [
                "apply",
                "--profile",
                name,
                "--root",
                str(root),
                "--profiles-dir",
                str(template[1]),
            ]
            if kill_after is not None and kill_after % 2:
                argv.append("--persist")
        status = forked(argv, kill_after)
        assert status in (0, KILLED), f"{what} exited {status}"
    assert forked(_rollback_argv(root)) == 0
    assert settled(root) == original
