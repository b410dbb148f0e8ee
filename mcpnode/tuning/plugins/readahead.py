"""Storage readahead (`[storage]`): `queue/read_ahead_kb` of the block devices models load from,
named by mount point or device name:

    read_ahead_kb = { min = 4096 }      # KiB; exact, or at least (a larger value is kept)
    devices = ["/models", "nvme0n1"]    # a mount point (absolute path) or a /sys/block name

A mount point is followed to its device through /proc/self/mountinfo (field 3, `major:minor`)
and /sys/dev/block/MAJ:MIN; a partition's readahead is its disk's, so the disk is tuned
(block/partitions share the request queue). Device-mapper and md devices have a queue of their
own: theirs is set, not their members'. A mount on no block device (tmpfs, overlay, NFS: major
0) is "not applicable here". tuned's disk plugin sets the same file (`readahead=>4096` in
throughput-performance, "at least" as here).
"""

from __future__ import annotations

import re

from mcpnode.errors import HostError
from mcpnode.host import HostReader
from mcpnode.tuning.facts import KeyFacts
from mcpnode.tuning.model import HostState, PlanItem, Setting
from mcpnode.tuning.plugins.base import SectionInput, StateDraft, Subsystem, err, value_item
from mcpnode.tuning.read import optional, read_value
from mcpnode.tuning.values import AtLeast, Desired, Exact, describe

READAHEAD_KEY = "storage:read_ahead_kb"
DEVICES_KEY = "storage:devices"
MOUNTINFO = "/proc/self/mountinfo"
SYS_BLOCK = "/sys/block"
MAX_KB = 1 << 20  # 1 GiB of readahead: far above any useful value
MAX_DEVICES = 64
# A /sys/block name: the kernel's disk name, `/` written as `!` (cciss!c0d0); never `.`/`..`.
_DEV = re.compile(r"[A-Za-z0-9_!:+-][A-Za-z0-9_.!:+-]{0,31}\Z", re.ASCII)
_MOUNT = re.compile(r"/[A-Za-z0-9_./@+-]{0,255}\Z", re.ASCII)
_ITEM = re.compile(r"storage:read_ahead_kb:([A-Za-z0-9_.!:+-]{1,32})\Z", re.ASCII)
_FOUND = "readahead"  # found[...]: what each named device or mount resolved to

FACTS = {
    READAHEAD_KEY: KeyFacts(
        "128 (VM_READAHEAD_PAGES, 128 KiB) unless the driver sets more",
        "tuned:throughput-performance raises it to at least 4096 for streaming reads",
    ),
    DEVICES_KEY: KeyFacts(None, "the mount points or disks [storage] read_ahead_kb tunes"),
}


def queue_path(dev: str) -> str:
    return f"{SYS_BLOCK}/{dev}/queue/read_ahead_kb"


def key_path(key: str) -> str | None:
    m = _ITEM.match(key)
    if m is None or m.group(1) in (".", "..") or not _DEV.match(m.group(1)):
        return None
    return queue_path(m.group(1))


def _kb(file: str, value: object) -> Desired:
    inner = value.get("min") if isinstance(value, dict) and set(value) == {"min"} else value
    if isinstance(inner, bool) or not isinstance(inner, int) or not 0 <= inner <= MAX_KB:
        raise err(
            file, "read_ahead_kb", f"must be KiB 0 to {MAX_KB}, or {{ min = KIB }}", "storage"
        )
    return AtLeast((inner,)) if isinstance(value, dict) else Exact.of(inner)


def mount_devices(text: str) -> dict[str, tuple[str, str]]:
    """Mount point -> (major:minor, fstype) from /proc/self/mountinfo text; the last mount of a
    point wins (it is the one visible). Pure."""
    out: dict[str, tuple[str, str]] = {}
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        fields, rest = left.split(), right.split()
        if not sep or len(fields) < 5 or not rest:
            continue
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
        out[point] = (fields[2], rest[0])
    return out


class Readahead(Subsystem):
    name = "readahead"
    section = "storage"
    options = ("read_ahead_kb", "devices")
    key_facts = FACTS
    setting_keys = frozenset((READAHEAD_KEY, DEVICES_KEY))
    item_keys = _ITEM

    def path_of(self, key: str) -> str | None:
        return key_path(key)

    def parse(self, section: SectionInput) -> list[Setting]:
        table, file = section.table, section.file
        if "read_ahead_kb" not in table:
            if "devices" in table:
                why = "without read_ahead_kb there is nothing to set"
                raise err(file, "devices", why, "storage")
            return []
        names = table.get("devices")
        if not isinstance(names, list) or not names or len(names) > MAX_DEVICES:
            raise err(
                file,
                "devices",
                f"must list 1 to {MAX_DEVICES} mount points or block device names",
                "storage",
            )
        for name in names:
            ok = isinstance(name, str) and (
                (_MOUNT.match(name) and "/../" not in name + "/") or _DEV.match(name)
            )
            if not ok or name in (".", ".."):
                shown = str(name)[:60]
                raise err(file, "devices", f"{shown!r} is not a mount point or device", "storage")
        desired = _kb(file, table["read_ahead_kb"])
        note = section.comment("storage", "read_ahead_kb")
        listed = Exact(" ".join(names))
        return [
            Setting(DEVICES_KEY, listed, file, section.comment("storage", "devices")),
            Setting(READAHEAD_KEY, desired, file, note),
        ]

    def read(self, host: HostReader, setting: Setting, draft: StateDraft) -> None:
        if setting.key == DEVICES_KEY:
            assert isinstance(setting.desired, Exact)
            draft.found[_FOUND + ".names"] = tuple(setting.desired.text.split())
            return
        names = draft.found.get(_FOUND + ".names")
        resolved: dict[str, str | tuple[str, str]] = {}
        mounts: dict[str, tuple[str, str]] | None = None
        for name in names if isinstance(names, tuple) else ():
            if not name.startswith("/"):
                resolved[name] = name
                continue
            if mounts is None:
                mounts = mount_devices(optional(host, MOUNTINFO) or "")
            resolved[name] = self._disk_of(host, name, mounts)
        draft.found[_FOUND] = resolved
        for dev in {d for d in resolved.values() if isinstance(d, str)}:
            draft.readings[queue_path(dev)] = read_value(host, queue_path(dev))

    def _disk_of(
        self, host: HostReader, point: str, mounts: dict[str, tuple[str, str]]
    ) -> str | tuple[str, str]:
        """The /sys/block name holding `point`'s filesystem, or ("unsupported", why)."""
        found = mounts.get(point.rstrip("/") or "/")
        if found is None:
            return "unsupported", f"nothing is mounted at {point} ({MOUNTINFO})"
        numbers, fstype = found
        if numbers.startswith("0:"):
            return "unsupported", f"{point} is {fstype}, on no block device"
        try:
            real = host.realpath(f"/sys/dev/block/{numbers}")
        except HostError as error:
            return "unsupported", f"/sys/dev/block/{numbers} of {point}: {error.detail}"
        parts = real.rstrip("/").split("/")
        disk = parts[-2] if host.exists(real + "/partition") and len(parts) > 1 else parts[-1]
        if not _DEV.match(disk):
            return "unsupported", f"{point}: {disk[:40]!r} is not a block device name"
        return disk

    def plan(self, setting: Setting, state: HostState) -> list[PlanItem]:
        if setting.key == DEVICES_KEY:
            return []  # a scope: the device items say what each name resolved to
        rule, src = describe(setting.desired), setting.source
        resolved = state.found.get(_FOUND)
        items: list[PlanItem] = []
        done: set[str] = set()
        for dev in resolved.values() if isinstance(resolved, dict) else ():
            if isinstance(dev, tuple):
                why = dev[1]
                items.append(PlanItem(setting.key, "", rule, None, None, "unsupported", why, src))
                continue
            if dev in done:
                continue
            done.add(dev)
            items.append(value_item(f"{setting.key}:{dev}", queue_path(dev), setting, state))
        return items
