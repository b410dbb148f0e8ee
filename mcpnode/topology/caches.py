"""CPU caches from sysfs: the L2 and L3 domains, as hwloc's L2Cache/L3Cache objects are.

The kernel describes each CPU's caches under `/sys/devices/system/cpu/cpuN/cache/indexM/`
(drivers/base/cacheinfo.c; Documentation/ABI/testing/sysfs-devices-system-cpu): `level`, `type`
(`Data`, `Instruction`, `Unified`), `shared_cpu_list` (and the hex `shared_cpu_map`), `size`
(printed `%uK`) and, since Linux 4.14, `id` (unique per level). A domain is the set of online
CPUs one cache serves; two CPUs listing the same set at the same level share that cache.

Rules, in the order the reader applies them:

1. Only online CPUs are read: an offline CPU loses its `cache/` directory on current kernels,
   and hwloc reads only online CPUs too. An index already covered by an L2 or L3 domain read
   from another CPU is not read again (one read per L3 domain, one per core for L2), as hwloc
   does.
2. Levels other than 2 and 3 are left out, and nothing but their `level` is read: placement and
   `topo` use L2 and L3 only, and the two L1 directories of every core would otherwise cost
   more than the rest of the reader. Such a directory covers no CPU: each CPU's own `level`
   decides. Instruction caches and an unknown `type` are left out too.
3. The CPUs are `shared_cpu_list`, else `shared_cpu_map`, read only then (POWER9's
   nvidiagpunumanodes dump has only the map). CPUs that are not present are garbage and
   recorded as a Problem; present but offline ones are dropped silently (older kernels kept
   them: offline-cpu0-node0 lists CPUs 0-3 of 4-20 online), as hwloc drops them. A list that
   does not hold the CPU it was read from is a Problem, and that entry is skipped.
4. A set that overlaps another domain of the same level without equalling it is a Problem and
   is skipped: caches of one level partition the CPUs they serve.
5. `size` and `id` are bounded (at most 2^32 - 1, the kernel's unsigned int): anything else is
   None with a Problem, never a made-up number.
"""

from __future__ import annotations

from mcpnode.codec.bounded import is_digits
from mcpnode.errors import HostError, PathNotFound
from mcpnode.topology import parse
from mcpnode.topology.attrs import attr_parsed, attr_text, read_attrs
from mcpnode.topology.model import Cache, CpuSet, CpuTopology
from mcpnode.topology.sysfs import SYS_CPU, Problems, read_parsed

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy reads it the same)
if TYPE_CHECKING:
    from collections.abc import Mapping

    from mcpnode.host import HostReader

LEVELS = frozenset({2, 3})
KINDS = frozenset({"Unified", "Data"})
# More index directories than any CPU has (x86 has 4 or 5, arm64 up to 4): past it, garbage.
MAX_INDEXES = 16
_MAX_U32 = (1 << 32) - 1
_ATTRS = frozenset({"level", "type", "shared_cpu_list", "size", "id"})
_NOTHING: frozenset[str] = frozenset()
_SCALE = {"": 1, "K": 1, "M": 1 << 10, "G": 1 << 20}


def parse_cache_size_kib(text: str) -> int:
    """`size`: the kernel prints KiB with a `K` (`5118K`, cacheinfo.c size_show); `M` and `G`
    and a bare number (KiB) are taken too. At most 2^32 - 1 KiB. Raises ParseError."""
    t = text.strip()
    unit = t[-1:] if t[-1:] in _SCALE else ""
    digits = t[: len(t) - len(unit)]
    if not is_digits(digits, 1, 10):  # the former pattern `([0-9]{1,10})([KMG]?)`, fullmatched
        raise parse.ParseError(f"not a cache size: {text.strip()[:40]!r}")
    value = int(digits) * _SCALE[unit]
    if value > _MAX_U32:
        raise parse.ParseError(f"cache size out of range: {text.strip()[:40]!r}")
    return value


def parse_cache_level(text: str) -> int:
    """`level`: 1 to 9. Raises ParseError."""
    value = parse.parse_int(text, max_digits=2)
    if not 1 <= value <= 9:
        raise parse.ParseError(f"cache level out of range: {text.strip()[:40]!r}")
    return value


def parse_cache_id(text: str) -> int:
    """`id`: an unsigned int. Raises ParseError."""
    value = parse.parse_int(text, max_digits=10)
    if not 0 <= value <= _MAX_U32:
        raise parse.ParseError(f"cache id out of range: {text.strip()[:40]!r}")
    return value


def read_caches(
    host: HostReader, cpus: CpuTopology, problems: Problems, cpus_limit: int
) -> tuple[Cache, ...]:
    """The L2 and L3 domains of the online CPUs (module docstring), by level then lowest CPU.
    A root without `cache/` directories (old dumps, some VMs) gives (). Never raises for
    content: what cannot be used is a Problem naming the file."""
    found: dict[tuple[int, CpuSet], Cache] = {}
    # level -> CPU -> (order found, domain): the domains of one level are disjoint, so a new set
    # overlaps at most one domain per CPU it names, and the first found is the one reported.
    owners: dict[int, dict[int, tuple[int, CpuSet]]] = {}
    covered: dict[str, set[int]] = {}  # index directory name -> CPUs a domain read covers
    # Index directory names that held an L2 or L3 cache where last read: their attributes are
    # read in one batch straight away; the others (L1 on every machine so far) level first.
    # A guess only at what to read first: each directory's own files decide.
    batch_first: set[str] = set()
    for cpu in sorted(cpus.online):
        base = f"{SYS_CPU}/cpu{cpu}/cache"
        try:
            subdirs = host.read_directory(base, _NOTHING)[1]
        except PathNotFound:
            continue
        except HostError as err:
            problems.add("cache.unreadable", base, f"{type(err).__name__}: {err.detail}")
            continue
        indexes = sorted(
            (index, name) for name in subdirs if (index := _index_number(name)) is not None
        )
        if len(indexes) > MAX_INDEXES:
            problems.add(
                "cache.too-many", base, f"{len(indexes)} index directories; read the first 16"
            )
            indexes = indexes[:MAX_INDEXES]
        # Reading one index covers CPUs at that index only: what this CPU must read is known now.
        todo = [name for _, name in indexes if cpu not in covered.get(name, ())]
        first = [f"{base}/{n}/level" for n in todo if n not in batch_first]
        levels = host.read_files(first) if first else {}
        for name in todo:
            path = f"{base}/{name}"
            if _level_outside(levels.get(f"{path}/level")):
                continue
            attrs = read_attrs(host, path, _ATTRS, problems, "cache.unreadable")
            if attrs is None:
                continue
            level = attr_parsed(path, attrs, "level", parse_cache_level, problems)
            if level is not None and level not in LEVELS:
                batch_first.discard(name)
                continue
            batch_first.add(name)
            entry = _entry(host, path, attrs, level, cpu, cpus, cpus_limit, problems)
            if entry is None:
                continue
            key = (entry.level, entry.cpus)
            if key in found:
                covered.setdefault(name, set()).update(entry.cpus)
                continue
            of_level = owners.setdefault(entry.level, {})
            clash = min(
                (of_level[c] for c in entry.cpus if c in of_level),
                key=lambda o: o[0],
                default=None,
            )
            if clash is not None:
                problems.add(
                    "cache.overlap",
                    path,
                    f"L{entry.level} CPUs {entry.cpus.cpulist()} overlap another L{entry.level}"
                    f" domain {clash[1].cpulist()} without equalling it; skipped",
                )
                continue
            found[key] = entry
            mine = (len(found), entry.cpus)
            for c in entry.cpus:
                of_level[c] = mine
            covered.setdefault(name, set()).update(entry.cpus)
    return tuple(sorted(found.values(), key=lambda c: (c.level, min(c.cpus))))


def _index_number(name: str) -> int | None:
    """M of an `indexM` directory, M one or two ASCII digits, else None: the former pattern
    `index([0-9]{1,2})`, fullmatched."""
    return int(name[5:]) if name.startswith("index") and is_digits(name[5:], 1, 2) else None


def _level_outside(text: str | HostError | None) -> bool:
    """Whether an index directory's `level`, as read alone, is a clean level other than 2 and 3
    (an L1 cache): then nothing else of the directory is read. Anything else (not read, absent,
    unreadable, garbage, L2 or L3, the directory gone) is False, and the batch read that follows
    reports it as it always has. One file instead of a listing and five: most index directories
    are L1 (two per core)."""
    if text is None or isinstance(text, HostError):
        return False
    try:
        return parse_cache_level(text.split("\x00", 1)[0]) not in LEVELS
    except parse.ParseError:
        return False


def _entry(
    host: HostReader,
    path: str,
    attrs: Mapping[str, str | HostError],
    level: int | None,
    cpu: int,
    cpus: CpuTopology,
    limit: int,
    problems: Problems,
) -> Cache | None:
    """One L2 or L3 index directory (`level`: its level, parsed by the caller; None when that
    failed) as a Cache, or None when it is not a unified/data cache or cannot be used."""
    kind = attr_text(path, attrs, "type", problems)
    if level is None or kind is None:
        return None
    if kind.strip() not in KINDS:
        return None  # Instruction (or a type this reader does not know): no working set
    shared = attr_parsed(
        path, attrs, "shared_cpu_list", lambda t: parse.parse_cpulist(t, limit), problems
    )
    if shared is None:
        # Read only now, for a list that is absent (POWER9's nvidiagpunumanodes dump has only
        # the map) or unusable: drivers/base/cacheinfo.c prints both, and the list suffices.
        shared = read_parsed(
            host, f"{path}/shared_cpu_map", lambda t: parse.parse_cpumask(t, limit), problems
        )
    if shared is None:
        problems.add("cache.cpus.missing", path, "no readable shared_cpu_list or shared_cpu_map")
        return None
    if not shared <= cpus.present:
        problems.add(
            "cache.cpus.beyond-present",
            f"{path}/shared_cpu_list",
            f"lists CPUs {(shared - cpus.present).cpulist()} that are not present; ignored",
        )
    online = shared if shared <= cpus.online else shared & cpus.online
    if cpu not in online:
        problems.add(
            "cache.cpus.without-self",
            f"{path}/shared_cpu_list",
            f"CPU {cpu}'s cache lists CPUs {online.cpulist() or '(none)'} without it; skipped",
        )
        return None
    return Cache(
        level=level,
        cpus=online,
        size_kib=attr_parsed(path, attrs, "size", parse_cache_size_kib, problems),
        id=attr_parsed(path, attrs, "id", parse_cache_id, problems),
    )
