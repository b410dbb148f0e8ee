"""The agent's configuration, `/etc/mcpnode/mcpnode.toml` (docs/config.md): parsed and
validated in one pure step, so the agent at start, the agent on SIGHUP and `mcpnode config
check` (Ansible's `validate:`) give the same answer. Every error names the file and the key.

Unknown keys are errors, not warnings: a typo such as `[drift] intervall = 5` would otherwise
leave the default in force while the operator believes otherwise (tuned's silent-ignore is
the complaint in redhat-performance/tuned#851).
"""

from __future__ import annotations

import errno
import ipaddress
import posixpath
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from mcpnode.audit.expect import parse_table as parse_expect
from mcpnode.audit.expectation import Expectation, ExpectError
from mcpnode.audit.xid_policy import PolicyError, XidPolicy, parse_audit_table
from mcpnode.codec import toml_bounded
from mcpnode.errors import (
    FileKeyError,
    HostError,
    NotRegularFile,
    PathNotFound,
    SymlinkLoop,
    TooLarge,
    Untrusted,
)
from mcpnode.host import Host
from mcpnode.placement.exporters.write import KINDS
from mcpnode.placement.plan import HOUSEKEEPING_DEFAULT
from mcpnode.topology.parse import ParseError, parse_cpulist
from mcpnode.tuning.errors import ProfileError
from mcpnode.tuning.profile import PROFILE_NAME, Profile, load_profile

CONFIG_PATH = "/etc/mcpnode/mcpnode.toml"
METRICS_DEFAULT = "127.0.0.1:9847"
EXPORT_KINDS = ("nfd", "prom", "slurm", "ansible")
# `[export] <kind>_dir`: the directory each kind's file is written to (its file name is fixed).
EXPORT_DIR_KEYS = {f"{kind}_dir": kind for kind in EXPORT_KINDS}
DEFAULT_EXPORT_DIRS: tuple[tuple[str, str], ...] = tuple(
    sorted((name, posixpath.dirname(kind.path)) for name, kind in KINDS.items())
)
SLURM_TYPES = ("autodetect", "short")
# NFD's `# +expiry-time=`: 5 minutes, rewritten every third of it (docs/config.md, [export]).
NFD_EXPIRY_DEFAULT = 300.0
NFD_EXPIRY_MIN = 60.0
MAX_CONFIG_BYTES = 1 << 20

DriftMode = Literal["remediate", "report"]
Rollback = Literal["never", "on-stop"]
LogFormat = Literal["auto", "json", "console"]
UdevSource = Literal["auto", "udev", "kernel", "off"]
PinScope = Literal["slice", "node"]
SlurmType = Literal["autodetect", "short"]


class ConfigError(FileKeyError):
    """The configuration cannot be used. `file` and `key` say where (key None: the whole file)."""


class ConfigUnreadable(ConfigError):
    """The file does not exist or cannot be read (EX_NOINPUT for `mcpnode config check`), as
    opposed to a file that was read and is invalid."""


@dataclass(frozen=True)
class PinRule:
    """Opt-in auto-pin rule. Every field given must match (AND); at least one is required.

    exe:     the executable's base name (`/proc/PID/exe`, else `comm`), exactly;
    cmdline: a regular expression searched in the command line (arguments joined by spaces);
    unit:    the systemd unit from `/proc/PID/cgroup` (`vllm.service`), exactly.
    """

    name: str
    exe: str | None = None
    cmdline: re.Pattern[str] | None = None
    unit: str | None = None
    migrate: bool | None = None  # move its memory too; None: [autopin] migrate decides


@dataclass(frozen=True)
class AgentConfig:
    file: str = CONFIG_PATH
    # [tuning]
    profile: str = "base"
    persist: bool = False
    rollback: Rollback = "never"
    # [drift]
    drift_interval: float = 1.5  # seconds between verifications (one costs ~1 ms: bench/)
    drift_mode: DriftMode = "remediate"
    max_remediations: int = 3  # of one key within `flap_window`; then the agent gives up on it
    flap_window: float = 600.0
    # [devices]
    debounce: float = 0.05  # quiet time after the last udev event before rediscovery
    udev_source: UdevSource = "auto"
    # [placement]
    housekeeping: str = HOUSEKEEPING_DEFAULT
    # [autopin]
    autopin: bool = False
    pin_interval: float = 15.0
    pin_scope: PinScope = "slice"
    pin_rules: tuple[PinRule, ...] = ()
    pin_migrate: bool = False  # default for rules: migrate_pages to the GPU's node after pinning
    # [metrics]
    metrics_listen: str | None = METRICS_DEFAULT  # None: no HTTP endpoint
    metrics_allow_remote: bool = False
    # [export]
    export_kinds: tuple[str, ...] = ("prom",)
    export_dirs: tuple[tuple[str, str], ...] = DEFAULT_EXPORT_DIRS  # (kind, directory) by kind
    nfd_expiry: float = NFD_EXPIRY_DEFAULT  # seconds; 0: no expiry directive
    slurm_type: SlurmType = "autodetect"
    # [log]
    log_format: LogFormat = "auto"
    log_level: str = "info"
    # [health]
    health_interval: float = 5.0  # NVML event set, IB counters (and a root's kmsg file)
    nvml_events: bool = True
    # [expect]: the node's expected inventory (audit/expect.py); None: none given
    expect: Expectation | None = None
    # [audit.xid]: which status the audit gives an Xid (audit/xid_policy.py); None: NVIDIA's
    xid_policy: XidPolicy | None = None
    # Not in the file: where events are injected from (tests; `--inject-fifo`).
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def metrics_address(self) -> tuple[str, int] | None:
        return None if self.metrics_listen is None else split_listen(self.metrics_listen)

    def export_dir(self, kind: str) -> str:
        """The directory `kind`'s file is written to: `[export] <kind>_dir`, else its usual one.
        Raises KeyError for an unknown kind."""
        return dict(self.export_dirs)[kind]


SECTIONS: dict[str, tuple[str, ...]] = {
    "tuning": ("profile", "persist", "rollback"),
    "drift": ("interval", "mode", "max_remediations", "window"),
    "devices": ("debounce", "udev_source"),
    "placement": ("housekeeping",),
    "autopin": ("enabled", "interval", "scope", "migrate", "rule"),
    "metrics": ("listen", "allow_remote"),
    "export": ("kinds", *EXPORT_DIR_KEYS, "nfd_expiry", "slurm_type"),
    "log": ("format", "level"),
    "health": ("interval", "nvml_events"),
}
# [expect]: the node's expected inventory; its keys are audit/expect.py's (parse_table)
EXPECT_SECTION = "expect"
# [audit]: the audit's own settings; its keys are audit/xid_policy.py's (parse_audit_table)
AUDIT_SECTION = "audit"
RULE_KEYS = ("name", "exe", "cmdline", "unit", "migrate")
LOG_LEVELS = ("debug", "info", "warning", "error")
UNIT_NAME = re.compile(r"[A-Za-z0-9:_.\\@-]+\.(service|scope|slice)\Z")


def split_listen(text: str) -> tuple[str, int]:
    """`HOST:PORT` or `[V6]:PORT` -> (host, port). Raises ValueError."""
    m = re.fullmatch(r"\[([0-9A-Fa-f:.]+)\]:(\d{1,5})|([^:\[\]]+):(\d{1,5})", text)
    if not m:
        raise ValueError("expected HOST:PORT or [IPV6]:PORT")
    host = m.group(1) or m.group(3)
    port = int(m.group(2) or m.group(4))
    if not 0 <= port <= 65535:
        raise ValueError(f"port {port} out of range")
    address = ipaddress.ip_address(host)  # names would need DNS at start; addresses only
    if m.group(1) and address.version != 6:
        raise ValueError("brackets are for IPv6 addresses only")
    return host, port


def _is_loopback(host: str) -> bool:
    return ipaddress.ip_address(host).is_loopback


class _Reader:
    def __init__(self, file: str, doc: dict[str, Any]) -> None:
        self.file = file
        self.doc = doc

    def err(self, key: str | None, detail: str) -> ConfigError:
        return ConfigError(self.file, key, detail)

    def section(self, name: str) -> dict[str, Any]:
        value = self.doc.get(name, {})
        if not isinstance(value, dict):
            raise self.err(name, f"must be a table ([{name}]), not {type(value).__name__}")
        allowed = SECTIONS[name]
        for key in value:
            if key not in allowed:
                raise self.err(
                    f"{name}.{key}", f"unknown key (keys of [{name}]: {', '.join(allowed)})"
                )
        return value

    def boolean(self, table: dict[str, Any], section: str, key: str, default: bool) -> bool:
        value = table.get(key, default)
        if not isinstance(value, bool):
            raise self.err(f"{section}.{key}", f"must be true or false, not {value!r}")
        return value

    def seconds(
        self, table: dict[str, Any], section: str, key: str, default: float, lo: float, hi: float
    ) -> float:
        value = table.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.err(f"{section}.{key}", f"must be a number of seconds, not {value!r}")
        if not lo <= float(value) <= hi:
            raise self.err(f"{section}.{key}", f"{value} is out of range ({lo:g}..{hi:g} seconds)")
        return float(value)

    def choice(
        self, table: dict[str, Any], section: str, key: str, default: str, allowed: tuple[str, ...]
    ) -> str:
        value = table.get(key, default)
        if value not in allowed:
            raise self.err(
                f"{section}.{key}", f"must be one of {', '.join(allowed)}, not {value!r}"
            )
        return str(value)


def parse_config(text: str, file: str = CONFIG_PATH) -> AgentConfig:
    """Parse and validate (pure). Raises ConfigError naming `file` and the key."""
    if len(text.encode("utf-8", "surrogateescape")) > MAX_CONFIG_BYTES:
        raise ConfigError(file, None, f"larger than {MAX_CONFIG_BYTES} bytes")
    try:
        doc = toml_bounded.loads(text)
    except toml_bounded.TomlRejected as err:
        raise ConfigError(file, None, f"not valid TOML: {err}") from None
    r = _Reader(file, doc)
    for name in doc:
        if name not in SECTIONS and name not in (EXPECT_SECTION, AUDIT_SECTION):
            known = ", ".join([*SECTIONS, EXPECT_SECTION, AUDIT_SECTION])
            raise r.err(name, f"unknown section (sections: {known})")

    tuning = r.section("tuning")
    profile = tuning.get("profile", "base")
    if not isinstance(profile, str) or not PROFILE_NAME.match(profile):
        raise r.err(
            "tuning.profile",
            f"must be a profile name ([a-z0-9_-], 64 at most) such as 'inference-latency', "
            f"not {profile!r}",
        )
    persist = r.boolean(tuning, "tuning", "persist", False)
    rollback = r.choice(tuning, "tuning", "rollback", "never", ("never", "on-stop"))

    drift = r.section("drift")
    interval = r.seconds(drift, "drift", "interval", 1.5, 0.1, 86400.0)
    mode = r.choice(drift, "drift", "mode", "remediate", ("remediate", "report"))
    max_rem = drift.get("max_remediations", 3)
    if isinstance(max_rem, bool) or not isinstance(max_rem, int) or not 1 <= max_rem <= 1000:
        raise r.err("drift.max_remediations", f"must be an integer 1..1000, not {max_rem!r}")
    window = r.seconds(drift, "drift", "window", 600.0, 1.0, 7 * 86400.0)

    devices = r.section("devices")
    debounce = r.seconds(devices, "devices", "debounce", 0.05, 0.0, 60.0)
    udev_source = r.choice(
        devices, "devices", "udev_source", "auto", ("auto", "udev", "kernel", "off")
    )

    placement = r.section("placement")
    housekeeping = placement.get("housekeeping", HOUSEKEEPING_DEFAULT)
    if not isinstance(housekeeping, str):
        raise r.err("placement.housekeeping", f"must be a string, not {housekeeping!r}")
    if housekeeping.strip() not in (HOUSEKEEPING_DEFAULT, "none"):
        try:
            parse_cpulist(housekeeping)
        except ParseError as err:
            raise r.err(
                "placement.housekeeping",
                f"{housekeeping!r}: expected 'first-core', 'none' or a cpulist ({err})",
            ) from None

    autopin = r.section("autopin")
    enabled = r.boolean(autopin, "autopin", "enabled", False)
    pin_interval = r.seconds(autopin, "autopin", "interval", 15.0, 0.1, 86400.0)
    scope = r.choice(autopin, "autopin", "scope", "slice", ("slice", "node"))
    pin_migrate = r.boolean(autopin, "autopin", "migrate", False)
    rules = _rules(r, autopin.get("rule", []))
    if enabled and not rules:
        raise r.err("autopin.rule", "autopin is enabled but no [[autopin.rule]] is given")

    metrics = r.section("metrics")
    listen = metrics.get("listen", METRICS_DEFAULT)
    allow_remote = r.boolean(metrics, "metrics", "allow_remote", False)
    if not isinstance(listen, str):
        raise r.err(
            "metrics.listen", f'must be a string HOST:PORT, or "" to disable, not {listen!r}'
        )
    if listen:
        try:
            host, _port = split_listen(listen)
        except ValueError as err:
            raise r.err("metrics.listen", f"{listen!r}: {err}") from None
        if not _is_loopback(host) and not allow_remote:
            raise r.err(
                "metrics.listen",
                f"{listen!r} is not a loopback address; set metrics.allow_remote = true to "
                "expose the node's topology and tuning state beyond this host",
            )

    export = r.section("export")
    kinds = export.get("kinds", ["prom"])
    if not isinstance(kinds, list) or not all(isinstance(k, str) for k in kinds):
        raise r.err("export.kinds", f"must be a list of names, not {kinds!r}")
    for k in kinds:
        if k not in EXPORT_KINDS:
            raise r.err("export.kinds", f"unknown kind {k!r} (kinds: {', '.join(EXPORT_KINDS)})")
    if len(set(kinds)) != len(kinds):
        raise r.err("export.kinds", "lists a kind twice")
    dirs = dict(DEFAULT_EXPORT_DIRS)
    for key, kind in EXPORT_DIR_KEYS.items():
        if key in export:
            dirs[kind] = _directory(r, f"export.{key}", export[key])
    nfd_expiry = r.seconds(export, "export", "nfd_expiry", NFD_EXPIRY_DEFAULT, 0.0, 7 * 86400.0)
    if 0 < nfd_expiry < NFD_EXPIRY_MIN:
        raise r.err(
            "export.nfd_expiry",
            f"{nfd_expiry:g} is too short: 0 (no expiry) or at least {NFD_EXPIRY_MIN:g} seconds "
            "(nfd-worker reads the file on its own schedule; a shorter expiry drops the labels "
            "between two rewrites)",
        )
    slurm_type = r.choice(export, "export", "slurm_type", "autodetect", SLURM_TYPES)

    log = r.section("log")
    log_format = r.choice(log, "log", "format", "auto", ("auto", "json", "console"))
    level = r.choice(log, "log", "level", "info", LOG_LEVELS)

    health = r.section("health")
    health_interval = r.seconds(health, "health", "interval", 5.0, 0.1, 3600.0)
    nvml_events = r.boolean(health, "health", "nvml_events", True)

    # The audit's own tables, parsed by the audit; their errors name the file and key alike.
    try:
        expect = parse_expect(doc[EXPECT_SECTION], file) if EXPECT_SECTION in doc else None
        xid_policy = parse_audit_table(doc[AUDIT_SECTION], file) if AUDIT_SECTION in doc else None
    except (ExpectError, PolicyError) as err:
        raise ConfigError(file, err.key, err.detail) from None

    return AgentConfig(
        file=file,
        profile=profile,
        persist=persist,
        rollback=rollback,  # type: ignore[arg-type]
        drift_interval=interval,
        drift_mode=mode,  # type: ignore[arg-type]
        max_remediations=max_rem,
        flap_window=window,
        debounce=debounce,
        udev_source=udev_source,  # type: ignore[arg-type]
        housekeeping=housekeeping,
        autopin=enabled,
        pin_interval=pin_interval,
        pin_scope=scope,  # type: ignore[arg-type]
        pin_rules=rules,
        pin_migrate=pin_migrate,
        metrics_listen=listen or None,
        metrics_allow_remote=allow_remote,
        export_kinds=tuple(kinds),
        export_dirs=tuple(sorted(dirs.items())),
        nfd_expiry=nfd_expiry,
        slurm_type=slurm_type,  # type: ignore[arg-type]
        log_format=log_format,  # type: ignore[arg-type]
        log_level=level,
        health_interval=health_interval,
        nvml_events=nvml_events,
        expect=expect,
        xid_policy=xid_policy,
    )


def _directory(r: _Reader, key: str, value: object) -> str:
    """An export directory: an absolute, normalised path (no `.`, `..`, `//` or trailing `/`),
    as the unit's ReadWritePaths= and the Ansible role's drop-in will name it."""
    if not isinstance(value, str):
        raise r.err(key, f"must be a string (an absolute directory), not {value!r}")
    if not value.startswith("/") or "\x00" in value or len(value) > 4096:
        raise r.err(key, f"{value!r} is not an absolute path")
    if posixpath.normpath(value) != value or value.startswith("//"):
        raise r.err(
            key, f"{value!r} is not a normalised path (write {posixpath.normpath(value)!r})"
        )
    if value == "/":
        raise r.err(key, "'/' is the root directory, not an export directory")
    if any(c.isspace() or not c.isprintable() or c in "\"'\\%" for c in value):
        # The unit's ReadWritePaths= (and the role's drop-in) split on spaces and expand % and
        # quotes (systemd.syntax(7), systemd.unit(5) specifiers): such a path cannot be named.
        raise r.err(key, f"{value!r}: no spaces, quotes, backslashes, % or control characters")
    return value


def _rules(r: _Reader, value: object) -> tuple[PinRule, ...]:
    if not isinstance(value, list):
        raise r.err("autopin.rule", "must be an array of tables ([[autopin.rule]])")
    out: list[PinRule] = []
    names: set[str] = set()
    for i, raw in enumerate(value):
        key = f"autopin.rule[{i}]"
        if not isinstance(raw, dict):
            raise r.err(key, "must be a table")
        for k in raw:
            if k not in RULE_KEYS:
                raise r.err(f"{key}.{k}", f"unknown key (keys of a rule: {', '.join(RULE_KEYS)})")
        for k, v in raw.items():
            if k == "migrate":
                if not isinstance(v, bool):
                    raise r.err(f"{key}.{k}", f"must be true or false, not {v!r}")
            elif not isinstance(v, str) or not v:
                raise r.err(f"{key}.{k}", f"must be a non-empty string, not {v!r}")
        name = raw.get("name", f"rule{i}")
        if name in names:
            # An unnamed rule is `rule<i>`; point at the rule itself when it wrote no name.
            where = f"{key}.name" if "name" in raw else key
            raise r.err(where, f"{name!r} is used by an earlier rule")
        names.add(name)
        if not any(k in raw for k in ("exe", "cmdline", "unit")):
            raise r.err(key, "needs at least one of exe, cmdline, unit")
        exe = raw.get("exe")
        if exe is not None and "/" in exe:
            raise r.err(f"{key}.exe", f"{exe!r}: the executable's base name, without '/'")
        pattern = None
        if "cmdline" in raw:
            try:
                pattern = re.compile(raw["cmdline"])
            except re.error as err:
                raise r.err(
                    f"{key}.cmdline", f"{raw['cmdline']!r} is not a valid regular expression: {err}"
                ) from None
        unit = raw.get("unit")
        if unit is not None and not UNIT_NAME.match(unit):
            raise r.err(
                f"{key}.unit", f"{unit!r} is not a unit name (NAME.service, .scope or .slice)"
            )
        out.append(PinRule(name, exe, pattern, unit, raw.get("migrate")))
    return tuple(out)


def load_config(host: Host, path: str = CONFIG_PATH) -> AgentConfig:
    """Read `path` through `host` and parse it. A missing file is an error too: the agent never
    runs on defaults it was not told about. Raises ConfigUnreadable (missing, unreadable) or
    ConfigError (read, but invalid; or not to be trusted: not root's alone, a symlink, not a
    regular file, larger than MAX_CONFIG_BYTES, refused while reading)."""
    shown = host.fs_path(path)
    try:
        data = host.read_trusted(path, MAX_CONFIG_BYTES)
    except PathNotFound:
        raise ConfigUnreadable(
            shown,
            None,
            "does not exist (see docs/config.md; etc/mcpnode/mcpnode.toml is an example)",
        ) from None
    except NotRegularFile as err:
        if err.errno == errno.EISDIR:  # nothing there to read (EX_NOINPUT), as before
            raise ConfigUnreadable(shown, None, f"cannot be read: {err.detail}") from None
        raise ConfigError(shown, None, f"cannot be used: {err.detail}") from None
    except (Untrusted, TooLarge, SymlinkLoop) as err:
        raise ConfigError(shown, None, f"cannot be used: {err.detail}") from None
    except HostError as err:
        raise ConfigUnreadable(shown, None, f"cannot be read: {err.detail}") from None
    try:
        # Strictly: TOML is UTF-8, and a replaced byte inside a string (a cmdline regex) would
        # otherwise be accepted as U+FFFD, silently matching something else.
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(shown, None, f"not UTF-8 (byte {err.start})") from None
    return parse_config(text, shown)


def check_profile(config: AgentConfig, host: Host, system_dir: Path | None = None) -> Profile:
    """Load the profile `config` names, as `mcpnode apply --profile` would (the shipped profiles,
    or `system_dir`, then /etc/mcpnode/profiles under `host`, which wins). A profile that is
    missing or invalid is the configuration's error: raises ConfigError naming tuning.profile.
    HostError (a profiles directory that cannot be listed) propagates."""
    try:
        return load_profile(config.profile, host, system_dir)
    except ProfileError as err:
        raise ConfigError(
            config.file, "tuning.profile", f"profile {config.profile!r} cannot be used: {err}"
        ) from None
