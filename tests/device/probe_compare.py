"""A live `mcpnode probe` against its replay; run by tests/device/check.sh on a GPU host.

    python3 -m tests.device.probe_compare root LIVE_JSON SNAPSHOT DEST
    python3 -m tests.device.probe_compare compare LIVE_JSON REPLAY_JSON

`root`: write DEST/replay.tar.gz, the members of SNAPSHOT (a `mcpnode snapshot` of the same
host) with the raw run of LIVE_JSON (`mcpnode probe --format json` carries it under `run`)
added at its top as `mcpnode-probe.json`, and print its path: the root `mcpnode probe --root`
replays (a tarball root is read in place). `compare`: the two reports must be equal except
`source` (the live one says "measured now", the replay the file); every differing field is
printed, then the measured figures per GPU and node, so the device log holds them.

Exit status: 0 equal, 1 something differs, 2 an input could not be read.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mcpnode.probe.model import dumps, parse_run
from mcpnode.probe.record import SNAPSHOT_PROBE_NAME

IGNORED = ("source",)


def differences(live: Any, replay: Any, path: str = "$") -> Iterator[str]:
    """Paths where the two JSON values differ, `source` at the top left out."""
    if isinstance(live, dict) and isinstance(replay, dict):
        for key in sorted(live.keys() | replay.keys()):
            if path == "$" and key in IGNORED:
                continue
            if key not in live or key not in replay:
                yield f"{path}.{key}: only in {'live' if key in live else 'replay'}"
            else:
                yield from differences(live[key], replay[key], f"{path}.{key}")
    elif isinstance(live, list) and isinstance(replay, list):
        if len(live) != len(replay):
            yield f"{path}: {len(live)} items live, {len(replay)} replayed"
        for i, (a, b) in enumerate(zip(live, replay, strict=False)):
            yield from differences(a, b, f"{path}[{i}]")
    elif live != replay:
        yield f"{path}: live {live!r} | replay {replay!r}"


def figures(report: dict[str, Any]) -> list[str]:
    """One line per GPU and node: medians and their ratio to the promise, latencies."""
    out = []
    for g in report["gpus"]:
        exp = g["expected"]
        promise = f"Gen{exp['gen']} x{exp['width']} {exp['gbps']} GB/s" if exp else "unknown"
        out.append(
            f"GPU {g['index']} {g['address']} {g['name']}: promised {promise}; placement node"
            f" {g['placed_node']}, fastest {g['fastest_node']}; under load {g['link_under_load']}"
        )
        for n in g["nodes"]:
            parts = []
            for d in ("h2d", "d2h"):
                f = n[d]
                parts.append(
                    f"{d} {f['median_gbps']} GB/s (ratio {f['ratio']}, spread {f['spread']},"
                    f" {f['latency_us']} us)"
                    if f["error"] is None
                    else f"{d} not measured: {f['error']}"
                )
            out.append(f"  node {n['node']}: " + "; ".join(parts))
    for p in report["peers"]:
        out.append(
            f"GPU{p['src']}->GPU{p['dst']} {p['link']}: {p['median_gbps']} of"
            f" {p['expected_gbps']} GB/s (ratio {p['ratio']})"
            + ("" if p["can_access"] else " no peer access")
        )
    return out


def make_root(live: dict[str, Any], snapshot: Path, dest: Path) -> Path:
    """DEST/replay.tar.gz: SNAPSHOT's members, any probe run it held replaced by LIVE's, which
    lands beside the snapshot's `mcpnode-snapshot.json`."""
    dest.mkdir(parents=True, exist_ok=True)
    body = dumps(parse_run(json.dumps(live["run"]), "live report's run")).encode()
    out = dest / "replay.tar.gz"
    top = None
    with tarfile.open(snapshot) as src, tarfile.open(out, "w:gz") as dst:
        for member in src:
            if member.name.rsplit("/", 1)[-1] == "mcpnode-snapshot.json":
                top = member.name.rpartition("/")[0]
            if member.name.rsplit("/", 1)[-1] == SNAPSHOT_PROBE_NAME:
                continue
            dst.addfile(member, src.extractfile(member) if member.isfile() else None)
        if top is None:
            raise ValueError(f"{snapshot}: no mcpnode-snapshot.json: not a mcpnode snapshot")
        info = tarfile.TarInfo(f"{top}/{SNAPSHOT_PROBE_NAME}" if top else SNAPSHOT_PROBE_NAME)
        info.size = len(body)
        dst.addfile(info, io.BytesIO(body))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m tests.device.probe_compare")
    sub = parser.add_subparsers(dest="what", required=True)
    root = sub.add_parser("root", help="a replay root from a snapshot and a live report")
    root.add_argument("live", type=Path)
    root.add_argument("snapshot", type=Path)
    root.add_argument("dest", type=Path)
    cmp = sub.add_parser("compare", help="live report vs replayed report")
    cmp.add_argument("live", type=Path)
    cmp.add_argument("replay", type=Path)
    args = parser.parse_args(argv)
    try:
        live = json.loads(args.live.read_text())
        if args.what == "root":
            print(make_root(live, args.snapshot, args.dest))
            return 0
        replay = json.loads(args.replay.read_text())
        diffs = list(differences(live, replay))
        lines = figures(live)
    except (OSError, ValueError, KeyError, TypeError) as err:
        print(f"probe_compare {args.what}: cannot read the inputs: {type(err).__name__}: {err}")
        return 2
    for d in diffs:
        print(f"DIFF {d}")
    print("\n".join(lines))
    print(f"probe: live report and replay: {len(diffs)} difference(s)")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
