"""Every runtime dependency pyproject.toml declares is imported by mcpnode, and nothing mcpnode
imports from outside the standard library is undeclared.

A declared package that nothing imports is installed on every host for nothing (psutil was,
until it was dropped: see the comment in pyproject.toml); an undeclared import works in the dev
venv and fails on a host installed from the wheel.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# Distribution name (normalised) -> the top-level module it provides, where they differ.
IMPORT_NAME = {
    "nvidia-ml-py": "pynvml",
    "pyyaml": "yaml",
    "prometheus-client": "prometheus_client",
    "cuda-bindings": "cuda",
}


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _pyproject() -> dict[str, object]:
    tomllib = importlib.import_module("tomllib" if sys.version_info >= (3, 11) else "tomli")
    data: dict[str, object] = tomllib.loads((REPO / "pyproject.toml").read_text())
    return data


def declared(extra: str | None = None) -> dict[str, str]:
    """Top-level module -> the requirement declaring it (runtime, or one optional extra)."""
    project = _pyproject()["project"]
    assert isinstance(project, dict)
    reqs = project["dependencies"] if extra is None else project["optional-dependencies"][extra]
    out = {}
    for req in reqs:
        name = _normalise(re.split(r"[<>=!~;\[ ]", req, maxsplit=1)[0])
        out[IMPORT_NAME.get(name, name.replace("-", "_"))] = req
    return out


def imported() -> dict[str, str]:
    """Top-level modules mcpnode's sources import (lazily or not) -> a file that does."""
    found: dict[str, str] = {}
    for py in sorted((REPO / "mcpnode").rglob("*.py")):
        tree = ast.parse(py.read_text(encoding="utf-8"), str(py))
        # `if TYPE_CHECKING:` bodies never run: what they import is the type checker's
        # (typing_extensions comes with mypy), not a host's.
        checker_only = {
            id(inner)
            for node in ast.walk(tree)
            if isinstance(node, ast.If)
            and isinstance(node.test, ast.Name)
            and node.test.id == "TYPE_CHECKING"
            for stmt in node.body
            for inner in ast.walk(stmt)
        }
        for node in ast.walk(tree):
            if id(node) in checker_only:
                continue
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                found.setdefault(name.split(".")[0], py.relative_to(REPO).as_posix())
    return found


def test_every_runtime_dependency_is_used() -> None:
    used = imported()
    unused = {mod: req for mod, req in declared().items() if mod not in used}
    assert not unused, f"declared in pyproject.toml but never imported by mcpnode: {unused}"


def test_every_third_party_import_is_declared() -> None:
    allowed = {*declared(), *declared("probe"), "mcpnode", "__future__"}
    # tomllib is 3.11's; on 3.10 the tomli backport is the declared dependency.
    stdlib = set(sys.stdlib_module_names) | {"tomllib"}
    stray = {mod: where for mod, where in imported().items() if mod not in allowed | stdlib}
    assert not stray, f"imported but not declared in pyproject.toml: {stray}"


def test_psutil_is_gone() -> None:
    assert "psutil" not in declared()
    assert "psutil" not in imported()
