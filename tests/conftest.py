"""Session-wide fixtures."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import wheelbuild


@pytest.fixture(scope="session")
def built_wheel(tmp_path_factory: pytest.TempPathFactory) -> tuple[object, str]:
    """(path of the wheel of this checkout, pip's build output), built once per session."""
    return wheelbuild.build(tmp_path_factory.mktemp("wheel"))


@pytest.fixture
def tmpdir_watch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The temporary directory of this test, for Python and children alike: it must still be
    empty when the test ends (a tarball root is read in place; tests also look inside it while
    an archive is open). The tarball tests use it for every test (`pytestmark`)."""
    d = tmp_path / "tmp"
    d.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(d))
    monkeypatch.setenv("TMPDIR", str(d))
    yield d
    assert list(d.iterdir()) == [], "a tarball root wrote to the temporary directory"
