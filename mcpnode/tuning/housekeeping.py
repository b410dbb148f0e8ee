"""Housekeeping confinement (`[housekeeping] confine`): systemd drop-ins that give
`system.slice`, `user.slice` and `init.scope` `AllowedCPUs=` the housekeeping CPUs, so system
services, login sessions and PID 1 stay off the GPU slices. Pure: the text of each drop-in.

Why AllowedCPUs= on the slices rather than tuned's way. tuned's cpu-partitioning profile sets
`CPUAffinity=` in /etc/systemd/system.conf (its systemd plugin), which becomes PID 1's CPU
affinity at the next boot (or `systemctl daemon-reexec`) and is inherited by everything it
forks: a soft mask any process may widen with sched_setaffinity(2), it covers every slice
(kubepods.slice and the inference services too, which must then set their own CPUAffinity=),
and nothing of it applies before a reboot. `AllowedCPUs=` (systemd.resource-control(5),
systemd >= 244, cgroup v2 `cpuset.cpus`) is enforced by the kernel for every process in the
slice, applies at runtime, is scoped to the three units named (kubepods.slice and any
`Slice=` of the inference units are left alone), and is undone by removing the drop-in: what
Red Hat documents for cgroup v2 CPU isolation (`systemctl set-property system.slice
AllowedCPUs=...`, same for user.slice and init.scope).

The cost of enforcement: cpusets are hierarchical, so a service *inside* system.slice cannot
be given CPUs outside the slice's. Inference services must run in a slice of their own
(`mcpnode systemd-dropin --slice mcpnode-gpu.slice`), which the placement drop-in sets.
systemd reads the drop-ins at `systemctl daemon-reload`; `systemctl set-property --runtime`
is the immediate equivalent. `systemctl set-property` (without --runtime) writes its own
drop-ins to /etc/systemd/system.control/, which win over these.
"""

from __future__ import annotations

from mcpnode.tuning import paths

SECTION = {"system.slice": "Slice", "user.slice": "Slice", "init.scope": "Scope"}


def dropin_text(unit: str, cpus: str) -> str:
    """The drop-in for `unit` (one of paths.CONFINABLE) confining it to cpulist `cpus`."""
    return (
        f"# Written by mcpnode ([housekeeping] confine): {unit} on the housekeeping CPUs, off\n"
        "# the GPU slices. `mcpnode rollback` removes it; `systemctl daemon-reload` applies it.\n"
        f"[{SECTION[unit]}]\n"
        f"AllowedCPUs={cpus}\n"
    )


def unit_of(key: str) -> str:
    """`system.slice` of `systemd:system.slice`."""
    assert key in paths.SYSTEMD_DROPINS
    return key.split(":", 1)[1]
