"""Real child processes for the pin tests (test_pin.py, test_agent_autopin.py): a Python
process with two extra threads parked on an Event, which prints "ready" once they run and
exits when its stdin closes. `--narrow CPU` narrows its affinity to CPU first, as a user's
taskset would (the threads inherit it). Other arguments only mark its command line."""

from __future__ import annotations

import os
import subprocess
import sys

CHILD = """
import os, sys, threading
if "--narrow" in sys.argv:
    os.sched_setaffinity(0, {int(sys.argv[sys.argv.index("--narrow") + 1])})
stop = threading.Event()
threads = [threading.Thread(target=stop.wait) for _ in range(2)]
for t in threads:
    t.start()
print("ready", flush=True)
sys.stdin.read()
stop.set()
"""


def start_child(*args: str) -> subprocess.Popen[str]:
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    assert child.stdout.readline() == "ready\n"
    return child


def stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        assert proc.stdin is not None
        proc.stdin.close()
    proc.wait(timeout=10)


def affinities(pid: int) -> dict[int, set[int]]:
    """Every thread's CPU affinity."""
    tids = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))
    return {tid: set(os.sched_getaffinity(tid)) for tid in tids}
