"""`mcpnode agent --root /` on a real GPU host for a few seconds, as systemd would run it
(a NOTIFY_SOCKET listener, WATCHDOG_USEC), with live NVML: READY, a metrics scrape, a drift
restored, SIGHUP, SIGTERM with rollback. Prints one JSON report. The host is changed only for
the run: `rollback = "on-stop"` restores every original (a throwaway device machine).

    python3 -m tests.device.agent_smoke [OUTDIR]
"""

from __future__ import annotations

import json
import signal
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from tests.support.agentproc import AgentProc

CONFIG = """
[tuning]
profile = "base"
rollback = "on-stop"
[drift]
interval = 0.5
[metrics]
listen = "127.0.0.1:0"
[autopin]
enabled = true
interval = 1
[[autopin.rule]]
name = "smoke-worker"
cmdline = "mcpnode-gpu-worker"
"""

# A real GPU process without CUDA's toolkit: the driver's libcuda, one context on GPU 0. NVML
# then lists it among the compute processes, and the agent's rule must pin it.
WORKER = r"""
import ctypes, sys, threading, time
cuda = ctypes.CDLL("libcuda.so.1")
dev, ctx = ctypes.c_int(), ctypes.c_void_p()
rc = cuda.cuInit(0) or cuda.cuDeviceGet(ctypes.byref(dev), 0) or cuda.cuCtxCreate_v2(
    ctypes.byref(ctx), 0, dev)
print("ready" if rc == 0 else f"cuda error {rc}", flush=True)
threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
time.sleep(60)
"""


def main() -> int:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp())
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="mcpnode-agent-smoke-"))
    (work / "mcpnode.toml").write_text(CONFIG)
    report: dict[str, object] = {}
    import os
    import subprocess

    worker = subprocess.Popen(
        [sys.executable, "-c", WORKER, "mcpnode-gpu-worker"], stdout=subprocess.PIPE, text=True
    )
    assert worker.stdout is not None
    report["worker"] = worker.stdout.readline().strip() or f"exited {worker.wait()}"
    agent = AgentProc(["--root", "/", "--config", str(work / "mcpnode.toml")], work)
    swappiness = Path("/proc/sys/vm/swappiness")
    try:
        t, ready = agent.wait_message("READY=1", timeout=120)
        report["ready_s"] = round(t, 3)
        report["ready"] = ready
        port = int(agent.wait_event("metrics.listening")["address"].rsplit(":", 1)[1])
        report["swappiness_applied"] = swappiness.read_text().strip()
        t = agent.now()
        swappiness.write_text("61\n")
        report["remediated"] = agent.wait_event("drift.remediated", t, key="vm.swappiness")
        if report["worker"] == "ready":
            report["pin"] = agent.wait_event("pin", pid=worker.pid)
            report["worker_affinity"] = {
                tid: sorted(os.sched_getaffinity(int(tid)))
                for tid in os.listdir(f"/proc/{worker.pid}/task")
            }
        time.sleep(2)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            (out / "agent-metrics.txt").write_bytes(r.read())
        t = agent.now()
        agent.signal(signal.SIGHUP)
        report["reloaded"] = agent.wait_event("config.reloaded", t)
        time.sleep(1)
        report["rc"] = agent.stop()
        report["swappiness_final"] = swappiness.read_text().strip()
    except AssertionError as err:
        report["error"] = str(err)
    finally:
        agent.close()
        worker.kill()
        worker.wait()
        report["messages"] = agent.messages
        (out / "agent-log.jsonl").write_text("".join(agent.raw_stderr))
    print(json.dumps(report, indent=1, default=str))
    return 0 if "error" not in report and report.get("rc") == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
