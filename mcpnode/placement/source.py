"""Where a launch's placement comes from: the published manifest when it is current, discovery
otherwise. `exec`, `pin`, `systemd-dropin` and `apply` (for the CPU partition of `[irq]`) all
ask here, so a launcher gets the slice the agent advertises, not one it recomputed.

The freshness rule (docs/placement.md, "Where the placement comes from"). A published manifest
is *current* when all of these hold; the first that fails is the one-line notice printed before
falling back to discovery:

1. it parses and passes the manifest checks (schema, major version, content hash);
2. it carries a `publication` stamp, and the stamp's boot id equals this boot's
   (`/proc/sys/kernel/random/boot_id`): a manifest that survived a reboot (a /run that is not a
   tmpfs, a copied root) describes another boot;
3. the online CPUs it was built with equal the online CPUs now (`/sys/devices/system/cpu/online`):
   a CPU taken offline changes every slice of its node, and CPU hotplug is not an event the
   agent rediscovers on;
4. either no uevent happened since it was stamped (`/sys/kernel/uevent_seqnum` unchanged: no
   device was added, removed or changed, so nothing discovery reads can differ), or the process
   that published it is the running agent (`/run/mcpnode/agent.json` names its pid and that pid
   is alive): the agent rediscovers on every PCI, RDMA and NIC event and republishes, so its
   manifest follows the topology, up to its debounce delay (`[agent] debounce`, docs/config.md).

The stamp is taken *before* the discovery it describes, so an event during discovery makes the
manifest stale rather than wrongly current. Every test reads one small file; none initialises
NVML or walks sysfs, and nothing here imports discovery unless it falls back to it.
"""

from __future__ import annotations

from mcpnode.codec.record import record
from mcpnode.errors import HostError, ManifestError, PathNotFound
from mcpnode.host import Host
from mcpnode.placement.plan import (
    GpuPlacement,
    MigPlacement,
    NicChoice,
    Placement,
    plan_placement,
)
from mcpnode.published import read_manifest
from mcpnode.topology import sysfs
from mcpnode.topology.model import CpuSet
from mcpnode.topology.parse import ParseError, parse_cpulist, parse_pci_address

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (codec/typenames.py)
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    # tuning's partition is a dataclass module; launches never build one (only [irq] does)
    from mcpnode.tuning.partition import CpuPartition

BOOT_ID = sysfs.PROC_BOOT_ID
UEVENT_SEQNUM = sysfs.SYS_UEVENT_SEQNUM
CPU_ONLINE = f"{sysfs.SYS_CPU}/online"
_SMALL = 256  # a boot id is 37 bytes, a seqnum at most 21, an online list a few hundred


@record(frozen=True)
class Stamp:
    """What a manifest's freshness is checked against, as read from one root."""

    boot_id: str | None
    uevent_seqnum: int | None
    cpus_online: str | None


def read_stamp(host: Host) -> Stamp:
    """The three freshness facts of the machine behind `host`; None for each that cannot be
    read (a dump without them): unknown never counts as unchanged."""
    boot = _small(host, BOOT_ID)
    seq = _small(host, UEVENT_SEQNUM)
    online = _small(host, CPU_ONLINE, 4096)
    return Stamp(
        boot_id=boot or None,
        uevent_seqnum=int(seq) if seq is not None and seq.isascii() and seq.isdigit() else None,
        cpus_online=online if online else None,
    )


def _small(host: Host, path: str, limit: int = _SMALL) -> str | None:
    try:
        text = host.read_optional(path, limit=limit)
    except HostError:
        return None
    return text.strip() if text is not None else None


def publication(stamp: Stamp, pid: int) -> dict[str, Any]:
    """The manifest's `publication` section: the stamp read before discovery and the pid of
    the process publishing (the agent's, or a one-shot `mcpnode manifest publish`'s)."""
    return {
        "boot_id": stamp.boot_id,
        "uevent_seqnum": stamp.uevent_seqnum,
        "cpus_online": stamp.cpus_online,
        "publisher_pid": pid,
    }


def staleness(doc: Mapping[str, Any], host: Host, now: Stamp | None = None) -> str | None:
    """Why the checked manifest `doc` is not current on the machine behind `host` (the rule in
    the module docstring), or None when it is. `now`: the stamp already read."""
    pub = doc.get("publication")
    if not isinstance(pub, dict):
        return "the published manifest has no publication stamp (republish it)"
    now = now if now is not None else read_stamp(host)
    if now.boot_id is None or pub.get("boot_id") != now.boot_id:
        return "the published manifest is from another boot"
    if now.cpus_online is None or pub.get("cpus_online") != now.cpus_online:
        return (
            f"the online CPUs changed since the manifest was published "
            f"({pub.get('cpus_online')!s} then, {now.cpus_online or 'unknown'} now)"
        )
    seq = pub.get("uevent_seqnum")
    if now.uevent_seqnum is not None and seq == now.uevent_seqnum:
        return None
    # Only when the seqnum moved: the common launch never reads (or imports) the agent state.
    from mcpnode.state.agentstate import read_agent_state

    agent = read_agent_state(host)
    if agent is not None and agent.pid == pub.get("publisher_pid"):
        return None
    return (
        f"devices changed since the manifest was published (uevent {seq!s} then, "
        f"{now.uevent_seqnum!s} now) and the agent that published it is not running"
    )


# -- the manifest's placement back into the model ---------------------------------------------


def placement_of(doc: Mapping[str, Any]) -> Placement:
    """The `placement` section of a checked manifest as the Placement plan_placement would
    have returned. Raises ManifestError naming the field that does not fit."""
    section = doc.get("placement")
    if not isinstance(section, dict) or not isinstance(section.get("gpus"), list):
        raise ManifestError("manifest: placement.gpus is not a list")
    gpus = tuple(_gpu(g, i) for i, g in enumerate(section["gpus"]))
    problems = section.get("problems", [])
    if not isinstance(problems, list) or not all(isinstance(p, str) for p in problems):
        raise ManifestError("manifest: placement.problems is not a list of strings")
    return Placement(gpus, _cpus(section, "housekeeping_cpus", "placement"), tuple(problems))


def online_of(doc: Mapping[str, Any]) -> CpuSet:
    """The online CPUs the manifest was built with (checked against now by staleness)."""
    pub = doc.get("publication")
    return _cpus(pub if isinstance(pub, dict) else {}, "cpus_online", "publication")


def node_cpus_of(doc: Mapping[str, Any]) -> dict[int, CpuSet]:
    """NUMA node id -> its CPUs, from the manifest's `numa_nodes`."""
    nodes = doc.get("numa_nodes")
    if not isinstance(nodes, list):
        raise ManifestError("manifest: numa_nodes is not a list")
    out: dict[int, CpuSet] = {}
    for i, node in enumerate(nodes):
        where = f"numa_nodes[{i}]"
        if not isinstance(node, dict):
            raise ManifestError(f"manifest: {where} is not an object")
        out[_int(node, "id", where)] = _cpus(node, "cpus", where)
    return out


def _int(obj: Mapping[str, Any], key: str, where: str) -> int:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ManifestError(f"manifest: {where}.{key} is not a non-negative integer")
    return value


def _opt_int(obj: Mapping[str, Any], key: str, where: str) -> int | None:
    return None if obj.get(key) is None else _int(obj, key, where)


def _str(obj: Mapping[str, Any], key: str, where: str, optional: bool = False) -> str | None:
    value = obj.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise ManifestError(f"manifest: {where}.{key} is not a string")
    return value


def _cpus(obj: Mapping[str, Any], key: str, where: str) -> CpuSet:
    text = obj.get(key)
    if not isinstance(text, str):
        raise ManifestError(f"manifest: {where}.{key} is not a cpulist")
    try:
        return parse_cpulist(text)
    except ParseError as err:
        raise ManifestError(f"manifest: {where}.{key}: {err}") from err


def _address(obj: Mapping[str, Any], key: str, where: str) -> Any:
    text = _str(obj, key, where)
    assert text is not None
    try:
        return parse_pci_address(text)
    except ParseError as err:
        raise ManifestError(f"manifest: {where}.{key}: {err}") from err


def _env(raw: dict[str, Any], where: str) -> tuple[tuple[str, str], ...]:
    """The `env` object of a GPU or MIG entry: names to values, all strings."""
    env = raw.get("env")
    if not isinstance(env, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in env.items()
    ):
        raise ManifestError(f"manifest: {where}.env is not an object of strings")
    return tuple(env.items())


def _gpu(raw: object, i: int) -> GpuPlacement:
    where = f"placement.gpus[{i}]"
    if not isinstance(raw, dict):
        raise ManifestError(f"manifest: {where} is not an object")
    env = _env(raw, where)
    nics = raw.get("nics")
    if not isinstance(nics, list):
        raise ManifestError(f"manifest: {where}.nics is not a list")
    peers = raw.get("nvlink_peers")
    if not isinstance(peers, list) or not all(
        isinstance(p, int) and not isinstance(p, bool) for p in peers
    ):
        raise ManifestError(f"manifest: {where}.nvlink_peers is not a list of indices")
    source = _str(raw, "numa_source", where)
    assert source is not None
    migs = raw.get("mig_devices", [])
    if not isinstance(migs, list):
        raise ManifestError(f"manifest: {where}.mig_devices is not a list")
    return GpuPlacement(
        index=_int(raw, "index", where),
        uuid=_str(raw, "uuid", where, optional=True),
        address=_address(raw, "address", where),
        numa_node=_opt_int(raw, "numa_node", where),
        numa_source=source,
        local_cpus=_cpus(raw, "local_cpus", where),
        slice_cpus=_cpus(raw, "slice_cpus", where),
        memory_nodes=_cpus(raw, "memory_nodes", where),
        nics=tuple(_nic(n, f"{where}.nics[{j}]") for j, n in enumerate(nics)),
        nvlink_peers=tuple(peers),
        env=env,
        mig=tuple(_mig(m, f"{where}.mig_devices[{j}]") for j, m in enumerate(migs)),
        # absent from manifests published before the cache and socket scopes: empty, and
        # `--scope cache|socket` then says there are no such CPUs
        cache_cpus=_cpus(raw, "cache_cpus", where) if "cache_cpus" in raw else CpuSet(),
        socket_cpus=_cpus(raw, "socket_cpus", where) if "socket_cpus" in raw else CpuSet(),
    )


def _mig(raw: object, where: str) -> MigPlacement:
    if not isinstance(raw, dict):
        raise ManifestError(f"manifest: {where} is not an object")
    env = _env(raw, where)
    uuid = _str(raw, "uuid", where)
    assert uuid is not None
    return MigPlacement(
        uuid=uuid,
        gpu_instance_id=_opt_int(raw, "gpu_instance_id", where),
        compute_instance_id=_opt_int(raw, "compute_instance_id", where),
        memory_mib=_opt_int(raw, "memory_mib", where),
        profile=_str(raw, "profile", where, optional=True),
        env=env,
    )


def _nic(raw: object, where: str) -> NicChoice:
    if not isinstance(raw, dict):
        raise ManifestError(f"manifest: {where} is not an object")
    netdevs = raw.get("netdevs")
    if not isinstance(netdevs, list) or not all(isinstance(d, str) for d in netdevs):
        raise ManifestError(f"manifest: {where}.netdevs is not a list of names")
    speed = raw.get("link_speed_gts")
    if speed is not None and (isinstance(speed, bool) or not isinstance(speed, (int, float))):
        raise ManifestError(f"manifest: {where}.link_speed_gts is not a number")
    bucket = _str(raw, "bucket", where)
    assert bucket is not None
    return NicChoice(
        address=_address(raw, "address", where),
        rdma=_str(raw, "rdma", where, optional=True),
        netdevs=tuple(netdevs),
        bucket=bucket,
        link_speed_gts=None if speed is None else float(speed),
        link_width=_opt_int(raw, "link_width", where),
    )


# -- the choice ------------------------------------------------------------------------------


@record(frozen=True)
class Resolved:
    """A placement and where it came from. `online`: the online CPUs it was computed for;
    `node_cpus`: every NUMA node's CPUs; `notice`: the one line to print when the published
    manifest could not be used (None when it was, or when --fresh asked for discovery)."""

    placement: Placement
    online: CpuSet
    node_cpus: Mapping[int, CpuSet]
    source: str  # "manifest" or "discovery"
    notice: str | None
    housekeeping: str


def resolve(host: Host, *, housekeeping: str | None = None, fresh: bool = False) -> Resolved:
    """The placement for launches on the machine behind `host` (module docstring).

    `housekeeping` None takes the manifest's policy (discovery then uses the default); a policy
    other than the manifest's needs discovery, since the manifest's slices are cut for its own.
    Raises what discovery raises (RootError, HostError) and UsageError for a bad policy."""
    notice: str | None = None
    if not fresh:
        doc, notice = _current_manifest(host)
        if doc is not None:
            policy = doc.get("placement", {}).get("housekeeping_policy")
            if housekeeping is None or housekeeping == policy:
                try:
                    return Resolved(
                        placement_of(doc),
                        online_of(doc),
                        node_cpus_of(doc),
                        "manifest",
                        None,
                        str(policy),
                    )
                except ManifestError as err:
                    notice = str(err)
            else:
                notice = f"--housekeeping {housekeeping} is not the published manifest's ({policy})"
    return _discover(host, housekeeping, notice)


def _current_manifest(host: Host) -> tuple[dict[str, Any] | None, str | None]:
    """The published manifest when it can be trusted, passes every check (mcpnode/published.py)
    and is current; else None and the one line saying why."""
    try:
        doc = read_manifest(host)
    except PathNotFound:
        return None, "no published manifest"
    except (ManifestError, HostError) as err:
        return None, str(err)
    why = staleness(doc, host)
    return (doc, None) if why is None else (None, why)


def _discover(host: Host, housekeeping: str | None, notice: str | None) -> Resolved:
    from mcpnode.placement.plan import HOUSEKEEPING_DEFAULT
    from mcpnode.topology.discover import discover_host

    policy = housekeeping if housekeeping is not None else HOUSEKEEPING_DEFAULT
    topo = discover_host(host)
    nodes = {n.id: CpuSet(n.cpus) for n in topo.numa_nodes}
    return Resolved(
        plan_placement(topo, policy),
        CpuSet(topo.cpus.online),
        nodes,
        "discovery",
        None if notice is None else f"{notice}: discovering the topology instead",
        policy,
    )


def partition_of(resolved: Resolved) -> CpuPartition:
    """The CPU partition `[irq]` places against, from a resolved placement."""
    return cpu_partition(resolved.placement, resolved.node_cpus, resolved.source)


def cpu_partition(
    placement: Placement, node_cpus: Mapping[int, CpuSet], source: str
) -> CpuPartition:
    from mcpnode.tuning.partition import CpuPartition

    slices: set[int] = set()
    for gpu in placement.gpus:
        slices |= gpu.slice_cpus
    return CpuPartition(
        frozenset(placement.housekeeping),
        frozenset(slices),
        {n: frozenset(c) for n, c in node_cpus.items()},
        source,
    )
