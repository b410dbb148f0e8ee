"""`mcpnode probe`: measured bandwidth against the links' promise and the placement
(docs/probe.md). Live on `--root /` (needs the `mcpnode[probe]` extra and the NVIDIA driver),
replayed from a recorded run under any other root.

Exit: 0 nothing FAILed, 1 a finding FAILed, 2 the probe could not run (no bindings, no driver,
no GPU, nothing recorded; one line says which), 65 a recorded run is unusable (the file and the
field named). main.py registers this command; cli/errors.py maps the errors to the codes of
mcpnode/exitcodes.py, which are imported inside the command for the reason config_cmd.py gives.
"""

from __future__ import annotations

import click

from mcpnode.cli.options import root_option


@click.command("probe")
@root_option
@click.option(
    "--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True
)
@click.option(
    "--samples", type=click.IntRange(1, 100), default=5, show_default=True, help="Samples per case."
)
@click.option(
    "--buffer-mib",
    type=click.IntRange(1, 4096),
    default=256,
    show_default=True,
    help="Size of each timed copy, MiB.",
)
@click.option(
    "--no-save",
    is_flag=True,
    help="Do not keep the run in /var/lib/mcpnode/probe.json (where the manifest reads it).",
)
@click.option(
    "--housekeeping",
    default="first-core",
    show_default=True,
    metavar="first-core|none|CPULIST",
    help="As for the manifest: the placement whose NUMA nodes are checked.",
)
@click.pass_context
def probe(
    ctx: click.Context,
    root: str,
    fmt: str,
    samples: int,
    buffer_mib: int,
    no_save: bool,
    housekeeping: str,
) -> None:
    """Host<->GPU copy bandwidth from every NUMA node and GPU<->GPU peer bandwidth, against
    what the PCIe and NVLink links promise; checks the placement's NUMA node is the fastest.
    Uses the GPUs for a few seconds per GPU."""
    from dataclasses import replace

    from mcpnode.cli import render_probe
    from mcpnode.exitcodes import EXIT_FINDINGS
    from mcpnode.host import Host
    from mcpnode.probe.command import run_probe
    from mcpnode.probe.live import DEFAULT_SETTINGS

    settings = replace(DEFAULT_SETTINGS, samples=samples, buffer_bytes=buffer_mib << 20)
    with Host(root) as host:
        outcome = run_probe(host, settings=settings, keep=not no_save, housekeeping=housekeeping)
    if fmt == "json":
        click.echo(render_probe.as_json(outcome.report, outcome.source), nl=False)
    else:
        click.echo(render_probe.as_text(outcome.report, outcome.source), nl=False)
    if outcome.save_error is not None:
        click.echo(f"mcpnode: probe: run not kept: {outcome.save_error}", err=True)
    if any(f.status.value == "FAIL" for f in outcome.report.findings):
        ctx.exit(EXIT_FINDINGS)
