"""Every exporter on every recorded host against its golden file (tests/fixtures/export/).

The audit input is a fixed summary (tests/exportcase.AUDIT), so these goldens change only when
an exporter, discovery or placement does. Regenerate after an intended change with
`MCPNODE_UPDATE_GOLDEN=1 pytest tests/placement/test_export_golden.py` and review the diff.
"""

from __future__ import annotations

import os

import pytest

from mcpnode.placement.exporters import ansible, nfd, prom, slurm
from mcpnode.placement.exporters.write import Renderer
from tests.support.exportcase import AUDIT, FIXTURES, GOLDEN, placement, topology

KINDS: dict[str, tuple[str, Renderer]] = {
    "nfd": ("nfd-features", nfd.render),
    "prom": ("mcpnode.prom", prom.render),
    "slurm": ("gres.conf", slurm.render),
    "ansible": ("mcpnode.fact", ansible.render),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("fixture", FIXTURES)
def test_golden(fixture: str, kind: str) -> None:
    name, render = KINDS[kind]
    got = render(topology(fixture), placement(fixture), AUDIT)
    path = GOLDEN / fixture / name
    if os.environ.get("MCPNODE_UPDATE_GOLDEN"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(got)
    assert path.exists(), f"no golden {path}: run with MCPNODE_UPDATE_GOLDEN=1"
    assert got == path.read_text(), f"{fixture} {kind} differs from {path}"


def test_every_golden_has_a_case() -> None:
    names = {name for name, _ in KINDS.values()}
    found = {(p.parent.name, p.name) for p in GOLDEN.glob("*/*")}
    assert found == {(f, n) for f in FIXTURES for n in names}


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("fixture", FIXTURES)
def test_render_is_deterministic(fixture: str, kind: str) -> None:
    _, render = KINDS[kind]
    assert render(topology(fixture), placement(fixture), AUDIT) == render(
        topology(fixture), placement(fixture), AUDIT
    )
