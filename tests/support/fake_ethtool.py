"""A stand-in for `ethtool -g/-G/-l/-L`, put first on PATH by tests/tuning/test_nic_queues.py
and tests/agent/test_agent_nic_drift.py: NICs in a JSON state file ($FAKE_ETHTOOL_STATE), every
call appended to it under a lock, output and errors as ethtool 6.x prints them over netlink.
Standard library only.

State: {"nics": {DEV: {"rings": {"max": {"rx": 8192, "tx": 8192}, "cur": {...}} | absent,
                       "channels": {"max": {"combined": 63}, "cur": {"combined": 32}}}},
        "calls": [[argv...], ...]}"""

from __future__ import annotations

import fcntl
import json
import os
import sys
from typing import Any

TITLES = {"rings": "Ring parameters", "channels": "Channel parameters"}
FIELDS = {
    "rings": ("RX", "RX Mini", "RX Jumbo", "TX"),
    "channels": ("RX", "TX", "Other", "Combined"),
}
OPS = {
    "-g": ("rings", False),
    "-G": ("rings", True),
    "-l": ("channels", False),
    "-L": ("channels", True),
}


def main() -> int:
    # Read, change and rewrite the state under an exclusive lock: the agent's drift reads and
    # another party's `-G` may run at the same time, and neither may lose the other's update.
    with open(os.environ["FAKE_ETHTOOL_STATE"], "r+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        state = json.load(f)
        state["calls"].append(sys.argv[1:])
        try:
            return run(state, sys.argv[1:])
        finally:
            f.seek(0)
            f.truncate()
            json.dump(state, f)


def run(state: dict[str, Any], args: list[str]) -> int:
    what, change = OPS[args[0]]
    nic = state["nics"].get(args[1])
    if nic is None:
        print("netlink error: no device matches name (offset 24)", file=sys.stderr)
        print("netlink error: No such device", file=sys.stderr)
        return 1
    params = nic.get(what)
    if params is None:
        print("netlink error: Operation not supported", file=sys.stderr)
        return 1
    if change:
        new = dict(zip(args[2::2], (int(v) for v in args[3::2]), strict=True))
        if any(v > params["max"].get(k, 0) for k, v in new.items()):
            print("netlink error: Invalid argument", file=sys.stderr)
            return 1
        params["cur"].update(new)
        return 0
    print(f"{TITLES[what]} for {args[1]}:")
    for title, values in (
        ("Pre-set maximums:", params["max"]),
        ("Current hardware settings:", params["cur"]),
    ):
        print(title)
        for field in FIELDS[what]:
            print(f"{field}:\t\t{values.get(field.lower(), 'n/a')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
