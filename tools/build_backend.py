"""The PEP 517 build backend of mcpnode: setuptools' own, with one step first.

Before a wheel (or an editable install) is built, tools/manpages.py writes the man pages and the
shell completion scripts under build/data/ from this checkout's click command tree, and
pyproject.toml's [tool.setuptools.data-files] ships them (share/man/man1, bash-completion,
zsh site-functions, fish vendor_completions.d). Generating them here, not committing them,
means they cannot fall behind the commands. It needs click in the build environment
(pyproject.toml, [build-system] requires), nothing else: mcpnode.cli.main imports click and
mcpnode's own modules only.

pyproject.toml points at this file with `backend-path = ["tools"]` (PEP 517, in-tree backends).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from setuptools import build_meta as _setuptools
from setuptools.build_meta import (  # noqa: F401 - re-exported: the rest of the PEP 517 hooks
    build_sdist,
    get_requires_for_build_editable,
    get_requires_for_build_sdist,
    get_requires_for_build_wheel,
    prepare_metadata_for_build_editable,
    prepare_metadata_for_build_wheel,
)

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "build" / "data"


def _generate() -> None:
    # The source tree first, so the pages describe this checkout and not an installed mcpnode.
    sys.path.insert(0, str(REPO))
    try:
        from tools import manpages

        manpages.write_all(DATA)
    finally:
        sys.path.remove(str(REPO))
    # setuptools resolves data-files globs against the working directory: the project root.
    if Path.cwd().resolve() != REPO:
        raise RuntimeError(f"build from the project root {REPO}, not {Path.cwd()}")


def build_wheel(
    wheel_directory: str,
    config_settings: dict[str, Any] | None = None,
    metadata_directory: str | None = None,
) -> str:
    _generate()
    name: str = _setuptools.build_wheel(wheel_directory, config_settings, metadata_directory)
    return name


def build_editable(
    wheel_directory: str,
    config_settings: dict[str, Any] | None = None,
    metadata_directory: str | None = None,
) -> str:
    _generate()
    name: str = _setuptools.build_editable(wheel_directory, config_settings, metadata_directory)
    return name
