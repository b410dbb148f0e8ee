"""The exposure figures the README and docs/service.md quote for mcpnode.service are the ones
`systemd-analyze security --offline=yes` measures on the unit as shipped (a figure copied once
and left behind when the unit changed is how the README came to say 3.1 beside a measured 3.4)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.deploy.test_systemd_units import AGENT_UNIT, installable, needs_analyze, security

REPO = Path(__file__).resolve().parents[2]


def quoted() -> dict[str, float]:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    service = (REPO / "docs" / "service.md").read_text(encoding="utf-8")
    said = re.search(r"exposure (\d+\.\d) in `systemd-analyze security`", readme)
    table = re.search(r"^\| `mcpnode\.service` \| \*\*(\d+\.\d)\*\* ", service, re.MULTILINE)
    assert said is not None and table is not None, "the figures moved: update this test"
    return {"README.md": float(said.group(1)), "docs/service.md": float(table.group(1))}


@needs_analyze
def test_quoted_exposure_is_measured(tmp_path: Path) -> None:
    units = installable(tmp_path / "units")
    proc, exposure, _ = security(units[AGENT_UNIT.name], tmp_path / "units", threshold=100)
    assert proc.returncode == 0, proc.stderr
    assert quoted() == {"README.md": exposure, "docs/service.md": exposure}
