"""`--scope cache` and `--scope socket` (torchrun's core-complex and socket): real children
placed from a root shaped like this machine, the manifest fields that carry them through a
publication, and the published reader refusing bad values in them and in `caches`."""

from __future__ import annotations

import copy
import json
import re
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from mcpnode.errors import ManifestError
from mcpnode.host import Host
from mcpnode.placement.build import make_manifest
from mcpnode.placement.manifest import content_hash, dumps, parse_manifest
from mcpnode.placement.source import placement_of
from tests.support import placeroot
from tests.support.tuningcli import run_process

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hosts"
NOW = datetime(2025, 6, 1, tzinfo=timezone.utc)
AFFINITY = "import os, json; print(json.dumps(sorted(os.sched_getaffinity(0))))"


@pytest.fixture(scope="module")
def cached(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # one L3 per core: the slice (CPU 1) has its own, the socket is CPUs 0-1
    return placeroot.build(tmp_path_factory.mktemp("cached"), caches=(1, 1024, 512))


@pytest.fixture(scope="module")
def uncached(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return placeroot.build(tmp_path_factory.mktemp("uncached"))


def run(root: Path, *opts: str) -> tuple[int, str, str]:
    proc = run_process(
        "exec", "--fresh", "--root", str(root), *opts, "--", sys.executable, "-c", AFFINITY
    )
    return proc.returncode, proc.stdout, proc.stderr


@placeroot.needs_machine
@pytest.mark.parametrize(("scope", "cpus"), [("cache", [1]), ("socket", [0, 1]), ("slice", [1])])
def test_child_runs_on_the_scope(cached: Path, scope: str, cpus: list[int]) -> None:
    code, out, err = run(cached, "--gpu", "0", "--scope", scope)
    assert (code, err) == (0, "")
    assert json.loads(out) == cpus


@placeroot.needs_machine
def test_cache_scope_without_caches_is_one_usage_line(uncached: Path) -> None:
    code, out, err = run(uncached, "--gpu", "0", "--scope", "cache")
    assert code == 64 and out == ""
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "no cache CPUs" in err and "L3 domains" in err and "try --scope node" in err


def test_unknown_scope_is_refused(uncached: Path) -> None:
    code, out, err = run(uncached, "--gpu", "0", "--scope", "core")
    assert code != 0 and out == "" and "core" in err and "Traceback" not in err


def manifest(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(dumps(make_manifest(Host(FIXTURES / name), now=NOW)))
    return doc


def test_scopes_survive_publication() -> None:
    doc = manifest("dgx-a100")
    placed = placement_of(parse_manifest(dumps(doc)))
    g0 = placed.gpus[0]
    assert g0.slice_cpus.cpulist() == "49-55,177-183"
    assert g0.cache_cpus.cpulist() == "48-55,176-183"
    assert g0.socket_cpus.cpulist() == "0-63,128-191"
    assert [c["cpus"] for c in doc["caches"] if c["level"] == 3][:2] == [
        "0-3,128-131",
        "4-7,132-135",
    ]


def test_manifest_without_the_new_fields_is_still_read() -> None:
    doc = manifest("dgx-a100")
    del doc["caches"]
    for g in doc["placement"]["gpus"]:
        del g["cache_cpus"], g["socket_cpus"]
    doc["content_hash"] = content_hash(doc)
    g0 = placement_of(parse_manifest(dumps(doc))).gpus[0]
    assert not g0.cache_cpus and not g0.socket_cpus


def _edited(doc: dict[str, Any], path: tuple[object, ...], value: object) -> str:
    out = copy.deepcopy(doc)
    where: Any = out
    for key in path[:-1]:
        where = where[key]
    where[path[-1]] = value
    out["content_hash"] = content_hash(out)
    return dumps(out)


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        (("caches", 0, "level"), 0, "caches[0].level"),
        (("caches", 0, "level"), "3", "caches[0].level"),
        (("caches", 0, "size_kib"), -1, "caches[0].size_kib"),
        (("caches", 0, "size_kib"), 1 << 40, "caches[0].size_kib"),
        (("caches", 0, "id"), 1 << 33, "caches[0].id"),
        (("caches", 0, "cpus"), "0-99999", "caches[0].cpus"),
        (("caches", 0), "L3", "caches[0]"),
        (("caches",), {"level": 3}, "caches"),
        (("placement", "gpus", 0, "cache_cpus"), "0-300", "placement.gpus[0].cache_cpus"),
        (("placement", "gpus", 0, "socket_cpus"), "all", "placement.gpus[0].socket_cpus"),
        (("placement", "gpus", 0, "socket_cpus"), None, "placement.gpus[0].socket_cpus"),
    ],
)
def test_published_reader_refuses(path: tuple[object, ...], value: object, field: str) -> None:
    doc = manifest("dgx-a100")
    with pytest.raises(ManifestError, match="^" + re.escape(f"m.json: {field} ")):
        parse_manifest(_edited(doc, path, value), "m.json", cpu_limit=256)
