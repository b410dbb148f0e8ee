"""NIC queues (`[nic]`): ring sizes and channel counts of the Ethernet and RDMA netdevs a profile
names, through the `ethtool` command (`-g`/`-G` rings, `-l`/`-L` channels):

    devices = "rdma"                # every netdev of an RDMA device (the GPUs' NICs on an HGX
                                    # node), or a list of interface names
    rings = "max"                   # rx and tx rings at the driver's pre-set maximum, or
                                    # { rx = 4096, tx = 4096 }
    combined_channels = "max"       # combined queues at the pre-set maximum, or a count

Why the command and not the kernel's ethtool netlink family (ETHTOOL_MSG_RINGS_GET/SET,
CHANNELS_GET/SET, Linux 5.6+): there is no file to journal, so a value is read and set through
one program that speaks netlink where the kernel has it and the older SIOCETHTOOL ioctl where it
does not (ethtool 5.6+ does both), on every distribution the agent runs on; its reads replay
from a snapshot (Host.command), its writes run only on the live host (Host.run_change), and the
tests drive a recorded stand-in first on PATH, as they do grubby and nvidia-smi. A hand-written
genetlink client would need a socket type the Host abstraction and snapshots do not carry.

Each item's value is the fields ethtool sets, `rx 4096 tx 4096` or `combined 32`: journaled as
read, restored with the same command. A driver without the operation (EOPNOTSUPP: veth rings,
virtio without multiqueue) is "not applicable here".
"""

from __future__ import annotations

import re

from mcpnode.errors import CommandFailed
from mcpnode.host import Host, HostReader
from mcpnode.tuning import privilege
from mcpnode.tuning.facts import KeyFacts
from mcpnode.tuning.model import HostState, PlanItem, Setting
from mcpnode.tuning.plugins.base import SectionInput, StateDraft, Subsystem, err, value_item
from mcpnode.tuning.read import Absent, Reading, Unreadable
from mcpnode.tuning.values import Exact, describe

RINGS_KEY = "nic:rings"
CHANNELS_KEY = "nic:channels"
DEVICES_KEY = "nic:devices"
SYS_CLASS_IB = "/sys/class/infiniband"
MAX_COUNT = 1 << 16  # rings and channels: u32 in the kernel, far below in every driver
MAX_OUTPUT_LINES = 64
# An interface name (IFNAMSIZ 16; dev_valid_name() refuses '/', ':' and whitespace), and never
# one starting with '-', which ethtool could read as an option.
_NAME = r"[A-Za-z0-9_.@][A-Za-z0-9_.@-]{0,14}"
_DEV = re.compile(_NAME + r"\Z", re.ASCII)
_ITEM = re.compile(r"nic:(rings|channels):(" + _NAME + r")\Z", re.ASCII)
_FOUND = "nic.devices"
_OPS = {"rings": ("-g", "-G", ("rx", "tx")), "channels": ("-l", "-L", ("combined",))}

FACTS = {
    RINGS_KEY: KeyFacts(
        "the driver's (mlx5: 1024)",
        "larger rings absorb 100-400 GbE bursts (NCCL over RoCE, KV-cache transfers)",
    ),
    CHANNELS_KEY: KeyFacts(
        "the driver's (mlx5: one per CPU of the local node, at most 63)",
        "queues per NIC; with [irq] their interrupts land on housekeeping CPUs",
    ),
    DEVICES_KEY: KeyFacts(None, "the interfaces [nic] rings and channels apply to"),
}


def item_path(what: str, dev: str) -> str:
    """What an item names in the journal: the command that reads it (no file holds it)."""
    return f"ethtool {_OPS[what][0]} {dev}"


def key_path(key: str) -> str | None:
    m = _ITEM.match(key)
    if m is None or m.group(2) in (".", ".."):
        return None
    return item_path(m.group(1), m.group(2))


def parse_ethtool(text: str) -> tuple[dict[str, str], dict[str, str]]:
    """(pre-set maximums, current settings) of `ethtool -g`/`-l` output, field -> value as
    printed (`RX` -> `1024`, `Combined` -> `n/a`). Pure."""
    maximums: dict[str, str] = {}
    current: dict[str, str] = {}
    into = maximums
    for line in text.splitlines()[:MAX_OUTPUT_LINES]:
        if line.startswith("Current hardware settings"):
            into = current
            continue
        name, sep, value = line.partition(":")
        if sep and value.strip():
            into.setdefault(name.strip().lower(), value.strip())
    return maximums, current


def _over_maximum(text: str, maximums: object) -> str | None:
    """`rx 8192` when a field of `text` (`rx 9000 tx 512`) is above the driver's pre-set
    maximum (the kernel would refuse the whole write with EINVAL), else None."""
    words = text.split()
    for name, value in zip(words[::2], words[1::2], strict=True):
        top = maximums.get(name) if isinstance(maximums, dict) else None
        if top is not None and top.isdigit() and len(top) <= 6 and int(value) > int(top):
            return f"{name} {top}"
    return None


def _count(file: str, option: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_COUNT:
        raise err(file, option, f'must be "max" or a count 1 to {MAX_COUNT}', "nic")
    return value


class NicQueues(Subsystem):
    name = "nicqueues"
    section = "nic"
    options = ("devices", "rings", "combined_channels")
    key_facts = FACTS
    setting_keys = frozenset((RINGS_KEY, CHANNELS_KEY, DEVICES_KEY))
    item_keys = _ITEM

    def requirement(self, key: str) -> privilege.Requirement:
        # ethtool -G/-L: dev_ethtool() checks ns_capable(CAP_NET_ADMIN) (net/ethtool/ioctl.c).
        return privilege.Requirement(
            True, privilege.CAP_NET_ADMIN, None, "ethtool -G/-L need CAP_NET_ADMIN"
        )

    def path_of(self, key: str) -> str | None:
        return key_path(key)

    def parse(self, section: SectionInput) -> list[Setting]:
        table, file = section.table, section.file
        if "rings" not in table and "combined_channels" not in table:
            if "devices" in table:
                raise err(file, "devices", "without rings or combined_channels", "nic")
            return []
        devices = table.get("devices")
        if devices != "rdma" and not (
            isinstance(devices, list)
            and 0 < len(devices) <= 64
            and all(isinstance(d, str) and _DEV.match(d) and d not in (".", "..") for d in devices)
        ):
            raise err(file, "devices", 'must be "rdma" or a list of interface names', "nic")
        names = "rdma" if devices == "rdma" else " ".join(devices)
        out = [Setting(DEVICES_KEY, Exact(names), file, section.comment("nic", "devices"))]
        if "rings" in table:
            rings = table["rings"]
            if isinstance(rings, dict) and set(rings) == {"rx", "tx"}:
                rx, tx = (_count(file, "rings", rings[k]) for k in ("rx", "tx"))
                value = f"rx {rx} tx {tx}"
            elif rings == "max":
                value = "max"
            else:
                raise err(file, "rings", 'must be "max" or { rx = N, tx = N }', "nic")
            out.append(Setting(RINGS_KEY, Exact(value), file, section.comment("nic", "rings")))
        if "combined_channels" in table:
            chans = table["combined_channels"]
            value = (
                "max" if chans == "max" else f"combined {_count(file, 'combined_channels', chans)}"
            )
            note = section.comment("nic", "combined_channels")
            out.append(Setting(CHANNELS_KEY, Exact(value), file, note))
        return out

    def read(self, host: HostReader, setting: Setting, draft: StateDraft) -> None:
        if setting.key == DEVICES_KEY:
            assert isinstance(setting.desired, Exact)
            draft.found[_FOUND] = setting.desired.text
            return
        what = "rings" if setting.key == RINGS_KEY else "channels"
        for dev in self._devices(host, draft):
            reading, maximums = self._ethtool(host, what, dev)
            draft.readings[item_path(what, dev)] = reading
            draft.found[f"nic.max.{what}.{dev}"] = maximums

    def _devices(self, host: HostReader, draft: StateDraft) -> tuple[str, ...]:
        """The interfaces named, "rdma" resolved once to the netdevs of every RDMA device."""
        names = draft.found.get(_FOUND)
        if isinstance(names, tuple):
            return names
        if names != "rdma":
            found = tuple(str(names or "").split())
        else:
            devs: set[str] = set()
            for ib in host.listdir_optional(SYS_CLASS_IB) or ():
                for net in host.listdir_optional(f"{SYS_CLASS_IB}/{ib}/device/net") or ():
                    if _DEV.match(net):
                        devs.add(net)
            found = tuple(sorted(devs))
        draft.found[_FOUND] = found
        return found

    def _ethtool(self, host: HostReader, what: str, dev: str) -> tuple[Reading, dict[str, str]]:
        """The current fields ethtool sets for `what` (`rx 1024 tx 1024`), and the maximums."""
        show, _, fields = _OPS[what]
        result = host.command(("ethtool", show, dev))
        if not result.found:
            reason = result.reason or "ethtool not found"
            if host.is_live:
                return Absent(f"{reason}: install ethtool to tune NIC {what}"), {}
            return Unreadable(f"ethtool {show} {dev}: {reason}", denied=False), {}
        if result.returncode != 0:
            why = " ".join((result.stderr or result.stdout).split())[:200]
            if "not supported" in why.lower() or "no such device" in why.lower():
                return Absent(f"{dev}: {why or 'not supported'}"), {}
            return Unreadable(f"ethtool {show} {dev}: {why}", denied=False), {}
        maximums, current = parse_ethtool(result.stdout)
        values = [current.get(f, "") for f in fields]
        if not all(v.isdigit() and len(v) <= 6 for v in values):
            return Absent(f"{dev} reports no {what} ({', '.join(values) or 'nothing'})"), maximums
        return " ".join(f"{f} {v}" for f, v in zip(fields, values, strict=True)), maximums

    def plan(self, setting: Setting, state: HostState) -> list[PlanItem]:
        if setting.key == DEVICES_KEY:
            return []  # a scope: the per-device items say what it selected
        what = "rings" if setting.key == RINGS_KEY else "channels"
        devices = state.found.get(_FOUND)
        if not isinstance(devices, tuple) or not devices:
            rule, src = describe(setting.desired), setting.source
            why = "no interface selected (no RDMA device found)"
            return [PlanItem(setting.key, "", rule, None, None, "unsupported", why, src)]
        assert isinstance(setting.desired, Exact)
        items = []
        for dev in devices:
            want = setting
            if setting.desired.text == "max":
                top = state.found.get(f"nic.max.{what}.{dev}")
                fields = _OPS[what][2]
                maxima = [top.get(f, "") if isinstance(top, dict) else "" for f in fields]
                if all(m.isdigit() and len(m) <= 6 for m in maxima):
                    text = " ".join(f"{f} {m}" for f, m in zip(fields, maxima, strict=True))
                    want = Setting(setting.key, Exact(text), setting.source, setting.comment)
                elif isinstance(state.readings.get(item_path(what, dev)), str):
                    why = f"{dev} reports no pre-set maximum {what}"
                    key, path, src = f"{setting.key}:{dev}", item_path(what, dev), setting.source
                    items.append(PlanItem(key, path, "max", None, None, "unsupported", why, src))
                    continue
            else:
                over = _over_maximum(setting.desired.text, state.found.get(f"nic.max.{what}.{dev}"))
                if over is not None:
                    key, path, src = f"{setting.key}:{dev}", item_path(what, dev), setting.source
                    rule = setting.desired.text
                    why = f"{dev} allows at most {over}"
                    items.append(PlanItem(key, path, rule, None, None, "unsupported", why, src))
                    continue
            key = f"{setting.key}:{dev}"
            req = self.requirement(key)
            items.append(value_item(key, item_path(what, dev), want, state, requirement=req))
        return items

    def read_restore(self, host: HostReader, path: str) -> Reading | None:
        m = re.fullmatch(r"ethtool (-g|-l) (" + _NAME + ")", path)
        if m is None:
            return None
        return self._ethtool(host, "rings" if m.group(1) == "-g" else "channels", m.group(2))[0]

    def write(self, host: Host, key: str, path: str, new: str, whole: bool) -> str | None:
        m = _ITEM.match(key)
        words = new.split()
        if m is None or len(words) % 2 or not all(w.isdigit() for w in words[1::2]):
            raise CommandFailed(f"command:ethtool {key}", None, f"not a {key} value: {new!r}")
        what, dev = m.group(1), m.group(2)
        host.run_change(("ethtool", _OPS[what][1], dev, *words), timeout_s=60)
        return None
