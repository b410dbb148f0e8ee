"""Read a directory of published manifests, one per host, through a Host rooted at it.

Two layouts are accepted, side by side:

* `DIR/<host>/manifest.json`: Ansible's `fetch` with `flat: true` and
  `dest: fleet/{{ inventory_hostname }}/manifest.json`; also `DIR/<host>/run/mcpnode/manifest.json`,
  what `fetch` writes by default (`flat: false` keeps the remote path under the host's name);
* `DIR/<host>.json`: manifests copied side by side.

The host is named by its directory or the file's stem; a bare `DIR/manifest.json` is named by the
manifest's own `host.hostname`. A manifest that cannot be read or fails parse_manifest's checks
(bounds, schema, every field, content hash: mcpnode/published.py) is kept as Unreadable with the
reason: one bad host never stops the report. These are copies of *other* hosts' manifests,
untrusted data by design: no trust walk (they are wherever the operator fetched them to), and
nothing read here is executed or written into a unit.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mcpnode.errors import HostError, ManifestError, RootError
from mcpnode.host import Host
from mcpnode.published import MANIFEST_PATH, MAX_MANIFEST_BYTES, parse_manifest

MANIFEST_NAME = "manifest.json"
# Where `fetch` without `flat` puts /run/mcpnode/manifest.json under the host's directory.
FETCH_SUBPATH = MANIFEST_PATH.lstrip("/")


@dataclass(frozen=True)
class HostManifest:
    """One host's manifest, checked by parse_manifest. `source` is relative to the directory."""

    host: str
    source: str
    manifest: Mapping[str, Any]


@dataclass(frozen=True)
class Unreadable:
    """A host whose manifest could not be used, and why (the HostError or ManifestError text)."""

    host: str
    source: str
    reason: str


@dataclass(frozen=True)
class Fleet:
    """What was found in the directory, both tuples in host order (natural_key)."""

    manifests: tuple[HostManifest, ...]
    unreadable: tuple[Unreadable, ...]


_DIGITS = re.compile(r"([0-9]{1,18})")


def natural_key(name: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key putting `gpu-2` before `gpu-10`. Runs of ASCII digits are numbers, 18 digits at
    a time (a host name comes from a copied manifest: 5,000 digits are not one int())."""
    return tuple(
        (0, int(part)) if part.isascii() and part.isdigit() else (1, part)
        for part in _DIGITS.split(name)
        if part
    )


def load_fleet(host: Host, top: str = "/") -> Fleet:
    """Every manifest under `top` of `host` (a Host rooted at the fleet directory).

    Raises RootError when the directory holds no manifest at all (nothing to compare), and the
    HostError of the listing when `top` itself cannot be listed. A subdirectory without a
    manifest, an unreadable file or a manifest failing its checks is returned as Unreadable."""
    base = top.rstrip("/")
    candidates: list[tuple[str | None, str]] = []  # (host name or None, path relative to top)
    for entry in host.scandir(top):
        if entry.name.startswith("."):
            continue  # editor and atomic-write leftovers (`.manifest.json.123.tmp`), .git
        if host.is_dir(f"{base}/{entry.name}"):
            candidates.append((entry.name, _manifest_in(host, f"{base}/{entry.name}")))
        elif entry.name == MANIFEST_NAME:
            candidates.append((None, entry.name))
        elif entry.name.endswith(".json"):
            candidates.append((entry.name.removesuffix(".json"), entry.name))
    if not candidates:
        raise RootError(
            f"{host.source}: no manifests (expected DIR/<host>/{MANIFEST_NAME} or DIR/<host>.json)"
        )
    manifests: list[HostManifest] = []
    unreadable: list[Unreadable] = []
    for name, rel in candidates:
        try:
            doc = parse_manifest(host.read_bytes(f"{base}/{rel}", MAX_MANIFEST_BYTES), rel)
        except ManifestError as err:
            unreadable.append(Unreadable(name or rel, rel, str(err)))
            continue
        except HostError as err:
            unreadable.append(Unreadable(name or rel, rel, f"{rel}: {err.detail}"))
            continue
        manifests.append(HostManifest(name or _own_hostname(doc) or rel, rel, doc))
    manifests = _unique(manifests)
    return Fleet(
        tuple(sorted(manifests, key=lambda m: natural_key(m.host))),
        tuple(sorted(unreadable, key=lambda u: natural_key(u.host))),
    )


def _manifest_in(host: Host, directory: str) -> str:
    """The manifest's path (relative to the fleet directory) in a host's directory: the flat
    layout when present, else fetch's default one, else the flat name (read, fails, reported)."""
    name = directory.rsplit("/", 1)[-1]
    for rel in (MANIFEST_NAME, FETCH_SUBPATH):
        if host.exists(f"{directory}/{rel}"):
            return f"{name}/{rel}"
    return f"{name}/{MANIFEST_NAME}"


def _own_hostname(doc: Mapping[str, Any]) -> str | None:
    section = doc.get("host")
    name = section.get("hostname") if isinstance(section, Mapping) else None
    return name if isinstance(name, str) and name else None


def _unique(manifests: list[HostManifest]) -> list[HostManifest]:
    """Two manifests claiming one host name (`a.json` and `a/manifest.json`) are both kept,
    each named by its path, so neither hides the other."""
    seen: dict[str, int] = {}
    for m in manifests:
        seen[m.host] = seen.get(m.host, 0) + 1
    return [
        HostManifest(m.source, m.source, m.manifest) if seen[m.host] > 1 else m for m in manifests
    ]
