"""`mcpnode config check FILE` and `mcpnode config show [FILE]`: the agent's configuration
(docs/config.md) validated and printed by the same code the agent runs at start and on SIGHUP.

`check` is what Ansible's `validate: mcpnode config check %s` runs on its temporary copy before
the file replaces /etc/mcpnode/mcpnode.toml: exit 0 valid, 65 (EX_DATAERR) invalid, 66
(EX_NOINPUT) missing or unreadable. FILE is resolved under `--root`, as the agent's `--config`
is: `config check --root node.tar.gz /etc/mcpnode/mcpnode.toml` checks the snapshot's file
against the snapshot's profiles. With the default root `/` a relative FILE is taken from the
working directory. `--host-file` takes FILE from this machine whatever `--root` is (Ansible's
temporary copy, checked against the profiles of a root being provisioned).

main.py registers this group (`cli.add_command(config)`) and so imports this module: importing
main.py back at import time would be circular, hence the shared options from cli/options.py
(as main.py uses them) and the exit codes (mcpnode/exitcodes.py) imported inside the commands.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click

from mcpnode.cli.options import F, format_option, profiles_dir_option, root_option

if TYPE_CHECKING:
    from mcpnode.agent.config import AgentConfig, ConfigError, PinRule

CHECK_SCHEMA = "mcpnode.config-check/v1"
CONFIG_SCHEMA = "mcpnode.config/v1"


@click.group("config")
def config() -> None:
    """The agent's configuration file, /etc/mcpnode/mcpnode.toml (docs/config.md)."""


def config_path(file: str | None, root: str, host_file: bool) -> tuple[str, str]:
    """(the root FILE is read under, FILE's logical path there). Without FILE: the agent's
    configuration under --root. A relative FILE is from the working directory when it is read
    from this machine (root `/`, or --host-file), else from the root's top."""
    from mcpnode.agent.config import CONFIG_PATH

    if file is None:
        return root, CONFIG_PATH
    if host_file or Path(root) == Path("/"):
        return "/", str(Path(file).absolute())
    return root, "/" + file.lstrip("/")


def _load(file: str | None, root: str, host_file: bool = False) -> AgentConfig:
    """The configuration FILE names (config_path). Raises ConfigError / ConfigUnreadable, and
    RootError for a root that cannot be used."""
    from mcpnode.agent.config import load_config
    from mcpnode.host import Host

    where, path = config_path(file, root, host_file)
    with Host(where) as host:
        return load_config(host, path)


def host_file_option(fn: F) -> F:
    return click.option(
        "--host-file",
        is_flag=True,
        help="FILE is a path on this machine, not under --root (Ansible's validate: copy).",
    )(fn)


def _fail(ctx: click.Context, err: ConfigError, fmt: str = "text") -> NoReturn:
    """Report a ConfigError the way `check` promises: one line, EX_NOINPUT or EX_DATAERR (and
    with --format json, the same as a document on stdout)."""
    from mcpnode.agent.config import ConfigUnreadable
    from mcpnode.exitcodes import EXIT_DATAERR, EXIT_NO_PROCESS

    if fmt == "json":
        click.echo(check_json(None, err), nl=False)
    click.echo(f"mcpnode: config: {err}", err=True)
    # EXIT_NO_PROCESS is EX_NOINPUT (66): here, the input file is missing or unreadable.
    ctx.exit(EXIT_NO_PROCESS if isinstance(err, ConfigUnreadable) else EXIT_DATAERR)


@config.command("check")
@click.argument("file", type=click.Path(path_type=str))
@root_option
@host_file_option
@profiles_dir_option
@format_option
@click.pass_context
def check(
    ctx: click.Context,
    file: str,
    root: str,
    host_file: bool,
    profiles_dir: Path | None,
    fmt: str,
) -> None:
    """Validate FILE (under --root, as the agent reads --config) as the agent would, the
    profile it names included: exit 0 valid, 65 invalid, 66 missing or unreadable. For
    Ansible: `validate: mcpnode config check --root R --host-file %s`."""
    from mcpnode.agent.config import ConfigError, check_profile
    from mcpnode.host import Host

    try:
        cfg = _load(file, root, host_file)
        with Host(root) as host:
            check_profile(cfg, host, profiles_dir)
    except ConfigError as err:
        _fail(ctx, err, fmt)
    click.echo(check_json(cfg, None) if fmt == "json" else summary_line(cfg), nl=fmt != "json")


@config.command("show")
@click.argument("file", required=False, type=click.Path(path_type=str))
@root_option
@host_file_option
@format_option
@click.pass_context
def show(ctx: click.Context, file: str | None, root: str, host_file: bool, fmt: str) -> None:
    """Print the effective configuration as TOML (or JSON): every key, defaults filled in.
    FILE is resolved under --root and defaults to /etc/mcpnode/mcpnode.toml there."""
    from mcpnode.agent.config import ConfigError

    try:
        cfg = _load(file, root, host_file)
    except ConfigError as err:
        _fail(ctx, err)
    click.echo(show_json(cfg) if fmt == "json" else as_toml(cfg), nl=False)


# -- rendering (pure) -------------------------------------------------------------------------


def _seconds(value: float) -> str:
    return f"{value:g}s"


def summary_line(cfg: AgentConfig) -> str:
    """`FILE: ok (profile P, drift MODE every Ns, autopin off, metrics HOST:PORT)`."""
    autopin = "off"
    if cfg.autopin:
        n = len(cfg.pin_rules)
        autopin = f"on ({n} rule{'s' if n != 1 else ''})"
    return (
        f"{cfg.file}: ok (profile {cfg.profile}, drift {cfg.drift_mode} every "
        f"{_seconds(cfg.drift_interval)}, autopin {autopin}, metrics {cfg.metrics_listen or 'off'})"
    )


def _string(value: str) -> str:
    """A TOML string: literal ('...') when that needs no escape, so regular expressions stay
    readable; else a basic string with TOML's escapes."""
    if "'" not in value and not any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        return f"'{value}'"
    out = []
    for c in value:
        if c in ('"', "\\"):
            out.append("\\" + c)
        elif c == "\n":
            out.append("\\n")
        elif c == "\t":
            out.append("\\t")
        elif ord(c) < 0x20 or ord(c) == 0x7F:
            out.append(f"\\u{ord(c):04X}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


def _printable(text: str) -> str:
    """For a comment: TOML allows no control character but tab there, and a newline would end
    it early."""
    return "".join(c if c.isprintable() else "?" for c in text)


def _number(value: float) -> str:
    """Whole seconds as integers (`30`, read back as 30.0); repr keeps every other float exact."""
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _rule(rule: PinRule) -> list[str]:
    lines = ["", "[[autopin.rule]]", f"name = {_string(rule.name)}"]
    if rule.exe is not None:
        lines.append(f"exe = {_string(rule.exe)}")
    if rule.cmdline is not None:
        lines.append(f"cmdline = {_string(rule.cmdline.pattern)}")
    if rule.unit is not None:
        lines.append(f"unit = {_string(rule.unit)}")
    if rule.migrate is not None:
        lines.append(f"migrate = {_bool(rule.migrate)}")
    return lines


def as_toml(cfg: AgentConfig) -> str:
    """The effective configuration as TOML that parse_config reads back to an equal config."""
    kinds = ", ".join(_string(k) for k in cfg.export_kinds)
    lines = [
        f"# Effective configuration of {_printable(cfg.file)}: every key, defaults filled in.",
        "# Reference: docs/config.md.",
        "",
        "[tuning]",
        f"profile = {_string(cfg.profile)}",
        f"persist = {_bool(cfg.persist)}",
        f"rollback = {_string(cfg.rollback)}",
        "",
        "[drift]",
        f"interval = {_number(cfg.drift_interval)}",
        f"mode = {_string(cfg.drift_mode)}",
        f"max_remediations = {cfg.max_remediations}",
        f"window = {_number(cfg.flap_window)}",
        "",
        "[devices]",
        f"debounce = {_number(cfg.debounce)}",
        f"udev_source = {_string(cfg.udev_source)}",
        "",
        "[placement]",
        f"housekeeping = {_string(cfg.housekeeping)}",
        "",
        "[autopin]",
        f"enabled = {_bool(cfg.autopin)}",
        f"interval = {_number(cfg.pin_interval)}",
        f"scope = {_string(cfg.pin_scope)}",
        f"migrate = {_bool(cfg.pin_migrate)}",
    ]
    for rule in cfg.pin_rules:
        lines.extend(_rule(rule))
    lines += [
        "",
        "[metrics]",
        f"listen = {_string(cfg.metrics_listen or '')}",
        f"allow_remote = {_bool(cfg.metrics_allow_remote)}",
        "",
        "[export]",
        f"kinds = [{kinds}]",
        *(f"{kind}_dir = {_string(d)}" for kind, d in cfg.export_dirs),
        f"nfd_expiry = {_number(cfg.nfd_expiry)}",
        f"slurm_type = {_string(cfg.slurm_type)}",
        "",
        "[log]",
        f"format = {_string(cfg.log_format)}",
        f"level = {_string(cfg.log_level)}",
        "",
        "[health]",
        f"interval = {_number(cfg.health_interval)}",
        f"nvml_events = {_bool(cfg.nvml_events)}",
    ]
    if cfg.expect is not None:
        from mcpnode.audit.expect import expect_lines

        lines += ["", *expect_lines(cfg.expect)]
    return "\n".join(lines) + "\n"


def as_dict(cfg: AgentConfig) -> dict[str, dict[str, Any]]:
    """The effective configuration as the file's sections and keys, every key: what `as_toml`
    writes, as data (`config show --format json`)."""
    rules = [
        {
            "name": r.name,
            **({"exe": r.exe} if r.exe is not None else {}),
            **({"cmdline": r.cmdline.pattern} if r.cmdline is not None else {}),
            **({"unit": r.unit} if r.unit is not None else {}),
            **({"migrate": r.migrate} if r.migrate is not None else {}),
        }
        for r in cfg.pin_rules
    ]
    return {
        "tuning": {"profile": cfg.profile, "persist": cfg.persist, "rollback": cfg.rollback},
        "drift": {
            "interval": cfg.drift_interval,
            "mode": cfg.drift_mode,
            "max_remediations": cfg.max_remediations,
            "window": cfg.flap_window,
        },
        "devices": {"debounce": cfg.debounce, "udev_source": cfg.udev_source},
        "placement": {"housekeeping": cfg.housekeeping},
        "autopin": {
            "enabled": cfg.autopin,
            "interval": cfg.pin_interval,
            "scope": cfg.pin_scope,
            "migrate": cfg.pin_migrate,
            "rule": rules,
        },
        "metrics": {"listen": cfg.metrics_listen or "", "allow_remote": cfg.metrics_allow_remote},
        "export": {
            "kinds": list(cfg.export_kinds),
            **{f"{kind}_dir": d for kind, d in cfg.export_dirs},
            "nfd_expiry": cfg.nfd_expiry,
            "slurm_type": cfg.slurm_type,
        },
        "log": {"format": cfg.log_format, "level": cfg.log_level},
        "health": {"interval": cfg.health_interval, "nvml_events": cfg.nvml_events},
        **({} if cfg.expect is None else {"expect": _expect_dict(cfg)}),
    }


def _expect_dict(cfg: AgentConfig) -> dict[str, Any]:
    from mcpnode.audit.expect import expect_dict

    assert cfg.expect is not None
    return expect_dict(cfg.expect)


def show_json(cfg: AgentConfig) -> str:
    doc = {"schema": CONFIG_SCHEMA, "file": cfg.file, "config": as_dict(cfg)}
    return json.dumps(doc, indent=2) + "\n"


def check_json(cfg: AgentConfig | None, err: ConfigError | None) -> str:
    """`config check --format json`: valid (with the summary's facts) or the error, as data."""
    if cfg is not None:
        doc: dict[str, Any] = {
            "schema": CHECK_SCHEMA,
            "file": cfg.file,
            "valid": True,
            "profile": cfg.profile,
            "summary": summary_line(cfg),
            "error": None,
        }
    else:
        assert err is not None
        doc = {
            "schema": CHECK_SCHEMA,
            "file": err.file,
            "valid": False,
            "profile": None,
            "summary": None,
            "error": {"key": err.key, "detail": err.detail, "message": str(err)},
        }
    return json.dumps(doc, indent=2) + "\n"
