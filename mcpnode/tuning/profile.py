"""Tuning profiles: TOML files, where they are found, includes, and strict validation.

    [profile]
    name = "inference-latency"          # optional; when given it must match the file name
    summary = "..."
    include = ["base"]                  # depth-first, later wins, cycles rejected
    allow_sensitive = ["kernel.sysrq"]  # sensitive keys this file sets (tuning/sensitive.py)

    [sysctl]
    # why, and the kernel default        <- the comment block above a key is kept (explain)
    "net.core.somaxconn" = 65535                                   # exact
    "net.ipv4.tcp_rmem" = "4096 131072 16777216"                   # exact, multi-field
    "vm.max_map_count" = { min = 1048576 }                         # at least (field-wise)
    "net.ipv4.tcp_congestion_control" = { prefer = ["bbr"], fallback = "cubic", load = ["tcp_bbr"] }

    [modules]
    load = ["tcp_bbr"]

    [vm]
    transparent_hugepage = "madvise"    # /sys/kernel/mm/transparent_hugepage/enabled

    [cpu]
    governor = ["performance", "schedutil"]   # first one each cpufreq policy offers
    force_latency = 2                   # µs; PM QoS, held by the agent while it runs

    [irq]                               # plugins/irq.py, rps.py; needs the CPU partition
    policy = "housekeeping"             # device interrupts onto their node's housekeeping CPUs
    irqbalance = "ban-slices"           # IRQBALANCE_BANNED_CPULIST = the GPU slices
    rps = "housekeeping"                # NIC rx queues' packet steering onto the same CPUs

    [housekeeping]                      # plugins/housekeeping.py; needs the CPU partition too
    confine = ["system.slice", "user.slice", "init.scope"]   # AllowedCPUs= drop-ins

Locations: the system directory (the repository's top-level `profiles/` in a source checkout
or editable install; `<prefix>/share/mcpnode/profiles` from a wheel, installed there by
`[tool.setuptools.data-files]`), then `/etc/mcpnode/profiles/*.toml` under the Host root,
which wins on a name clash (tuned's rule for /etc/tuned/profiles).

Everything is validated before any host value is read: unknown sections or keys, wrong types,
keys that are not `[a-z0-9_-]` segments joined by dots, control characters or more than 4096
bytes in a value (a sysctl value is at most a page), integers the key's kernel handler would
refuse (tuning/keytypes.py), and sensitive keys (code execution, kernel control:
tuning/sensitive.py) that the file setting them does not list in `allow_sensitive` raise
ProfileError naming file and key.

Files are read as root's alone (Host.read_trusted): a profile owned by another user, writable by
group or others, in such a directory, or a symbolic link is refused, so a file planted in a
loose /etc/mcpnode/profiles cannot shadow a shipped profile. TOML goes through codec/toml_bounded.py
(bounded nesting and dotted keys). Includes are resolved once each: a profile reached by several
paths (a diamond) is merged where it is first reached, so resolution costs one parse per file
and one visit per include edge, however the includes fan out.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from mcpnode.codec import toml_bounded
from mcpnode.errors import HostError, RootError
from mcpnode.host import Host, HostReader
from mcpnode.tuning import paths, plugins
from mcpnode.tuning.errors import ProfileError, ProfileNotFound
from mcpnode.tuning.model import Setting
from mcpnode.tuning.plugins import bootloader
from mcpnode.tuning.plugins.base import SectionInput, module_list, text_problem
from mcpnode.tuning.plugins.base import err as _err
from mcpnode.tuning.values import AtLeast, Desired, Exact

PROFILE_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}\Z", re.ASCII)
# The largest shipped profile is ~7 KB; 1 MiB bounds the linear cost of parsing a hostile one.
MAX_FILE_BYTES = 1 << 20
MAX_INCLUDE_DEPTH = 16

Origin = Literal["system", "local"]


@dataclass(frozen=True)
class Profile:
    name: str
    summary: str
    file: str
    chain: tuple[str, ...]  # profiles merged, in order: includes depth-first, this one last
    settings: tuple[Setting, ...]  # in order of first appearance along the chain
    modules: tuple[str, ...]

    def setting(self, key: str) -> Setting | None:
        return next((s for s in self.settings if s.key == key), None)

    @property
    def content_hash(self) -> str:
        """`sha256:<hex>` of what the profile asks of a host: its chain, every setting's key and
        value, its modules. Comments and file locations are left out, so the same profile
        installed in two places has one hash; any changed value changes it."""
        doc = {
            "chain": list(self.chain),
            "settings": [[s.key, _desired_json(s.desired)] for s in self.settings],
            "modules": list(self.modules),
        }
        canon = json.dumps(doc, sort_keys=True, separators=(",", ":"))
        return "sha256:" + hashlib.sha256(canon.encode()).hexdigest()


def _desired_json(desired: Desired) -> dict[str, Any]:
    if isinstance(desired, Exact):
        return {"exact": desired.text}
    if isinstance(desired, AtLeast):
        return {"min": list(desired.fields)}
    return {
        "prefer": list(desired.prefer),
        "fallback": desired.fallback,
        "load": list(desired.load),
    }


@dataclass(frozen=True)
class ProfileDoc:
    """One file, parsed and validated, includes not yet resolved."""

    name: str
    summary: str
    file: str
    includes: tuple[str, ...]
    settings: tuple[Setting, ...]
    modules: tuple[str, ...]


@dataclass(frozen=True)
class ProfileInfo:
    """A row of `mcpnode profiles list`."""

    name: str
    origin: Origin
    file: str
    summary: str
    includes: tuple[str, ...]
    shadows: str | None  # the system file a local profile hides
    error: str | None  # why it cannot be loaded (then summary/includes are empty)


# -- parsing one file (pure) ------------------------------------------------------------------


def _comments(text: str) -> dict[tuple[str, str], str]:
    """The comment block directly above each `key = ...` line, per section (best effort: a line
    scanner, not a TOML parser; only used for `explain` and `show`)."""
    out: dict[tuple[str, str], str] = {}
    section = ""
    block: list[str] = []
    header = re.compile(r"\s*\[\s*([A-Za-z0-9_.-]+)\s*\]\s*(#.*)?\Z")
    assign = re.compile(r"""\s*(?:"([^"\\]*)"|'([^']*)'|([A-Za-z0-9_-]+))\s*=""")
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            block.append(stripped[1:].strip())
            continue
        m = header.match(line)
        if m:
            section, block = m.group(1), []
            continue
        m = assign.match(line)
        if m:
            key = next(g for g in m.groups() if g is not None)
            if block:
                out[(section, key)] = "\n".join(block).strip()
        block = []
    return out


def _section(file: str, doc: dict[str, Any], name: str) -> dict[str, Any]:
    value = doc.get(name, {})
    if not isinstance(value, dict):
        raise _err(file, name, "must be a table ([" + name + "])")
    return value


def _only(file: str, section: str, table: dict[str, Any], allowed: tuple[str, ...]) -> None:
    for key in table:
        if key not in allowed:
            raise _err(file, key, f"unknown key (allowed: {', '.join(allowed)})", section)


def parse_profile(text: str, file: str, stem: str) -> ProfileDoc:
    """Parse and validate one profile file's text. `stem` is the name it was found under.

    Raises ProfileError naming `file` and the offending key."""
    try:
        doc = toml_bounded.loads(text)
    except toml_bounded.TomlRejected as err:
        raise _err(file, None, f"not valid TOML: {err}") from None
    known = ("profile", "modules", *plugins.sections())
    for name in doc:
        if name not in known:
            raise _err(file, name, f"unknown section (allowed: {', '.join(known)})")
    comments = _comments(text)

    head = _section(file, doc, "profile")
    _only(file, "profile", head, ("name", "summary", "include", "allow_sensitive"))
    name = head.get("name", stem)
    if not isinstance(name, str) or name != stem:
        raise _err(file, "name", f"must be {stem!r}, the file's name", "profile")
    summary = head.get("summary", "")
    if not isinstance(summary, str) or (summary and text_problem(summary, 400)):
        raise _err(file, "summary", "must be one line of printable text", "profile")
    raw_includes = head.get("include", [])
    if not isinstance(raw_includes, list):
        raise _err(file, "include", "must be a list of profile names", "profile")
    includes = []
    for inc in raw_includes:
        if not isinstance(inc, str) or not PROFILE_NAME.match(inc):
            raise _err(file, "include", f"{str(inc)[:60]!r} is not a profile name", "profile")
        includes.append(inc)

    raw_allowed = head.get("allow_sensitive", [])
    if not isinstance(raw_allowed, list) or not all(
        isinstance(k, str)
        and (
            paths.sysctl_key_problem(k) is None
            or (k.startswith("cmdline:") and bootloader.ARG.match(k[len("cmdline:") :]))
        )
        for k in raw_allowed
    ):
        raise _err(
            file,
            "allow_sensitive",
            "must be a list of sysctl names and cmdline:NAME kernel parameters",
            "profile",
        )
    # `cmdline:intel-iommu` and `cmdline:intel_iommu` name one kernel parameter (parameq).
    allowed = frozenset(
        bootloader.sensitive_flag(k[len("cmdline:") :]) if k.startswith("cmdline:") else k
        for k in raw_allowed
    )

    settings: list[Setting] = []
    used_sensitive: set[str] = set()
    for section in plugins.sections():
        table = _section(file, doc, section)
        options = plugins.options_of(section)
        if options:
            _only(file, section, table, options)
        for subsystem in plugins.SUBSYSTEMS:
            if subsystem.section == section:
                given = SectionInput(file, table, comments, allowed, used_sensitive)
                settings.extend(subsystem.parse(given))
    unused = sorted(allowed - {s.key for s in settings} - used_sensitive)
    if unused:
        raise _err(
            file,
            "allow_sensitive",
            f"names {', '.join(unused)}, which this file does not set (keep the list exact)",
            "profile",
        )

    mods = _section(file, doc, "modules")
    _only(file, "modules", mods, ("load",))
    modules = module_list(file, "modules", "load", mods.get("load", []))
    return ProfileDoc(name, summary, file, tuple(includes), tuple(settings), modules)


# -- locations ------------------------------------------------------------------------------


def default_system_dir() -> Path | None:
    """The shipped profiles: `profiles/` beside the package in a source checkout or editable
    install, else `<prefix>/share/mcpnode/profiles` where a wheel's data-files put them.
    (Locating our own files, not reading the machine, so Path is used directly.)"""
    candidates = (
        Path(__file__).resolve().parents[2] / "profiles",
        Path(sys.prefix) / "share" / "mcpnode" / "profiles",
    )
    for candidate in candidates:
        if candidate.is_dir():
            return candidate
    return None


@dataclass(frozen=True)
class _Source:
    name: str
    origin: Origin
    file: str  # shown to people
    host: HostReader
    logical: str


class _Catalog:
    """The profiles visible from one Host: system ones, then local ones that win."""

    def __init__(self, host: HostReader, system_dir: Path | None) -> None:
        self.sources: dict[str, _Source] = {}
        self.shadowed: dict[str, str] = {}
        self.searched: list[str] = []
        directory = system_dir if system_dir is not None else default_system_dir()
        if directory is not None:
            self.searched.append(str(directory))
            try:
                system = Host(directory)
            except RootError:
                system = None
            if system is not None:
                for name in system.listdir_optional("/") or []:
                    self._add(system, "/", name, "system", str(Path(directory) / name))
        self.searched.append(host.fs_path(paths.PROFILE_DIR_LOCAL))
        for name in host.listdir_optional(paths.PROFILE_DIR_LOCAL) or []:
            logical_dir = paths.PROFILE_DIR_LOCAL
            self._add(host, logical_dir, name, "local", host.fs_path(f"{logical_dir}/{name}"))

    def _add(
        self, host: HostReader, directory: str, entry: str, origin: Origin, shown: str
    ) -> None:
        stem = entry.removesuffix(".toml")
        if stem == entry or not PROFILE_NAME.match(stem):
            return  # not a profile file (README, backup~, a name we could not include)
        if origin == "local" and stem in self.sources:
            self.shadowed[stem] = self.sources[stem].file
        logical = directory.rstrip("/") + "/" + entry
        self.sources[stem] = _Source(stem, origin, shown, host, logical)

    def read(self, name: str, wanted_by: str | None) -> tuple[_Source, str]:
        source = self.sources.get(name)
        if source is None:
            where = ", ".join(self.searched) or "nowhere"
            if wanted_by is None:
                raise ProfileNotFound(name, tuple(sorted(self.sources)), where)
            raise _err(
                wanted_by,
                "include",
                f"includes {name!r}, which does not exist (searched {where})",
                "profile",
            )
        try:
            data = source.host.read_trusted(source.logical, MAX_FILE_BYTES)
        except HostError as err:
            raise _err(source.file, None, f"cannot be used: {err.detail}") from err
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as err:
            raise _err(source.file, None, f"not UTF-8 (byte {err.start})") from err
        return source, text


def _merge(
    catalog: _Catalog,
    name: str,
    wanted_by: str | None,
    stack: tuple[str, ...],
    parsed: dict[str, ProfileDoc],
    merged: set[str],
) -> Iterator[ProfileDoc]:
    """Yield the docs to merge for `name`, includes depth-first, `name` itself last; a profile
    already merged in this resolution (`merged`) is not yielded again, so a diamond or a name
    included twice costs nothing more and its values are applied where it was first reached."""
    if name in stack:
        cycle = " -> ".join([*stack[stack.index(name) :], name])
        raise _err(wanted_by or name, "include", f"include cycle: {cycle}", "profile")
    if name in merged:
        return
    if len(stack) >= MAX_INCLUDE_DEPTH:
        raise _err(wanted_by or name, "include", f"includes nest deeper than {MAX_INCLUDE_DEPTH}")
    doc = parsed.get(name)
    if doc is None:
        source, text = catalog.read(name, wanted_by)
        doc = parse_profile(text, source.file, name)
        parsed[name] = doc
    for inc in doc.includes:
        yield from _merge(catalog, inc, doc.file, (*stack, name), parsed, merged)
    merged.add(name)
    yield doc


def load_profile(name: str, host: HostReader, system_dir: Path | None = None) -> Profile:
    """Load profile `name` with its includes resolved (depth-first, later wins).

    Raises ProfileError for a missing profile or include, a cycle, or any invalid file: before
    anything else on the host is read."""
    return _load(name, _Catalog(host, system_dir), {})


def _load(name: str, catalog: _Catalog, parsed: dict[str, ProfileDoc]) -> Profile:
    """load_profile over a catalog and a cache of parsed files shared by several loads."""
    if not PROFILE_NAME.match(name):
        raise _err(f"{name[:60]}.toml", None, "not a profile name ([a-z0-9_-], 64 at most)")
    merged: dict[str, Setting] = {}
    modules: dict[str, None] = {}
    chain: list[str] = []
    top: ProfileDoc | None = None
    for doc in _merge(catalog, name, None, (), parsed, set()):
        chain.append(doc.name)
        for setting in doc.settings:
            merged[setting.key] = setting  # dict keeps the first position, takes the last value
        modules.update(dict.fromkeys(doc.modules))
        top = doc
    assert top is not None and top.name == name
    return Profile(
        name=name,
        summary=top.summary,
        file=top.file,
        chain=tuple(chain),
        settings=tuple(merged.values()),
        modules=tuple(modules),
    )


def list_profiles(host: HostReader, system_dir: Path | None = None) -> tuple[ProfileInfo, ...]:
    """Every profile visible from `host`, sorted by name; a broken one is listed with its error
    rather than hiding the others. Each file is read and parsed once for the whole listing."""
    catalog = _Catalog(host, system_dir)
    parsed: dict[str, ProfileDoc] = {}
    rows = []
    for name in sorted(catalog.sources):
        source = catalog.sources[name]
        shadows = catalog.shadowed.get(name)
        try:
            profile = _load(name, catalog, parsed)
        except ProfileError as err:
            rows.append(ProfileInfo(name, source.origin, source.file, "", (), shadows, str(err)))
            continue
        rows.append(
            ProfileInfo(
                name, source.origin, source.file, profile.summary, profile.chain[:-1], shadows, None
            )
        )
    return tuple(rows)
