"""Collect an exporter's inputs from a Host, render, and write the file atomically.

The only part of the exporters with effects: discovery, placement and (optionally) the audit
are read through the Host, and the file is replaced with `Host.write_file_atomic` (temp file in
the same directory, fsync, rename, mode 0644), so nfd-worker, node_exporter, slurmd or Ansible
never read half a file.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from mcpnode.errors import UsageError
from mcpnode.host import Host
from mcpnode.placement.exporters import ansible, nfd, prom, slurm
from mcpnode.placement.exporters.inputs import AuditSummary, summarize
from mcpnode.placement.plan import HOUSEKEEPING_DEFAULT, Placement, plan_placement
from mcpnode.topology.model import Topology

Renderer = Callable[[Topology, Placement, AuditSummary | None], str]


@dataclass(frozen=True)
class Kind:
    name: str
    path: str  # default logical path under the root
    render: Renderer


KINDS: dict[str, Kind] = {
    "nfd": Kind("nfd", nfd.PATH, nfd.render),
    "prom": Kind("prom", f"{prom.DIR}/{prom.FILE_NAME}", prom.render),
    "slurm": Kind("slurm", slurm.PATH, slurm.render),
    "ansible": Kind("ansible", ansible.PATH, ansible.render),
}


@dataclass(frozen=True)
class Export:
    kind: str
    path: str  # logical path written (or that would be written)
    text: str


def target_path(kind: str, directory: str | None = None) -> str:
    """Where `kind` is written: its default path, or the same file name in `directory`."""
    k = _kind(kind)
    if directory is None:
        return k.path
    if not directory.startswith("/"):
        raise UsageError(f"--dir {directory!r}: must be an absolute path (under --root)")
    return f"{directory.rstrip('/')}/{k.path.rsplit('/', 1)[-1]}"


@dataclass(frozen=True)
class Options:
    """What the kinds take beyond their inputs: the gres.conf `Type=` spelling (slurm) and the
    feature file's expiry in seconds from now (nfd; None: no expiry directive)."""

    slurm_type: slurm.TypeForm = "autodetect"
    nfd_expiry_s: float | None = None


def render(
    kind: str,
    topology: Topology,
    placement: Placement,
    audit: AuditSummary | None,
    options: Options = Options(),
    *,
    now: datetime | None = None,
) -> str:
    """`kind`'s text with `options` applied (`now`, UTC, is when an nfd expiry counts from).
    Raises UsageError for an unknown kind, NfdLabelError for an invalid label."""
    k = _kind(kind)
    if kind == "slurm":
        return slurm.render(topology, placement, audit, type_form=options.slurm_type)
    text = k.render(topology, placement, audit)
    if kind == "nfd" and options.nfd_expiry_s:
        start = now if now is not None else datetime.now(timezone.utc)
        text = nfd.with_expiry(text, start + timedelta(seconds=options.nfd_expiry_s))
    return text


def build(
    host: Host,
    kind: str,
    *,
    audit: bool = True,
    directory: str | None = None,
    housekeeping: str = HOUSEKEEPING_DEFAULT,
    options: Options = Options(),
) -> Export:
    """Render `kind` for the machine behind `host` (`housekeeping` as plan_placement takes it).
    Raises UsageError for an unknown kind, a relative directory or a bad housekeeping spec,
    HostError/RootError when the root cannot be read, NfdLabelError for an invalid label."""
    from mcpnode.topology.discover import discover_host

    _kind(kind)
    path = target_path(kind, directory)
    topology = discover_host(host)
    summary = None
    if audit:
        from mcpnode.audit.run import run_audit

        summary = summarize(run_audit(host))
    text = render(kind, topology, plan_placement(topology, housekeeping), summary, options)
    return Export(kind, path, text)


def write(host: Host, export: Export) -> None:
    """Replace the file atomically, mode 0644. Raises AccessDenied / WriteError."""
    host.write_file_atomic(export.path, export.text.encode(), mode=0o644)


def _kind(kind: str) -> Kind:
    try:
        return KINDS[kind]
    except KeyError:
        raise UsageError(f"unknown export kind {kind!r} (kinds: {', '.join(KINDS)})") from None
