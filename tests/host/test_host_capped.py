"""Host.read_optional with a limit: the read stops at the cap (a growing file costs cap + 1
bytes), absence is None, everything else a typed HostError; symlinks resolve inside the root.
And the bounded YAML loader (mcpnode/codec/yaml_bounded.py) it feeds."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from mcpnode.codec.yaml_bounded import MAX_ALIASES, MAX_DEPTH, YamlRejected, load_bounded
from mcpnode.errors import ReadError
from mcpnode.host import Host


def test_within_cap_and_exactly_at_it(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"x" * 100)
    with Host(tmp_path) as h:
        assert h.read_optional("/f", limit=100) == "x" * 100
        assert h.read_optional("/f", limit=1000) == "x" * 100


def test_over_cap_raises_efbig_naming_the_cap(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"x" * 101)
    with Host(tmp_path) as h, pytest.raises(ReadError) as exc:
        h.read_optional("/f", limit=100)
    assert exc.value.errno == errno.EFBIG
    assert str(exc.value).startswith("/f: larger than 100 bytes")


def test_endless_file_is_never_read() -> None:
    """/dev/zero never ends: a device node is refused, never read (live root, read-only)."""
    with pytest.raises(ReadError, match="device node"):
        Host("/").read_optional("/dev/zero", limit=4096)


def test_absent_is_none_and_a_directory_raises(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    with Host(tmp_path) as h:
        assert h.read_optional("/missing/file", limit=10) is None
        with pytest.raises(ReadError):
            h.read_optional("/d", limit=10)


def test_symlink_resolves_inside_the_root(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "real").write_text("inside\n")
    os.symlink("/etc/real", tmp_path / "link")  # absolute: the root acts as /
    with Host(tmp_path) as h:
        assert h.read_optional("/link", limit=100) == "inside\n"


def test_recorded_for_snapshots(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("a: 1\n")
    with Host(tmp_path) as h, h.recording() as rec:
        h.read_optional("/f", limit=100)
    assert rec.files == {"/f": b"a: 1\n"}


# -- bounded YAML -----------------------------------------------------------------------------


def test_plain_documents() -> None:
    assert load_bounded("a: 1\nb: [x, 'y']\nc: {d: null}\n") == {
        "a": 1,
        "b": ["x", "y"],
        "c": {"d": None},
    }
    assert load_bounded("") is None
    anchors = "base: &b {x: 1}\n" + "".join(f"k{i}: *b\n" for i in range(MAX_ALIASES))
    assert len(load_bounded(anchors)) == MAX_ALIASES + 1


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), "nested deeper than 64 levels"),
        ("a: " + "{b: " * 2000 + "1" + "}" * 2000, "nest"),
        (
            "a: &a [x]\n" + "".join(f"k{i}: *a\n" for i in range(MAX_ALIASES + 1)),
            "more than 16 aliases",
        ),
        ("a: b: c\n", "mapping values are not allowed in this context at line 1"),
        ("a: 1\n---\nb: 2\n", "expected a single document"),
        ("!!python/object/apply:os.system ['true']\n", "could not determine a constructor"),
        ("{[1]: 2}\n", "unhashable"),
        ("when: 2024-13-45\n", "month must be in 1..12"),
    ],
)
def test_rejected_in_one_line(text: str, words: str) -> None:
    with pytest.raises(YamlRejected) as exc:
        load_bounded(text)
    assert words in str(exc.value)
    assert "\n" not in str(exc.value)
