"""Run `mcpnode apply` on an interrupt root where some affinity files answer EIO on write, as
the kernel does for managed interrupts. Run as the child of `unshare --mount`, so the bind
mounts stay in this throwaway mount namespace. Standard library only.

argv: ROOT PROFILE IRQ [IRQ...]. The apply is started with MCPNODE_FAULT_STOP_AFTER_WRITES=1:
it stops itself right after its first write (the journal, saved before any interrupt is
touched), by which time it has read every affinity file. Then each named interrupt's
`smp_affinity_list` gets `/proc/<apply pid>/mem` bind-mounted over it: a real kernel file whose
write(2) at offset 0 fails with EIO (the page at address 0 is never mapped). The apply is
continued, its result printed as JSON, and the mounts are undone."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time


def state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rpartition(")")[2].split()[0]


def main() -> None:
    root, profile, *irqs = sys.argv[1:]
    subprocess.run(["mount", "--make-rprivate", "/"], check=True)
    env = {**os.environ, "MCPNODE_FAULT_STOP_AFTER_WRITES": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "mcpnode", "apply", "--profile", profile, "--root", root,
         "--format", "json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while state(proc.pid) != "T":
        if proc.poll() is not None or time.monotonic() > deadline:
            out, err = proc.communicate()
            print(json.dumps({"error": "apply did not stop", "stdout": out, "stderr": err}))
            return
        time.sleep(0.01)
    targets = [f"{root}/proc/irq/{n}/smp_affinity_list" for n in irqs]
    for target in targets:
        subprocess.run(["mount", "--bind", f"/proc/{proc.pid}/mem", target], check=True)
    os.kill(proc.pid, signal.SIGCONT)
    out, err = proc.communicate(timeout=120)
    for target in targets:
        subprocess.run(["umount", target], check=True)
    print(json.dumps({"returncode": proc.returncode, "stdout": out, "stderr": err}))


if __name__ == "__main__":
    main()
