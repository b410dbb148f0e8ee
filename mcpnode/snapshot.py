"""`mcpnode snapshot`: capture exactly what discovery reads, so a replay sees the same machine.

The Host records every file read (with the bytes read), every symlink crossed and every
directory listed while discovery and the audit's collectors run; the tarball holds those and
nothing else, symlinks kept as symlinks (with their original, possibly relative targets), plus
`mcpnode-snapshot.json` for what cannot be a file: NVML answers, version commands' outputs, the
effective uid the host was read with.

Known limit: an attribute that failed to read live (EACCES, EIO) is simply absent from the
snapshot, so the replay reports it as absent rather than as an error.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from mcpnode import __version__
from mcpnode.host import Host, Recording
from mcpnode.topology import virt
from mcpnode.topology.discover import discover
from mcpnode.topology.jsonify import topology_json
from mcpnode.topology.model import Topology
from mcpnode.topology.nvml import SNAPSHOT_META as SNAPSHOT_META_PATH
from mcpnode.topology.nvml import RecordingNvml, open_backend

SNAPSHOT_FORMAT = "mcpnode.snapshot/v1"
SNAPSHOT_META = "mcpnode-snapshot.json"
PROBE_MEMBER = "mcpnode-probe.json"  # mcpnode.probe.record.SNAPSHOT_PROBE, at the snapshot root
TOP = "mcpnode-snapshot"


@dataclass(frozen=True)
class SnapshotResult:
    path: Path
    files: int
    links: int
    dirs: int
    topology: Topology
    probed: bool = False  # the snapshot holds a probe run


def capture(host: Host) -> tuple[Topology, Recording, RecordingNvml]:
    """Discover while recording every file read and every NVML answer (errors included), then
    run the audit's collectors inside the same recording, so the snapshot also holds what the
    audit reads (mount table, modules, sysctl.d, container configs, version commands) and
    `mcpnode audit --root SNAPSHOT` replays the audit the live host gave."""
    nvml = RecordingNvml(open_backend(host))
    try:
        with host.recording() as rec:
            topo = discover(host, nvml)
            virt.detect(host)  # DMI and CPU flags: `profiles recommend` replays the host's answer
            record_audit(host, topo)
    finally:
        nvml.close()
    return topo, rec, nvml


def record_audit(host: Host, topo: Topology) -> None:
    """Run every audit area over `topo` for what it reads; the report itself is dropped. The
    audit already turns a failing collector into a finding, so this never raises for one."""
    from mcpnode.audit.run import AREAS, audit_context, run_areas

    run_areas(host, audit_context(host, topo, None, None), AREAS)


def metadata(
    topo: Topology,
    nvml: RecordingNvml | None = None,
    now: datetime | None = None,
    rec: Recording | None = None,
    euid: int | None = None,
) -> dict[str, Any]:
    when = now or datetime.now(timezone.utc)
    body = json.dumps(topology_json(topo), sort_keys=True).encode()
    return {
        "format": SNAPSHOT_FORMAT,
        "mcpnode_version": __version__,
        "hostname": topo.identity.hostname,
        "kernel_release": topo.identity.kernel_release,
        "captured_at": when.isoformat(timespec="seconds"),
        # The topology the live host gave, so a replay can be checked against it.
        "topology_sha256": hashlib.sha256(body).hexdigest(),
        # Every NVML answer the live backend gave, errors included, replayed by RecordedNvml.
        "nvml": None if nvml is None else {"calls": nvml.to_json()},
        # Outputs of version commands (nvidia-ctk --version, ...) run through Host.command.
        "commands": {} if rec is None else dict(sorted(rec.commands.items())),
        # Who read the host: an audit replay says SKIP (needs root) where the live one did.
        "euid": euid,
    }


def write_snapshot(host: Host, out: Path, *, probe: bool = False) -> SnapshotResult:
    """Discover through `host` while recording, then write the tarball atomically (temp file in
    the destination directory, fsync, rename): a reader never sees a half-written snapshot.

    `probe`: also measure (live) or carry over (recorded root) a probe run, kept at the
    snapshot's root as `mcpnode-probe.json` (docs/probe.md). It is measured after the capture,
    so the copies' load does not change the link speeds the snapshot records. Raises
    ProbeUnavailable when it cannot run, before anything is written."""
    topo, rec, nvml = capture(host)
    extra: dict[str, bytes] = {}
    if probe:
        extra[PROBE_MEMBER] = probe_run_bytes(host, topo)
    meta = metadata(topo, nvml, rec=rec, euid=host.effective_uid())
    out = Path(out)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent or Path())
    try:
        with os.fdopen(fd, "wb") as raw:
            mode = "w:bz2" if out.name.endswith((".bz2", ".tbz2")) else "w:gz"
            with tarfile.open(fileobj=raw, mode=mode) as tf:  # type: ignore[call-overload]
                _write_members(tf, rec, meta, extra)
            raw.flush()
            os.fsync(raw.fileno())
        Path(tmp).replace(out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return SnapshotResult(
        out, len(rec.files), len(rec.links), len(rec.dirs), topo, probed=PROBE_MEMBER in extra
    )


def probe_run_bytes(host: Host, topo: Topology) -> bytes:
    """The probe run a snapshot keeps: measured now on the live host (its own NVML handle, so
    the probe's link readings under load never mix with the recorded answers), the one recorded
    under any other root. Raises ProbeUnavailable / ProbeDataError."""
    from mcpnode.errors import ProbeUnavailable
    from mcpnode.probe.model import dumps
    from mcpnode.probe.record import load_recorded

    if host.is_live:
        from mcpnode.probe.live import measure

        backend = open_backend(host)
        try:
            run = measure(host, topo, backend)
        finally:
            backend.close()
        return dumps(run).encode()
    found = load_recorded(host)
    if found is None:
        raise ProbeUnavailable(f"{host.source}: no probe recorded here to carry into the snapshot")
    return dumps(found[0]).encode()


def _info(name: str, kind: bytes, mtime: float) -> tarfile.TarInfo:
    ti = tarfile.TarInfo(f"{TOP}{name}" if name.startswith("/") else f"{TOP}/{name}")
    ti.type = kind
    ti.mtime = int(mtime)
    ti.mode = 0o755 if kind == tarfile.DIRTYPE else (0o777 if kind == tarfile.SYMTYPE else 0o644)
    return ti


def _write_members(
    tf: tarfile.TarFile, rec: Recording, meta: dict[str, Any], extra: dict[str, bytes]
) -> None:
    now = time.time()
    dirs: set[str] = set()
    # Every parent of every recorded path must exist as a real directory in the archive.
    for path in [*rec.files, *rec.links, *rec.dirs]:
        parts = path.strip("/").split("/")
        for i in range(1, len(parts)):
            dirs.add("/" + "/".join(parts[:i]))
    dirs |= {d for d in rec.dirs if d != "/"}
    dirs -= set(rec.links)  # a path seen as a link stays a link
    tf.addfile(_info("", tarfile.DIRTYPE, now))
    for d in sorted(dirs):
        tf.addfile(_info(d, tarfile.DIRTYPE, now))
    for link, target in sorted(rec.links.items()):
        if link in rec.files:
            continue
        ti = _info(link, tarfile.SYMTYPE, now)
        ti.linkname = target
        tf.addfile(ti)
    for path, data in sorted(rec.files.items()):
        if path == SNAPSHOT_META_PATH or path.lstrip("/") in extra:
            continue  # a snapshot of a snapshot: the new metadata (and probe run) replace the old
        ti = _info(path, tarfile.REGTYPE, now)
        ti.size = len(data)
        tf.addfile(ti, io.BytesIO(data))
    body = json.dumps(meta, indent=2, sort_keys=True).encode() + b"\n"
    ti = _info(SNAPSHOT_META, tarfile.REGTYPE, now)
    ti.size = len(body)
    tf.addfile(ti, io.BytesIO(body))
    for name, data in sorted(extra.items()):
        ti = _info(name, tarfile.REGTYPE, now)
        ti.size = len(data)
        tf.addfile(ti, io.BytesIO(data))
