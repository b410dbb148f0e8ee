"""The manifest (placement/manifest.py, placement/build.py): golden for the HGX fixture with a
fixed time, the schema on every fixture, the content hash, and loading with its refusals.

Regenerate the golden after an intended change with
`MCPNODE_UPDATE_GOLDEN=1 pytest tests/placement/test_manifest.py` and review the diff."""

from __future__ import annotations

import copy
import json
import os
from datetime import datetime, timezone
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from mcpnode.errors import ManifestError
from mcpnode.host import Host
from mcpnode.placement.build import make_manifest
from mcpnode.placement.manifest import (
    SCHEMA,
    content_hash,
    dumps,
    parse_manifest,
)
from tests.support.schema import validate

TESTS = Path(__file__).resolve().parents[1]
HOSTS = TESTS / "fixtures" / "hosts"
GOLDEN = TESTS / "fixtures" / "manifest"
SCHEMA_FILE = TESTS.parent / "docs" / "manifest-schema.json"
FIXTURES = sorted(p.name for p in HOSTS.iterdir() if p.is_dir())
NOW = datetime(2025, 6, 1, 12, 0, 0, tzinfo=timezone.utc)


@cache
def manifest_of(name: str) -> str:
    return dumps(make_manifest(Host(HOSTS / name), now=NOW))


def load(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(manifest_of(name))
    return doc


def test_golden_hgx() -> None:
    path = GOLDEN / "hgx-h100-8gpu-8nic.json"
    text = manifest_of("hgx-h100-8gpu-8nic")
    if os.environ.get("MCPNODE_UPDATE_GOLDEN"):
        path.write_text(text)
    assert path.exists(), "no golden: run with MCPNODE_UPDATE_GOLDEN=1"
    assert text == path.read_text()


@pytest.mark.parametrize("name", FIXTURES)
def test_schema(name: str) -> None:
    schema = json.loads(SCHEMA_FILE.read_text())
    assert validate(load(name), schema) == []


def test_golden_matches_schema() -> None:
    schema = json.loads(SCHEMA_FILE.read_text())
    golden = json.loads((GOLDEN / "hgx-h100-8gpu-8nic.json").read_text())
    assert validate(golden, schema) == []


def test_schema_rejects_unknown_fields() -> None:
    """The validator (and so the schema) is strict: a typo'd or new field fails the tests."""
    schema = json.loads(SCHEMA_FILE.read_text())
    doc = load("hgx-h100-8gpu-8nic")
    doc["placement"]["gpus"][0]["slice"] = "1-2"
    assert validate(doc, schema) == [
        "$.placement.gpus[0]: Additional properties are not allowed ('slice' was unexpected)"
    ]


def test_hgx_contents() -> None:
    doc = load("hgx-h100-8gpu-8nic")
    assert doc["schema"] == SCHEMA
    assert doc["generated_at"] == "2025-06-01T12:00:00+00:00"
    assert doc["host"] == {
        "hostname": "hgx-h100-node01",
        "machine_id": None,
        "kernel": "5.15.0-119-generic",
        "driver": "570.133.20",
        "cuda_driver": "12.8",
        "container_toolkit": None,
    }
    assert [n["cpus"] for n in doc["numa_nodes"]] == ["0-47,96-143", "48-95,144-191"]
    assert len(doc["gpus"]) == 8 and len(doc["placement"]["gpus"]) == 8
    g0 = doc["placement"]["gpus"][0]
    assert g0["slice_cpus"] == "1-12,97-108"
    assert g0["env"]["NCCL_IB_HCA"] == "=mlx5_0:1"
    # The recorded host names no profile (no agent, journal, persisted file or config): its
    # compliance is unknown, not "true" against a profile nobody chose.
    assert doc["tuning"] == {
        "profile": None,
        "source": "none",
        "compliant": None,
        "unknown_reason": "no active profile: not tuned by mcpnode",
        "drift": [],
        "error": None,
    }
    assert doc["audit"]["failed"] == []
    assert sum(doc["audit"]["counts"].values()) > 0


def test_hash_ignores_time_and_tracks_content() -> None:
    host = Host(HOSTS / "hgx-h100-8gpu-8nic")
    a = make_manifest(host, now=NOW)
    b = make_manifest(host, now=datetime(2030, 1, 1, tzinfo=timezone.utc))
    assert a["generated_at"] != b["generated_at"]
    assert a["content_hash"] == b["content_hash"] == content_hash(a)
    c = make_manifest(host, now=NOW, housekeeping="none")
    assert c["content_hash"] != a["content_hash"]


def test_hash_is_over_canonical_json() -> None:
    doc = load("dgx-a100")
    reordered = dict(reversed(list(doc.items())))
    assert content_hash(reordered) == doc["content_hash"]


@pytest.mark.parametrize("name", FIXTURES)
def test_parse_round_trip(name: str) -> None:
    assert parse_manifest(manifest_of(name)) == load(name)


def test_machine_id_and_housekeeping(tmp_path: Path) -> None:
    from tests.placement.test_manifest_publish import copy_fixture

    root = copy_fixture("h100-nvl-pair", tmp_path)
    (root / "etc").mkdir(exist_ok=True)
    (root / "etc" / "machine-id").write_text("0123456789abcdef0123456789abcdef\n")
    doc = make_manifest(Host(root), now=NOW, housekeeping="none")
    assert doc["host"]["machine_id"] == "0123456789abcdef0123456789abcdef"
    assert doc["placement"]["housekeeping_policy"] == "none"
    assert doc["placement"]["housekeeping_cpus"] == ""


# -- refusals ----------------------------------------------------------------------------------


def _rehash(doc: dict[str, Any]) -> str:
    doc["content_hash"] = content_hash(doc)
    return json.dumps(doc)


def test_newer_schema_refused() -> None:
    doc = copy.deepcopy(load("h100-nvl-pair"))
    doc["schema"] = "mcpnode.manifest/v2"
    with pytest.raises(ManifestError, match=r"mcpnode\.manifest/v2 is newer than this mcpnode"):
        parse_manifest(_rehash(doc))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "not JSON"),
        ("[]", "not a JSON object"),
        ('{"schema": "mcpnode.audit/v1"}', "is not mcpnode.manifest/v1"),
        ('{"no": "schema"}', "schema None"),
        ('{"schema": "mcpnode.manifest/v0"}', "older"),
    ],
)
def test_bad_manifests(text: str, message: str) -> None:
    with pytest.raises(ManifestError, match=message):
        parse_manifest(text)


def test_edited_manifest_refused() -> None:
    doc = copy.deepcopy(load("h100-nvl-pair"))
    doc["placement"]["gpus"][0]["slice_cpus"] = "0-79"
    with pytest.raises(ManifestError, match="content_hash does not match"):
        parse_manifest(json.dumps(doc))
