"""mcpnode/agent/rtnl.py: the agent's rtnetlink link-message parser.

- Against the kernel: a child in a fresh network namespace (`unshare --net`) captures the raw
  datagrams the kernel sends on RTMGRP_LINK while veth pairs are made, brought up, renamed
  and deleted, plus an RTM_GETLINK dump (several messages per datagram, NLMSG_DONE at the end).
  Each datagram must parse to exactly what pyroute2's marshal, the reference, reads from it.
- Adversarial: every truncation of real datagrams, lengths that lie (0, short, past the end),
  attributes that lie, an interface name without its NUL or longer than IFNAMSIZ, an unknown
  operstate, and seeded random bytes: never an exception, never a loop, at most one message
  per 16 bytes.
- The agent no longer loads pyroute2 at all (the point of the parser: ~25 MB of RSS).
"""

from __future__ import annotations

import json
import random
import struct
import subprocess
import sys

import pytest

from mcpnode.agent.rtnl import (
    IFLA_IFNAME,
    IFLA_OPERSTATE,
    RTM_DELLINK,
    RTM_NEWLINK,
    LinkMessage,
    parse_links,
)
from tests.agent.test_agent_sources import REPO, ip_tool, netns_skip_reason
from tests.support.nschild import run_child

CAPTURE_CHILD = r"""
import json, os, socket, struct, subprocess, sys, time
params = json.loads(sys.argv[1])
ip = params["ip"]
report = {"errors": [], "datagrams": []}
sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_NONBLOCK,
                     socket.NETLINK_ROUTE)
sock.bind((0, 1))  # RTMGRP_LINK

def drain(quiet=0.3, limit=5.0):
    end = time.monotonic() + limit
    last = time.monotonic()
    while time.monotonic() < end and time.monotonic() - last < quiet:
        try:
            report["datagrams"].append(sock.recv(1 << 16).hex())
            last = time.monotonic()
        except BlockingIOError:
            time.sleep(0.01)

try:
    for args in (["link", "add", "vt0", "type", "veth", "peer", "name", "vt1"],
                 ["link", "set", "vt0", "up"],
                 ["link", "set", "vt1", "up"],
                 ["link", "set", "vt1", "name", "renamed1"],
                 ["link", "add", "d0", "type", "veth", "peer", "name", "d1"],
                 ["link", "del", "vt0"]):
        subprocess.run([ip, *args], check=True, capture_output=True)
        drain()
    # RTM_GETLINK dump: NLM_F_REQUEST | NLM_F_DUMP, an ifinfomsg of family AF_UNSPEC
    req = struct.pack("=IHHII", 32, 18, 0x301, 1, 0) + struct.pack("=BxHiII", 0, 0, 0, 0, 0)
    sock.send(req)
    drain()
except Exception as err:
    report["errors"].append(f"{type(err).__name__}: {err}")
print(json.dumps(report))
"""


@pytest.fixture(scope="module")
def datagrams() -> list[bytes]:
    reason = netns_skip_reason()
    if reason:
        pytest.skip(reason)
    report = run_child(["unshare", "--net", "--"], CAPTURE_CHILD, {"ip": ip_tool()})
    return [bytes.fromhex(d) for d in report["datagrams"]]


def _reference(data: bytes) -> list[LinkMessage]:
    """What pyroute2's marshal reads from the same bytes (the reference implementation)."""
    from pyroute2.netlink.rtnl.marshal import MarshalRtnl

    out = []
    for msg in MarshalRtnl().parse(data):
        event = msg.get("event")
        if event not in ("RTM_NEWLINK", "RTM_DELLINK"):
            continue
        out.append(
            LinkMessage(
                "newlink" if event == "RTM_NEWLINK" else "dellink",
                msg["index"],
                msg.get_attr("IFLA_IFNAME"),
                msg.get_attr("IFLA_OPERSTATE"),
            )
        )
    return out


def test_kernel_datagrams_parse_as_pyroute2_reads_them(datagrams: list[bytes]) -> None:
    assert len(datagrams) >= 8
    seen = []
    for data in datagrams:
        got = parse_links(data)
        assert got == _reference(data), data.hex()
        seen.extend(got)
    names = {m.name for m in seen}
    assert {"vt0", "vt1", "renamed1", "d0", "lo"} <= names
    assert ("dellink", "vt0") in {(m.event, m.name) for m in seen}
    assert {m.operstate for m in seen} >= {"DOWN", "LOWERLAYERDOWN", "UP"}
    # the dump: one datagram holding several links (lo, d0, renamed1 at least)
    assert max(len(parse_links(d)) for d in datagrams) >= 3


def test_every_truncation_is_a_prefix_never_an_error(datagrams: list[bytes]) -> None:
    for data in datagrams:
        full = parse_links(data)
        for cut in range(len(data)):
            part = parse_links(data[:cut])
            # whole messages before the cut are read; the cut one is dropped
            assert part == full[: len(part)], (data.hex(), cut)


def _msg(msg_type: int, index: int, attrs: bytes, *, length: int | None = None) -> bytes:
    body = struct.pack("=BxHiII", 0, 1, index, 0, 0) + attrs
    n = 16 + len(body) if length is None else length
    return struct.pack("=IHHII", n, msg_type, 0, 0, 0) + body


def _attr(kind: int, payload: bytes, *, length: int | None = None) -> bytes:
    n = 4 + len(payload) if length is None else length
    raw = struct.pack("=HH", n, kind) + payload
    return raw + b"\0" * (-len(raw) % 4)


def test_hand_made_messages() -> None:
    name = _attr(IFLA_IFNAME, b"eth0\0")
    up = _attr(IFLA_OPERSTATE, bytes([6]))
    two = _msg(RTM_NEWLINK, 2, name + up) + _msg(RTM_DELLINK, 3, _attr(IFLA_IFNAME, b"ib0\0"))
    assert parse_links(two) == [
        LinkMessage("newlink", 2, "eth0", "UP"),
        LinkMessage("dellink", 3, "ib0", None),
    ]
    # an operstate the kernel may add later is named, not mapped to a known state
    assert parse_links(_msg(RTM_NEWLINK, 4, _attr(IFLA_OPERSTATE, bytes([200]))))[0].operstate == (
        "UNKNOWN(200)"
    )
    # a name longer than IFNAMSIZ (16) is not a kernel's: not taken
    assert parse_links(_msg(RTM_NEWLINK, 5, _attr(IFLA_IFNAME, b"x" * 40)))[0].name is None
    # without its NUL the name is still read (bounded by the attribute)
    assert parse_links(_msg(RTM_NEWLINK, 6, _attr(IFLA_IFNAME, b"abc")))[0].name == "abc"


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(_msg(RTM_NEWLINK, 1, b"", length=0), id="nlmsg_len 0"),
        pytest.param(_msg(RTM_NEWLINK, 1, b"", length=8), id="nlmsg_len short"),
        pytest.param(_msg(RTM_NEWLINK, 1, b"", length=1 << 30), id="nlmsg_len past the end"),
        pytest.param(_msg(RTM_NEWLINK, 1, b"", length=20), id="ifinfomsg cut"),
    ],
)
def test_lying_message_lengths_end_the_datagram(data: bytes) -> None:
    assert parse_links(data + _msg(RTM_NEWLINK, 9, b"")) == []


@pytest.mark.parametrize("length", [0, 1, 3, 1000])
def test_lying_attribute_lengths_end_the_attributes(length: int) -> None:
    bad = _attr(IFLA_IFNAME, b"eth0\0", length=length)
    after = _attr(IFLA_OPERSTATE, bytes([6]))
    got = parse_links(_msg(RTM_NEWLINK, 7, bad + after) + _msg(RTM_NEWLINK, 8, after))
    assert got[1] == LinkMessage("newlink", 8, None, "UP")
    assert got[0].ifindex == 7 and got[0].name is None  # the message itself is still framed


def test_random_bytes_never_raise() -> None:
    rng = random.Random(20261201)
    seeds = [_msg(RTM_NEWLINK, 1, _attr(IFLA_IFNAME, b"eth0\0") + _attr(IFLA_OPERSTATE, b"\6"))]
    for _ in range(3000):
        if rng.random() < 0.5:
            data = bytes(rng.getrandbits(8) for _ in range(rng.randrange(0, 200)))
        else:  # a valid message with bytes flipped: reaches the attribute code
            buf = bytearray(seeds[0] * rng.randrange(1, 4))
            for _ in range(rng.randrange(1, 6)):
                buf[rng.randrange(len(buf))] = rng.getrandbits(8)
            data = bytes(buf)
        assert len(parse_links(data)) <= len(data) // 16


def test_the_agent_does_not_load_pyroute2() -> None:
    code = (
        "import sys; import mcpnode.agent.service, mcpnode.agent.sources;"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'pyroute2')))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", "import json;" + code],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(proc.stdout) == []
