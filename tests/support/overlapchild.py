"""The forced-overlap trials of tests/tuning/test_tuning_overlap.py, run as the child of
`unshare --net --mount`: two mcpnode writers made to overlap at chosen points, on the real
kernel's per-netns `net.*` keys, then a rollback that must restore exactly what the namespace
had before the first of them ran.

Each trial:
1. gives every key a random value (the "originals" of that trial); half the trials first apply
   one of the profiles without interference, so the overlap meets a journal that exists;
2. starts writer A (a fork of this process running mcpnode's `main()`, as `mcpnode` would) and
   stops it at a chosen point: SIGSTOP right after its N-th write
   (MCPNODE_FAULT_STOP_AFTER_WRITES, N random), or a pause between its journal load and its
   first read of the host (MCPNODE_FAULT_PAUSE_AFTER_LOAD);
3. while A is stopped, runs writer B: with a short --wait it gives up (exit 75, the lock is
   held); with a long one it waits, and A is resumed after a random delay;
4. runs `mcpnode rollback` and compares every key with step 1's values, and checks that no
   journal is left.

Writers are `apply --profile pa|pb [--persist]` and `rollback`. Prints one JSON report.
Standard library plus mcpnode; the parent checks the namespace is really private first.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import time
from pathlib import Path
from typing import Any

params: dict[str, Any] = json.loads(sys.argv[1])
sys.path.insert(0, params["repo"])

# Imported here, once, so that each forked writer does not import them again.
import mcpnode.cli.render_tuning  # noqa: E402
import mcpnode.logs  # noqa: E402
import mcpnode.tuning.apply  # noqa: E402, F401
from mcpnode.cli.main import main  # noqa: E402
from tests.support.nschild import private_tmpfs, set_sysctl, sysctl  # noqa: E402

KEYS: list[str] = params["keys"]
JOURNAL = Path(params["journal"])
PROFILES: str = params["profiles"]
LOCKED = 75


def random_values(rng: random.Random) -> dict[str, str]:
    low = rng.randrange(20000, 30000)
    return {
        "net.core.somaxconn": str(rng.randrange(128, 4096)),
        "net.ipv4.tcp_notsent_lowat": str(rng.randrange(16384, 1 << 20)),
        "net.ipv4.ip_local_port_range": f"{low} {rng.randrange(low + 2, 61000)}",
        "net.ipv4.tcp_fin_timeout": str(rng.randrange(5, 120)),
        "net.ipv4.tcp_keepalive_time": str(rng.randrange(60, 9000)),
    }


def values() -> dict[str, str]:
    return {k: sysctl(k) for k in KEYS}


def fork(argv: list[str], env: dict[str, str]) -> int:
    """`mcpnode ARGV` in a forked child with `env` added; its pid."""
    pid = os.fork()
    if pid:
        return pid
    code = 70
    try:
        os.environ.update(env)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        try:
            main(argv)
            code = 0
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 1
    finally:
        os._exit(code)


def wait(pid: int) -> int:
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def run(argv: list[str]) -> int:
    return wait(fork(argv, {}))


def writer(rng: random.Random) -> list[str]:
    choice = rng.choice(["pa", "pb", "pa-persist", "rollback"])
    if choice == "rollback":
        return ["rollback"]
    name = choice.removesuffix("-persist")
    argv = ["apply", "--profile", name, "--root", "/", "--profiles-dir", PROFILES]
    return [*argv, "--persist"] if choice.endswith("persist") else argv


def trial(rng: random.Random, index: int) -> dict[str, Any]:
    originals = random_values(rng)
    for key, value in originals.items():
        set_sysctl(key, value)
    before = values()
    pre = None
    if rng.random() < 0.5:
        pre = writer(rng)
        run(pre)
    a, b = writer(rng), writer(rng)
    mode = rng.choice(["stop", "pause"])
    wait_b = rng.choice(["0.05", "5"])
    events: list[str] = []
    if mode == "stop":
        point = rng.randrange(1, 4)
        pid_a = fork(a, {"MCPNODE_FAULT_STOP_AFTER_WRITES": str(point)})
        _, status = os.waitpid(pid_a, os.WUNTRACED)
        stopped = os.WIFSTOPPED(status)
        events.append(f"A stopped after write {point}" if stopped else "A ended first")
        rc_a = None if stopped else os.waitstatus_to_exitcode(status)
        pid_b = fork([*b, "--wait", wait_b], {})
        if stopped:
            time.sleep(rng.uniform(0.0, 0.08))
            os.kill(pid_a, signal.SIGCONT)
            rc_a = wait(pid_a)
        rc_b = wait(pid_b)
    else:
        pause = rng.uniform(0.05, 0.2)
        point = None
        pid_a = fork(a, {"MCPNODE_FAULT_PAUSE_AFTER_LOAD": f"{pause:.3f}"})
        time.sleep(rng.uniform(0.01, pause / 2))
        pid_b = fork([*b, "--wait", wait_b], {})
        rc_a, rc_b = wait(pid_a), wait(pid_b)
    rc_rollback = run(["rollback", "--wait", "10"])
    after = values()
    ok = after == before and not JOURNAL.exists() and rc_rollback == 0
    ok = ok and rc_a in (0, LOCKED) and rc_b in (0, LOCKED)
    return {
        "trial": index,
        "ok": ok,
        "pre": pre,
        "a": a,
        "b": b,
        "mode": mode,
        "point": point,
        "wait_b": wait_b,
        "rc": [rc_a, rc_b, rc_rollback],
        "locked": rc_b == LOCKED,
        "events": events,
        "before": before,
        "after": after,
        "journal_left": JOURNAL.exists(),
    }


def main_loop() -> dict[str, Any]:
    report: dict[str, Any] = {"trials": [], "errors": []}
    try:
        private_tmpfs(params["tmpfs_required"], params["tmpfs_optional"])
        rng = random.Random(params["seed"])
        started = time.monotonic()
        for i in range(params["trials"]):
            report["trials"].append(trial(rng, i))
        report["seconds"] = round(time.monotonic() - started, 1)
    except Exception as err:  # reported to the parent, which fails the test with it
        report["errors"].append(f"{type(err).__name__}: {err}")
    return report


if __name__ == "__main__":
    print(json.dumps(main_loop()))
