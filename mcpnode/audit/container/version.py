"""NVIDIA Container Toolkit versions: parsing the components' `--version` output and comparing.

Pure: text in, values out, so every format is table-tested. The output formats, from the
sources:

- `nvidia-ctk --version` (urfave/cli prints `<Name> version <Version>`, the version string
  carrying a `commit:` line; `cmd/nvidia-ctk/main.go`, `internal/info/version.go`)::

      NVIDIA Container Toolkit CLI version 1.17.8
      commit: f202b80a9b9d0db00d9b1d73c0128c8962c55f4d

- `nvidia-container-runtime --version` prints its own block, a blank line, then execs the
  low-level runtime's `--version` (runc's lines follow; `internal/runtime/runtime.go`)::

      NVIDIA Container Runtime version 1.17.8
      commit: ...
      spec: 1.2.0

      runc version 1.1.12

- `nvidia-container-cli --version` (libnvidia-container `src/cli/main.c::print_version`)::

      cli-version: 1.17.8
      lib-version: 1.17.8
      build date: 2025-05-30T13:47+00:00
      ...
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Version:
    """A toolkit version. Orders like semver for what NVIDIA ships: `1.17.8-rc.1` sorts before
    `1.17.8` (a pre-release precedes its release), `1.18.0` after both.

    `release` is 1 for a release and 0 for a pre-release, so plain tuple order does the rest;
    pre-release tags compare by their dot-separated fields as semver orders them: numbers
    numerically, and below words (`rc.2` < `rc.10`, `1` < `rc`)."""

    major: int
    minor: int
    patch: int
    release: int = 1
    pre: tuple[tuple[int, int, str], ...] = ()  # (0, number, "") or (1, 0, word) per field

    def __str__(self) -> str:
        core = f"{self.major}.{self.minor}.{self.patch}"
        if self.release:
            return core
        return core + "-" + ".".join(str(n) if kind == 0 else w for kind, n, w in self.pre)

    @property
    def triple(self) -> tuple[int, int, int]:
        return (self.major, self.minor, self.patch)


# Parts of at most 9 ASCII digits: the text is a command's output, which int() would otherwise
# refuse past 4,300 digits with a traceback.
_VERSION = re.compile(
    r"v?([0-9]{1,9})\.([0-9]{1,9})(?:\.([0-9]{1,9}))?(?:[-~]([0-9A-Za-z][0-9A-Za-z.-]*))?"
)


def parse_version(text: str) -> Version | None:
    """`1.17.8`, `v1.18.0-rc.1`, `1.16` (patch 0) -> Version; anything else -> None.

    A tilde (Debian's `1.18.0~rc.1`) is read as a pre-release separator, as dpkg orders it. A
    suffix that is a packaging revision rather than a pre-release (`1.17.8-1`) cannot be told
    apart from one in general; the binaries print bare versions, so it is read as a tag."""
    m = _VERSION.fullmatch(text.strip())
    if m is None:
        return None
    major, minor, patch, tag = m.group(1), m.group(2), m.group(3), m.group(4)
    if tag is None:
        return Version(int(major), int(minor), int(patch or 0))
    fields = tuple(
        (0, int(f), "") if f.isdigit() and len(f) <= 9 else (1, 0, f) for f in tag.split(".")
    )
    return Version(int(major), int(minor), int(patch or 0), 0, fields)


# `NVIDIA Container Toolkit CLI version 1.17.8`, `NVIDIA Container Runtime version 1.17.8`,
# `NVIDIA Container Runtime Hook version 1.17.8`: the first such line names the component.
_NAMED = re.compile(r"^\s*(NVIDIA[^\n]*?)\s+version:?\s+(\S+)", re.MULTILINE)
_CLI_FIELD = re.compile(r"^\s*(cli-version|lib-version)\s*:\s*(\S+)", re.MULTILINE)


@dataclass(frozen=True)
class NamedVersion:
    """What a Go component printed: its name and version (the raw token kept for evidence)."""

    name: str
    raw: str
    version: Version | None  # None when the token is not a version


def parse_named_version(text: str) -> NamedVersion | None:
    """The first `NVIDIA ... version X` line of nvidia-ctk / nvidia-container-runtime output;
    None when there is none (runc's own lines after it are ignored)."""
    m = _NAMED.search(text)
    if m is None:
        return None
    return NamedVersion(m.group(1).strip(), m.group(2), parse_version(m.group(2)))


@dataclass(frozen=True)
class CliVersions:
    """`nvidia-container-cli --version`: the CLI's and libnvidia-container's versions (raw tokens
    kept; a field absent from the output is None)."""

    cli_raw: str | None
    lib_raw: str | None

    @property
    def cli(self) -> Version | None:
        return None if self.cli_raw is None else parse_version(self.cli_raw)

    @property
    def lib(self) -> Version | None:
        return None if self.lib_raw is None else parse_version(self.lib_raw)


def parse_cli_versions(text: str) -> CliVersions | None:
    """`cli-version:` and `lib-version:` lines -> CliVersions; None when neither is there."""
    found = dict((k, v) for k, v in _CLI_FIELD.findall(text))
    if not found:
        return None
    return CliVersions(found.get("cli-version"), found.get("lib-version"))


@dataclass(frozen=True)
class Advisory:
    """A CVE fixed in `fixed`: every version below it is affected."""

    cve: str
    fixed: Version
    what: str


# From NVIDIA/cloud-native-docs gpu-operator/security.rst (the CVE table) and
# container-toolkit/release-notes.md; the number in brackets is NVIDIA's bulletin (a_id). "Affected
# <= X" there is "below the fixed release" here.
ADVISORIES: tuple[Advisory, ...] = (
    Advisory("CVE-2024-0132", Version(1, 16, 2), "critical TOCTOU container escape (5582)"),
    Advisory("CVE-2024-0133", Version(1, 16, 2), "host file creation (bulletin 5582)"),
    Advisory("CVE-2024-0134", Version(1, 17, 0), "symlink escape at start (5585)"),
    Advisory("CVE-2024-0135", Version(1, 17, 3), "bulletin 5599"),
    Advisory("CVE-2024-0136", Version(1, 17, 3), "bulletin 5599"),
    Advisory("CVE-2024-0137", Version(1, 17, 3), "bulletin 5599"),
    Advisory("CVE-2025-23359", Version(1, 17, 4), "bypass of the CVE-2024-0132 fix (5616)"),
    Advisory(
        "CVE-2025-23266",
        Version(1, 17, 8),
        'critical "NVIDIAScape": the enable-cuda-compat hook runs LD_PRELOAD as host root (5659)',
    ),
    Advisory("CVE-2025-23267", Version(1, 17, 8), "update-ldcache link following (5659)"),
)

# The audit's floor: everything below it has a published container-escape CVE.
MINIMUM_SAFE = Version(1, 17, 8)
# Below this the wording is critical: CVE-2024-0132, the TOCTOU escape.
CRITICAL_BELOW = Version(1, 16, 2)
# cgroup v2 support arrived in libnvidia-container 1.8.0; 1.8.1 fixed the cgroup root in nested
# containers and a permission issue determining the version (toolkit CHANGELOG.md).
CGROUP_V2_MINIMUM = Version(1, 8, 1)
# Since 1.18.0 libnvidia-container must exactly match the toolkit (release notes 1.18.0).
EXACT_MATCH_SINCE = Version(1, 18, 0)
# 1.18.0 made JIT-CDI the default for mode "auto" (before, auto resolved to legacy on most hosts).
AUTO_IS_CDI_SINCE = Version(1, 18, 0)


def advisories_for(version: Version) -> tuple[Advisory, ...]:
    """The advisories `version` is affected by, in table order."""
    return tuple(a for a in ADVISORIES if version < a.fixed)
