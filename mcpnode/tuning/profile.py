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

    [irq]                               # tuning/irq.py; needs the host's CPU partition
    policy = "housekeeping"             # device interrupts onto their node's housekeeping CPUs
    irqbalance = "ban-slices"           # IRQBALANCE_BANNED_CPULIST = the GPU slices
    rps = "housekeeping"                # NIC rx queues' packet steering onto the same CPUs

    [housekeeping]                      # tuning/housekeeping.py; needs the CPU partition too
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
from mcpnode.host import Host
from mcpnode.tuning import bootloader, keytypes, paths
from mcpnode.tuning.errors import ProfileError, ProfileNotFound
from mcpnode.tuning.sensitive import sensitive_reason
from mcpnode.tuning.values import AtLeast, Desired, Exact, Prefer

PROFILE_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}\Z", re.ASCII)
_TOKEN = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}\Z", re.ASCII)  # bbr, cubic, performance
MAX_VALUE_BYTES = 4096
# The largest shipped profile is ~7 KB; 1 MiB bounds the linear cost of parsing a hostile one.
MAX_FILE_BYTES = 1 << 20
MAX_INCLUDE_DEPTH = 16
THP_CHOICES = ("always", "madvise", "never")
SECTIONS = ("profile", "sysctl", "modules", "vm", "cpu", "irq", "housekeeping", "bootloader")
IRQ_POLICIES = ("housekeeping", "off")
IRQBALANCE_MODES = ("ban-slices", "leave")

Origin = Literal["system", "local"]


@dataclass(frozen=True)
class Setting:
    """One resolved profile value. `key` is a sysctl name or `vm:transparent_hugepage` /
    `cpu:governor` (paths.py); `source` the file whose value won; `comment` the comment block
    written above it there (the why and the kernel default, by convention)."""

    key: str
    desired: Desired
    source: str
    comment: str


@dataclass(frozen=True)
class Profile:
    name: str
    summary: str
    file: str
    chain: tuple[str, ...]  # profiles merged, in order: includes depth-first, this one last
    settings: tuple[Setting, ...]  # in order of first appearance along the chain
    modules: tuple[str, ...]

    def setting(self, key: str) -> Setting | None:
        for s in self.settings:
            if s.key == key:
                return s
        return None

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


def _text_problem(value: str, limit: int = MAX_VALUE_BYTES) -> str | None:
    if len(value.encode("utf-8", errors="replace")) > limit:
        return f"longer than {limit} bytes"
    for ch in value:
        if ch == "\t":
            continue
        if ch == "\n" or ch == "\r":
            return "contains a newline (a sysctl takes one line)"
        if ch == "\0":
            return "contains a NUL byte"
        if not (" " <= ch <= "~"):
            return f"contains the character {ch!r} (only printable ASCII)"
    if not value.strip():
        return "is empty"
    return None


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


def _err(file: str, key: str | None, detail: str, section: str | None = None) -> ProfileError:
    return ProfileError(file, key, detail, section)


def _token_list(file: str, section: str, key: str, what: str, value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        raise _err(file, key, f"{what} must be a non-empty list of names", section)
    out = []
    for item in value:
        if not isinstance(item, str) or not _TOKEN.match(item):
            raise _err(file, key, f"{what}: {str(item)[:60]!r} is not a name", section)
        out.append(item)
    return tuple(out)


def _module_list(file: str, section: str, key: str, value: object) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise _err(file, key, "must be a list of module names", section)
    out = []
    for item in value:
        if not isinstance(item, str) or not paths.MODULE_NAME.match(item):
            raise _err(file, key, f"{str(item)[:60]!r} is not a module name", section)
        out.append(item)
    return tuple(out)


def _at_least(file: str, key: str, value: object) -> AtLeast:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise _err(file, key, "min must be an integer or a string of integers", "sysctl")
    if isinstance(value, int):
        problem = keytypes.integer_problem(key, value)
        if problem:
            raise _err(file, key, f"min {problem}", "sysctl")
        return AtLeast((value,))
    problem = _text_problem(value)
    if problem:
        raise _err(file, key, f"min {problem}", "sysctl")
    parts = value.split()
    if not all(re.fullmatch(r"[+-]?[0-9]+", p, re.ASCII) for p in parts):
        raise _err(file, key, f"min {value[:60]!r} is not made of integers", "sysctl")
    problem = keytypes.text_problem(key, value)
    if problem:
        raise _err(file, key, f"min {problem}", "sysctl")
    return AtLeast(tuple(int(p) for p in parts))


def _sysctl_value(file: str, key: str, value: object) -> Desired:
    if isinstance(value, bool):
        raise _err(file, key, "a boolean is not a sysctl value (write 0 or 1)", "sysctl")
    if isinstance(value, int):
        problem = keytypes.integer_problem(key, value)
        if problem:
            raise _err(file, key, problem, "sysctl")
        return Exact.of(value)
    if isinstance(value, str):
        problem = _text_problem(value) or keytypes.text_problem(key, value)
        if problem:
            raise _err(file, key, f"value {problem}", "sysctl")
        return Exact.of(value)
    if isinstance(value, dict):
        return _sysctl_table(file, key, value)
    kind = type(value).__name__
    raise _err(file, key, f"wrong value type {kind}: use an integer, a string or a table", "sysctl")


def _sysctl_table(file: str, key: str, table: dict[str, Any]) -> Desired:
    fields = set(table)
    if fields == {"min"}:
        return _at_least(file, key, table["min"])
    if "prefer" in fields and fields <= {"prefer", "fallback", "load"}:
        if key not in paths.AVAILABLE_FROM:
            known = ", ".join(sorted(paths.AVAILABLE_FROM))
            raise _err(
                file,
                key,
                f"prefer needs a kernel list of available values; supported for: {known}",
                "sysctl",
            )
        prefer = _token_list(file, "sysctl", key, "prefer", table["prefer"])
        fallback = table.get("fallback")
        if fallback is not None and (not isinstance(fallback, str) or not _TOKEN.match(fallback)):
            raise _err(file, key, "fallback must be one name", "sysctl")
        load = _module_list(file, "sysctl", key, table.get("load", []))
        return Prefer(prefer, fallback, load)
    shown = ", ".join(sorted(fields)) or "nothing"
    raise _err(
        file,
        key,
        f"a table value takes either min, or prefer (+ fallback, load); got {shown}",
        "sysctl",
    )


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
    for name in doc:
        if name not in SECTIONS:
            raise _err(file, name, f"unknown section (allowed: {', '.join(SECTIONS)})")
    comments = _comments(text)

    head = _section(file, doc, "profile")
    _only(file, "profile", head, ("name", "summary", "include", "allow_sensitive"))
    name = head.get("name", stem)
    if not isinstance(name, str) or name != stem:
        raise _err(file, "name", f"must be {stem!r}, the file's name", "profile")
    summary = head.get("summary", "")
    if not isinstance(summary, str) or (summary and _text_problem(summary, 400)):
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
    for key, value in _section(file, doc, "sysctl").items():
        problem = paths.sysctl_key_problem(key)
        if problem:
            raise _err(file, key, problem, "sysctl")
        why = sensitive_reason(key)
        if why is not None and key not in allowed:
            raise _err(
                file,
                key,
                f"sensitive: {why}. Setting it needs `allow_sensitive = [{key!r}]` in this "
                "file's [profile] table",
                "sysctl",
            )
        note = comments.get(("sysctl", key), "")
        settings.append(Setting(key, _sysctl_value(file, key, value), file, note))
    boot = _section(file, doc, "bootloader")
    _only(file, "bootloader", boot, ("cmdline", "isolate"))
    used_sensitive: set[str] = set()
    if boot:
        cmdline = boot.get("cmdline", [])
        isolate = boot.get("isolate", [])
        if not isinstance(cmdline, list) or not all(isinstance(a, str) for a in cmdline):
            raise _err(file, "cmdline", "must be a list of kernel parameters", "bootloader")
        for arg in cmdline:
            problem = bootloader.arg_problem(arg)
            if problem:
                raise _err(file, "cmdline", problem, "bootloader")
            flag = bootloader.sensitive_flag(arg)
            why = bootloader.sensitive_arg(arg)
            if why is not None and flag not in allowed:
                raise _err(
                    file,
                    "cmdline",
                    f"sensitive: {arg} {why}. It needs `allow_sensitive = [{flag!r}]` in this "
                    "file's [profile] table",
                    "bootloader",
                )
            if why is not None:
                used_sensitive.add(flag)
        if not isinstance(isolate, list) or not all(i in bootloader.ISOLATE for i in isolate):
            raise _err(
                file, "isolate", f"must be a list of {', '.join(bootloader.ISOLATE)}", "bootloader"
            )
        note = comments.get(("bootloader", "cmdline"), "") or comments.get(
            ("bootloader", "isolate"), ""
        )
        value = Exact(bootloader.encode(cmdline, isolate))
        settings.append(Setting(paths.BOOTLOADER_KEY, value, file, note))
    unused = sorted(allowed - {s.key for s in settings} - used_sensitive)
    if unused:
        raise _err(
            file,
            "allow_sensitive",
            f"names {', '.join(unused)}, which this file does not set (keep the list exact)",
            "profile",
        )

    vm = _section(file, doc, "vm")
    _only(file, "vm", vm, ("transparent_hugepage",))
    if "transparent_hugepage" in vm:
        thp = vm["transparent_hugepage"]
        if thp not in THP_CHOICES:
            raise _err(
                file, "transparent_hugepage", f"must be one of {', '.join(THP_CHOICES)}", "vm"
            )
        note = comments.get(("vm", "transparent_hugepage"), "")
        settings.append(Setting(paths.THP_KEY, Exact(thp), file, note))

    cpu = _section(file, doc, "cpu")
    _only(file, "cpu", cpu, ("governor", "force_latency"))
    if "force_latency" in cpu:
        us = cpu["force_latency"]
        if isinstance(us, bool) or not isinstance(us, int) or not 0 <= us <= 1_000_000:
            raise _err(file, "force_latency", "must be microseconds, 0 to 1000000", "cpu")
        note = comments.get(("cpu", "force_latency"), "")
        settings.append(Setting(paths.FORCE_LATENCY_KEY, Exact.of(us), file, note))
    if "governor" in cpu:
        gov = cpu["governor"]
        wanted = _token_list(
            file, "cpu", "governor", "governor", [gov] if isinstance(gov, str) else gov
        )
        note = comments.get(("cpu", "governor"), "")
        settings.append(Setting(paths.GOVERNOR_KEY, Prefer(wanted), file, note))

    irq = _section(file, doc, "irq")
    _only(file, "irq", irq, ("policy", "irqbalance", "rps"))
    for option, key, choices in (
        ("policy", paths.IRQ_POLICY_KEY, IRQ_POLICIES),
        ("irqbalance", paths.IRQBALANCE_KEY, IRQBALANCE_MODES),
        ("rps", paths.IRQ_RPS_KEY, IRQ_POLICIES),
    ):
        if option in irq:
            value = irq[option]
            if value not in choices:
                raise _err(file, option, f"must be one of {', '.join(choices)}", "irq")
            note = comments.get(("irq", option), "")
            settings.append(Setting(key, Exact(value), file, note))

    hk = _section(file, doc, "housekeeping")
    _only(file, "housekeeping", hk, ("confine",))
    if "confine" in hk:
        units = hk["confine"]
        if not isinstance(units, list) or not all(u in paths.CONFINABLE for u in units):
            raise _err(
                file,
                "confine",
                f"must be a list of {', '.join(paths.CONFINABLE)}",
                "housekeeping",
            )
        note = comments.get(("housekeeping", "confine"), "")
        text = " ".join(sorted(set(units), key=paths.CONFINABLE.index))
        settings.append(Setting(paths.CONFINE_KEY, Exact(text or "none"), file, note))

    mods = _section(file, doc, "modules")
    _only(file, "modules", mods, ("load",))
    modules = _module_list(file, "modules", "load", mods.get("load", []))
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
    host: Host
    logical: str


class _Catalog:
    """The profiles visible from one Host: system ones, then local ones that win."""

    def __init__(self, host: Host, system_dir: Path | None) -> None:
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

    def _add(self, host: Host, directory: str, entry: str, origin: Origin, shown: str) -> None:
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


def load_profile(name: str, host: Host, system_dir: Path | None = None) -> Profile:
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


def list_profiles(host: Host, system_dir: Path | None = None) -> tuple[ProfileInfo, ...]:
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
