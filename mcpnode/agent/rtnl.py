"""The two facts the agent takes from an rtnetlink link message: the interface's name and its
operational state. A bounded parser of `struct nlmsghdr` + `struct ifinfomsg` + route
attributes, nothing more.

Why not pyroute2's marshal (which the agent used before): importing any part of pyroute2 runs
its package `__init__`, which loads ~160 modules (asyncio, sqlite3, its NDB, every netlink
family) and costs ~25 MB of resident memory in a process whose whole budget is 35 MB; the agent
reads two attributes of two message types. pyroute2 stays the oracle in the tests
(tests/agent/test_agent_rtnl.py): the kernel's real messages, captured in a fresh network namespace,
must parse to what pyroute2 reads from them.

Layouts (include/uapi/linux/netlink.h, rtnetlink.h, if_link.h; stable ABI since Linux 2.2):

    nlmsghdr   u32 len, u16 type, u16 flags, u32 seq, u32 pid          16 bytes
    ifinfomsg  u8 family, u8 pad, u16 type, i32 index, u32 flags, u32 change   16 bytes
    rtattr     u16 len (header included), u16 type, payload, padded to 4 bytes

Every length is checked against what is left of the buffer before it is used: a short or
lying message ends the parse of that datagram (the kernel never sends one; a bug or a hostile
sender must not crash the agent or make it loop), and the count of messages per datagram is
bounded by the datagram's size.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

RTM_NEWLINK = 16
RTM_DELLINK = 17
NLMSG_NOOP, NLMSG_ERROR, NLMSG_DONE = 1, 2, 3
IFLA_IFNAME = 3
IFLA_OPERSTATE = 16
# RFC 2863 operational states, in the kernel's order (IF_OPER_* in include/uapi/linux/if.h);
# the names are pyroute2's and `ip link`'s.
OPERSTATES = ("UNKNOWN", "NOTPRESENT", "DOWN", "LOWERLAYERDOWN", "TESTING", "DORMANT", "UP")

_NLMSGHDR = struct.Struct("=IHHII")
_IFINFOMSG = struct.Struct("=BxHiII")
_RTATTR = struct.Struct("=HH")
_IFNAMSIZ = 16  # include/uapi/linux/if.h: a name is at most 15 bytes and its NUL


class LinkMessage(NamedTuple):
    event: str  # "newlink" | "dellink"
    ifindex: int
    name: str | None  # IFLA_IFNAME; None when absent or malformed
    operstate: str | None  # IFLA_OPERSTATE by name (an unknown code as "UNKNOWN(n)")


def _align(n: int) -> int:
    return (n + 3) & ~3


def _attrs(data: bytes, start: int, end: int) -> tuple[str | None, str | None]:
    name: str | None = None
    state: str | None = None
    pos = start
    while pos + _RTATTR.size <= end:
        rta_len, rta_type = _RTATTR.unpack_from(data, pos)
        if rta_len < _RTATTR.size or pos + rta_len > end:
            break  # malformed: stop reading this message's attributes
        payload = data[pos + _RTATTR.size : pos + rta_len]
        kind = rta_type & 0x3FFF  # NLA_F_NESTED / NLA_F_NET_BYTEORDER are flags, not the type
        if kind == IFLA_IFNAME and len(payload) <= _IFNAMSIZ:
            raw = payload.split(b"\0", 1)[0]
            name = raw.decode("ascii", "backslashreplace") or None
        elif kind == IFLA_OPERSTATE and len(payload) >= 1:
            code = payload[0]
            state = OPERSTATES[code] if code < len(OPERSTATES) else f"UNKNOWN({code})"
        pos += _align(rta_len)
    return name, state


def parse_links(data: bytes) -> list[LinkMessage]:
    """The RTM_NEWLINK / RTM_DELLINK messages of one datagram, in order; other messages
    (errors, done, other families) are passed over."""
    out: list[LinkMessage] = []
    pos, size = 0, len(data)
    while pos + _NLMSGHDR.size <= size:
        msg_len, msg_type, _flags, _seq, _pid = _NLMSGHDR.unpack_from(data, pos)
        if msg_len < _NLMSGHDR.size or pos + msg_len > size:
            break  # a length that lies: nothing after it can be framed
        end = pos + msg_len
        body = pos + _NLMSGHDR.size
        if msg_type in (RTM_NEWLINK, RTM_DELLINK) and body + _IFINFOMSG.size <= end:
            _family, _type, index, _ifflags, _change = _IFINFOMSG.unpack_from(data, body)
            name, state = _attrs(data, body + _IFINFOMSG.size, end)
            event = "newlink" if msg_type == RTM_NEWLINK else "dellink"
            out.append(LinkMessage(event, index, name, state))
        elif msg_type == NLMSG_DONE:
            break
        pos += _align(msg_len)
    return out
