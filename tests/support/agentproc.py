"""`mcpnode agent` as a real subprocess, watched the way systemd watches it.

- a `NOTIFY_SOCKET` datagram listener (a path, or `@abstract`) collecting every sd_notify
  message with its arrival time;
- the agent's stderr (structlog JSON lines, since stderr is not a TTY) read by a thread into
  a list of events;
- an injection pipe (`--inject-fd`) for device events the test makes up;
- waits with deadlines, never sleeps-and-hopes.

Also importable from a child script under `unshare` (only stdlib imports at module level).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


class AgentProc:
    def __init__(
        self,
        args: Sequence[str],
        workdir: Path,
        *,
        abstract: bool = False,
        watchdog_usec: int | None = 2_000_000,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        self.t0 = time.monotonic()
        self.messages: list[tuple[float, str]] = []
        self.events: list[dict[str, Any]] = []
        self.raw_stderr: list[str] = []
        self._lock = threading.Lock()
        self.notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        if abstract:
            name = f"mcpnode-test-{os.getpid()}-{id(self)}"
            self.notify.bind("\0" + name)
            address = "@" + name
        else:
            path = workdir / "notify.sock"
            path.unlink(missing_ok=True)
            self.notify.bind(str(path))
            address = str(path)
        self.notify.settimeout(0.05)
        env = dict(os.environ)
        env.pop("JOURNAL_STREAM", None)
        env["NOTIFY_SOCKET"] = address
        env["PYTHONUNBUFFERED"] = "1"
        env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
        if watchdog_usec is not None:
            env["WATCHDOG_USEC"] = str(watchdog_usec)
        env.update(extra_env or {})
        read_fd, self.inject_fd = os.pipe()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mcpnode", "agent", "--inject-fd", str(read_fd), *args],
            cwd=REPO,
            env=env,
            pass_fds=(read_fd,),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        os.close(read_fd)
        self._reader = threading.Thread(target=self._read_stderr, daemon=True)
        self._reader.start()
        self._notify_reader = threading.Thread(target=self._read_notify, daemon=True)
        self._notify_reader.start()

    # -- collection (threads) -------------------------------------------------------------------

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            with self._lock:
                self.raw_stderr.append(line)
                try:
                    doc = json.loads(line)
                except ValueError:
                    continue
                if isinstance(doc, dict):
                    doc["_t"] = time.monotonic() - self.t0
                    self.events.append(doc)

    def _read_notify(self) -> None:
        while True:
            try:
                data = self.notify.recv(65536)
            except TimeoutError:
                if self.proc.poll() is not None:
                    # drain what is left, then stop
                    try:
                        while True:
                            data = self.notify.recv(65536)
                            self._add_message(data)
                    except OSError:
                        return
                continue
            except OSError:
                return
            self._add_message(data)

    def _add_message(self, data: bytes) -> None:
        with self._lock:
            self.messages.append((time.monotonic() - self.t0, data.decode()))

    # -- waiting --------------------------------------------------------------------------------

    def wait_for(self, what: str, pred: Callable[[], Any], timeout: float = 20.0) -> Any:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            with self._lock:
                got = pred()
            if got:
                return got
            if self.proc.poll() is not None:
                with self._lock:
                    got = pred()
                if got:
                    return got
                raise AssertionError(
                    f"agent exited ({self.proc.returncode}) while waiting for {what}:\n"
                    + self.stderr_tail()
                )
            time.sleep(0.01)
        raise AssertionError(f"timed out waiting for {what}:\n" + self.stderr_tail())

    def event(self, name: str, after: float = 0.0, **fields: Any) -> dict[str, Any] | None:
        for e in self.events:
            if (
                e.get("event") == name
                and e["_t"] >= after
                and all(e.get(k) == v for k, v in fields.items())
            ):
                return e
        return None

    def wait_event(
        self, name: str, after: float = 0.0, timeout: float = 20.0, **fields: Any
    ) -> dict[str, Any]:
        result: dict[str, Any] = self.wait_for(
            f"event {name} {fields}", lambda: self.event(name, after, **fields), timeout
        )
        return result

    def message(self, field: str, after: float = 0.0) -> tuple[float, str] | None:
        for t, m in self.messages:
            if t >= after and field in m.split("\n"):
                return t, m
        return None

    def wait_message(
        self, field: str, after: float = 0.0, timeout: float = 20.0
    ) -> tuple[float, str]:
        result: tuple[float, str] = self.wait_for(
            f"notify {field}", lambda: self.message(field, after), timeout
        )
        return result

    def now(self) -> float:
        return time.monotonic() - self.t0

    def stderr_tail(self, n: int = 40) -> str:
        with self._lock:
            return "".join(self.raw_stderr[-n:])

    # -- control --------------------------------------------------------------------------------

    def inject(self, **event: str) -> None:
        os.write(self.inject_fd, (json.dumps(event) + "\n").encode())

    def signal(self, signum: int) -> None:
        self.proc.send_signal(signum)

    def stop(self, timeout: float = 20.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        self._reader.join(5)
        self._notify_reader.join(5)
        return rc

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        with contextlib.suppress(OSError):  # closed already
            os.close(self.inject_fd)
        self.notify.close()
