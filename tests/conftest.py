"""Session-wide fixtures."""

from __future__ import annotations

import pytest

from tests import wheelbuild


@pytest.fixture(scope="session")
def built_wheel(tmp_path_factory: pytest.TempPathFactory) -> tuple[object, str]:
    """(path of the wheel of this checkout, pip's build output), built once per session."""
    return wheelbuild.build(tmp_path_factory.mktemp("wheel"))
