"""Where a probe run is kept, and reading it back through Host.

* `/var/lib/mcpnode/probe.json`: the last `mcpnode probe` on this host (written atomically,
  0644). The manifest carries its figures; the agent republishes them.
* `/mcpnode-probe.json` at a snapshot's root: the run `mcpnode snapshot --probe` measured, beside
  (not inside) `mcpnode-snapshot.json`, so a snapshot without a probe is unchanged. On a
  recorded root it wins over the host's file, which it was measured after.
"""

from __future__ import annotations

from mcpnode.errors import PathNotFound, ProbeDataError, SymlinkLoop, TooLarge, Untrusted
from mcpnode.host import Host
from mcpnode.probe.model import MAX_RUN_BYTES, ProbeRun, dumps, parse_run

HOST_PROBE = "/var/lib/mcpnode/probe.json"
SNAPSHOT_PROBE = "/mcpnode-probe.json"
SNAPSHOT_PROBE_NAME = SNAPSHOT_PROBE.lstrip("/")
PROBE_MODE = 0o644


def load_recorded(host: Host) -> tuple[ProbeRun, str] | None:
    """The recorded run under `host` and the logical path it came from, or None when there is
    none. Raises ProbeDataError for a file that is there but unusable (naming it and the field,
    or why root does not control it), and HostError when it cannot be read (EACCES).

    Its figures go into the published manifest, which decides where processes run as root: it
    is read as the manifest's other inputs are (Host.read_trusted: a regular file, not a
    symlink, root's or this euid's, not group/world-writable, in such directories up to `/`),
    so a file planted by another user in a world-writable /var/lib/mcpnode is refused."""
    paths = (HOST_PROBE,) if host.is_live else (SNAPSHOT_PROBE, HOST_PROBE)
    for path in paths:
        try:
            data = host.read_trusted(path, MAX_RUN_BYTES)
        except PathNotFound:
            continue
        except TooLarge:
            raise ProbeDataError(f"{path}: larger than {MAX_RUN_BYTES} bytes") from None
        except (Untrusted, SymlinkLoop) as err:
            raise ProbeDataError(f"{path}: cannot be used: {err.detail}") from None
        return parse_run(data, path), path
    return None


def save(host: Host, run: ProbeRun) -> str:
    """Write `run` to /var/lib/mcpnode/probe.json under `host`, atomically. Returns the path.
    Raises AccessDenied / WriteError."""
    host.write_file_atomic(HOST_PROBE, dumps(run).encode(), PROBE_MODE)
    return HOST_PROBE
