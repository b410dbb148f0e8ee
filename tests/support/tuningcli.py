"""Run `mcpnode` in-process through `main()` (exit codes and the error-to-exit mapping included),
capturing stdout and stderr; and as a real subprocess where the process itself matters."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys

from mcpnode.cli.main import main


def run_cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code: int | str | None = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(list(args))
        except SystemExit as exit_:
            code = exit_.code
    assert isinstance(code, int)
    return code, out.getvalue(), err.getvalue()


def run_process(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mcpnode", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=timeout,
        check=False,
    )
