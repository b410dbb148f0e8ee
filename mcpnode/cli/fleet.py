"""`mcpnode fleet-report DIR`: compare many published manifests, name the outliers.

Registered by cli/main.py (`cli.add_command(fleet_report)`); its exit codes are
mcpnode/exitcodes.py's.
"""

from __future__ import annotations

import click

from mcpnode.cli.options import format_option


@click.command("fleet-report")
@click.argument("directory", metavar="DIR", type=click.Path(path_type=str))
@format_option
@click.pass_context
def fleet_report(ctx: click.Context, directory: str, fmt: str) -> None:
    """Compare many hosts' manifests: per property, the majority and the outliers.

    Reads DIR/<host>/manifest.json (or DIR/<host>.json) and compares GPUs, driver, kernel, NUMA,
    PCIe width and generation, NICs, NVLink, tuning and audit FAILs. Exit 0 when the fleet
    agrees, 1 on outliers, no majority or unreadable manifests, 2 when DIR holds no manifest
    or cannot be read."""
    # Imported here, not at the top: main.py imports this module to register the command.
    from mcpnode.errors import RootError
    from mcpnode.exitcodes import EXIT_FINDINGS
    from mcpnode.fleet import render
    from mcpnode.fleet.load import load_fleet
    from mcpnode.fleet.report import compare
    from mcpnode.host import Host

    try:
        with Host(directory) as host:
            report = compare(load_fleet(host))
    except RootError as err:
        err.given_as = "fleet-report DIR"  # there is no --root here: name what was given
        raise
    click.echo(render.as_json(report) if fmt == "json" else render.as_text(report), nl=False)
    if not report.ok:
        ctx.exit(EXIT_FINDINGS)
