"""The repository explains itself: what ships (code, units, profiles, the role, manifests) and
what users read (README.md, docs/) cites `docs/...`, the kernel, the driver or a peer's source,
never the project's own planning material, which a reader of the repository does not have: the
design notes and style guide kept outside it, the research folder beside the checkout, or an
issue number of the project's tracker.

Tests may read that folder when it is present (and skip with a message when it is not), so
tests/ is not scanned. An upstream project's issue is cited with its repository
(`redhat-performance/tuned#851`, `procps-ng issue #200`), which the patterns below allow.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

SCANNED = (
    "README.md",
    "docs",
    "mcpnode",
    "systemd",
    "etc",
    "profiles",
    "deploy",
    "ansible",
    "image",
    "tools",
    "Containerfile",
    "Makefile",
    "pyproject.toml",
)
SUFFIXES = {".md", ".py", ".service", ".toml", ".yml", ".yaml", ".j2", ".sh", ".cfg", ".ini", ""}

FORBIDDEN = {
    "the design notes": re.compile(r"\bDESIGN\.md\b"),
    "the style guide": re.compile(r"\bSTYLE\.md\b"),
    "the shared folder": re.compile(
        r"\.\./shared\b|(?<![\w/])shared/(reference|hosts|nvidia-topo)"
    ),
    "a research note": re.compile(r"\b(host-facts|nvml-api|gpu-affinity-peers)\.md\b"),
    # "issue 7", "issues 9-11", "(issue 15)": the tracker's numbering. Not "issue #200".
    "a tracker issue": re.compile(r"\bissues? \d+\b", re.IGNORECASE),
}


def files() -> list[Path]:
    out: list[Path] = []
    for name in SCANNED:
        path = REPO / name
        if path.is_file():
            out.append(path)
        elif path.is_dir():
            out.extend(
                p
                for p in sorted(path.rglob("*"))
                if p.is_file() and p.suffix in SUFFIXES and "__pycache__" not in p.parts
            )
    return out


def test_the_scan_sees_the_sources() -> None:
    seen = {p.relative_to(REPO).as_posix() for p in files()}
    for expected in ("README.md", "docs/architecture.md", "mcpnode/agent/service.py"):
        assert expected in seen


@pytest.mark.parametrize("what", sorted(FORBIDDEN))
def test_nothing_cites_material_outside_the_repository(what: str) -> None:
    pattern = FORBIDDEN[what]
    hits = [
        f"{path.relative_to(REPO)}:{number}: {line.strip()}"
        for path in files()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if pattern.search(line)
    ]
    assert not hits, f"cites {what}, which a reader of the repository does not have:\n" + (
        "\n".join(hits)
    )


@pytest.mark.parametrize(
    ("text", "cites"),
    [
        ("see DESIGN.md, Agent", True),
        ("(../shared/reference/host-facts.md §5.3)", True),
        ("host-facts.md 3.1", True),
        ("the rules (issue 6)", True),
        ("issues 9-11", True),
        ("procps-ng issue #200", False),
        ("redhat-performance/tuned#851", False),
        ("docs/architecture.md", False),
    ],
)
def test_patterns(text: str, cites: bool) -> None:
    assert any(p.search(text) for p in FORBIDDEN.values()) is cites
