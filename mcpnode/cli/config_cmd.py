"""`mcpnode config check FILE` and `mcpnode config show [FILE]`: the agent's configuration
(docs/config.md) validated and printed by the same code the agent runs at start and on SIGHUP.

`check` is what Ansible's `validate: mcpnode config check %s` runs on its temporary copy before
the file replaces /etc/mcpnode/mcpnode.toml: exit 0 valid, 65 (EX_DATAERR) invalid, 66
(EX_NOINPUT) missing or unreadable. An explicit FILE is a path on this machine (relative to the
working directory); `--root` says where the profiles it names are looked up, as for `apply`.

main.py registers this group (`cli.add_command(config)`) and so imports this module: importing
main.py back at import time would be circular, hence the local --root/--profiles-dir options
(same flags, defaults and help as main.py's) and the exit codes imported inside the commands.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import click

from mcpnode.cli.options import profiles_dir_option, root_option

if TYPE_CHECKING:
    from mcpnode.agent.config import AgentConfig, PinRule


@click.group("config")
def config() -> None:
    """The agent's configuration file, /etc/mcpnode/mcpnode.toml (docs/config.md)."""


def _load(file: str | None, root: str) -> AgentConfig:
    """FILE from this machine (relative to the working directory), or, without FILE, the
    configuration under --root. Raises ConfigError / ConfigUnreadable."""
    from mcpnode.agent.config import CONFIG_PATH, load_config
    from mcpnode.host import Host

    if file is None:
        with Host(root) as host:
            return load_config(host, CONFIG_PATH)
    with Host("/") as live:
        return load_config(live, str(Path(file).absolute()))


def _fail(ctx: click.Context, err: Exception) -> NoReturn:
    """Report a ConfigError the way `check` promises: one line, EX_NOINPUT or EX_DATAERR."""
    from mcpnode.agent.config import ConfigUnreadable
    from mcpnode.cli.exitcodes import EXIT_DATAERR, EXIT_NO_PROCESS

    click.echo(f"mcpnode: config: {err}", err=True)
    # EXIT_NO_PROCESS is EX_NOINPUT (66): here, the input file is missing or unreadable.
    ctx.exit(EXIT_NO_PROCESS if isinstance(err, ConfigUnreadable) else EXIT_DATAERR)


@config.command("check")
@click.argument("file", type=click.Path(path_type=str))
@root_option
@profiles_dir_option
@click.pass_context
def check(ctx: click.Context, file: str, root: str, profiles_dir: Path | None) -> None:
    """Validate FILE as the agent would (the profile it names included): exit 0 valid,
    65 invalid, 66 missing or unreadable. For Ansible: `validate: mcpnode config check %s`."""
    from mcpnode.agent.config import ConfigError, check_profile
    from mcpnode.host import Host

    try:
        cfg = _load(file, root)
        with Host(root) as host:
            check_profile(cfg, host, profiles_dir)
    except ConfigError as err:
        _fail(ctx, err)
    click.echo(summary_line(cfg))


@config.command("show")
@click.argument("file", required=False, type=click.Path(path_type=str))
@root_option
@click.pass_context
def show(ctx: click.Context, file: str | None, root: str) -> None:
    """Print the effective configuration as TOML: every key, defaults filled in. FILE defaults
    to /etc/mcpnode/mcpnode.toml under --root."""
    from mcpnode.agent.config import ConfigError

    try:
        cfg = _load(file, root)
    except ConfigError as err:
        _fail(ctx, err)
    click.echo(as_toml(cfg), nl=False)


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
        "",
        "[log]",
        f"format = {_string(cfg.log_format)}",
        f"level = {_string(cfg.log_level)}",
    ]
    return "\n".join(lines) + "\n"
