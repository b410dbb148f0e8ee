"""What `exec`, `pin` and `systemd-dropin` ask to be placed on: the options they share
(`--root`, `--gpu`, `--scope`, `--membind/--preferred`, `--housekeeping`, `--fresh`), parsed
once by click (cli/main.py `placement_options`) or by the fast path (cli/fast.py) and handed
whole to cli/commands.py `placement_target`."""

from __future__ import annotations

from mcpnode.codec.record import record


# A record, not a dataclass: importing dataclasses imports inspect, ast and tokenize, several ms
# of `exec`'s start (the launcher in front of every inference server).
@record(frozen=True)
class PlacementRequest:
    root: str  # where the published manifest (or the topology to discover) is read
    selector: str  # the GPU(s): an index, a UUID, or all-local
    scope: str = "slice"  # the GPU's exclusive slice, or all CPUs of its NUMA node ("node")
    membind: bool = False  # bind memory to the GPU's node (no fallback) rather than prefer it
    housekeeping: str | None = None  # first-core, none or a cpulist; None: the manifest's
    fresh: bool = False  # discover instead of using the published manifest
