"""codec/jsonout.py with ensure_ascii=False writes json.dumps(obj, indent=2,
ensure_ascii=False)'s exact text (the published manifest's): on the generated documents of
tests/codec/test_jsonout.py, whose strings hold what json escapes and what it leaves as is without
ASCII (é, 中文, an emoji, control characters), and on a manifest of the HGX fixture."""

from __future__ import annotations

import json
import random
from datetime import datetime, timezone

import pytest

from mcpnode.codec import jsonout
from mcpnode.host import Host
from mcpnode.placement.build import make_manifest
from mcpnode.placement.manifest import dumps
from tests.codec.test_jsonout import _doc
from tests.support import auditroot


@pytest.mark.parametrize("seed", range(40))
def test_generated_documents(seed: int) -> None:
    doc = _doc(random.Random(seed), 6)
    want = json.dumps(doc, indent=2, ensure_ascii=False)
    assert jsonout.dumps(doc, ensure_ascii=False) == want
    assert jsonout.dumps(doc) == json.dumps(doc, indent=2)


def test_text_json_leaves_alone_is_not_escaped() -> None:
    doc = {"é": ["中文", "\U0001f600", "tab\t", "\x00"]}
    got = jsonout.dumps(doc, ensure_ascii=False)
    assert got == json.dumps(doc, indent=2, ensure_ascii=False)
    assert "中文" in got and "\\t" in got and "\\u0000" in got


def test_the_manifest_text() -> None:
    now = datetime(2025, 6, 1, tzinfo=timezone.utc)
    with Host(auditroot.HOSTS / auditroot.HGX) as host:
        manifest = make_manifest(host, now=now)
    manifest["note"] = "nœud 中文"  # what the file may hold beyond ASCII
    assert dumps(manifest) == json.dumps(manifest, indent=2, ensure_ascii=False) + "\n"
