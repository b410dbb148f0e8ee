"""Commands Host runs: read-only version and status commands (live, or replayed from a
snapshot), and modprobe. No shell, ever; programs are looked up on PATH plus the sbin
directories. subprocess is imported only when a command really runs."""

from __future__ import annotations

import errno as errno_mod
import os

from mcpnode.errors import CommandFailed, NotSupported
from mcpnode.host.record import HostRecord
from mcpnode.host.types import CommandResult, _opt_int
from mcpnode.host.write import _count_write


def _module_name(name: str) -> bool:
    """A kernel module name as modprobe takes it (module_name() in kmod: [A-Za-z0-9_-], here at
    most 64 of them). String tests, not a regex: `re` is not imported by the commands that
    never load a module (isalnum() of an ASCII character is [A-Za-z0-9])."""
    return 0 < len(name) <= 64 and name.isascii() and all(c.isalnum() or c in "_-" for c in name)


_MODPROBE_TIMEOUT_S = 30


# sbin is not on every PATH (services run with a short one; sudo -E, cron), and modprobe,
# update-grub and grubby live there.
_SBIN_PATH = ":/usr/local/sbin:/usr/sbin:/sbin:/usr/bin:/bin"


def _run(argv: tuple[str, ...], timeout_s: float) -> CommandResult:
    """Run `argv` on this machine: its program looked up on PATH plus the sbin directories, no
    shell, stdin closed, output captured. Never raises: a missing program is `found` False, a
    program that could not be started or ran past `timeout_s` has no returncode and a reason."""
    import shutil
    import subprocess

    exe = shutil.which(argv[0], path=os.environ.get("PATH", "") + _SBIN_PATH)
    if exe is None:
        return CommandResult(argv, False, None, "", "", f"{argv[0]} not found on PATH")
    try:
        proc = subprocess.run(
            [exe, *argv[1:]],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        return CommandResult(argv, True, None, "", "", f"{argv[0]}: {err}")
    return CommandResult(argv, True, proc.returncode, proc.stdout, proc.stderr)


class HostCommands(HostRecord):
    """Commands on the live host, answers replayed on a recorded root."""

    def command(self, argv: tuple[str, ...], timeout_s: float = 10.0) -> CommandResult:
        """Run a read-only version/status command (`nvidia-ctk --version`) on the live host, or
        replay its recorded answer from a snapshot's `commands`. Never raises for a missing
        program or a non-zero exit: those are facts for the caller (the audit).

        Programs are looked up on PATH plus the sbin directories (services run with a short
        PATH); no shell is involved.
        """
        key = " ".join(argv)
        if not self.is_live:
            recorded = self._recorded_commands().get(key)
            if recorded is None:
                return CommandResult(argv, False, None, "", "", "not recorded in this snapshot")
            replayed = CommandResult(
                argv,
                bool(recorded.get("found")),
                _opt_int(recorded.get("returncode")),
                str(recorded.get("stdout") or ""),
                str(recorded.get("stderr") or ""),
                None if recorded.get("reason") is None else str(recorded.get("reason")),
            )
            if self._recording is not None:
                # A snapshot of a snapshot keeps the answers it replayed.
                self._recording.commands[key] = replayed.to_json()
            return replayed
        result = _run(argv, timeout_s)
        if self._recording is not None:
            self._recording.commands[key] = result.to_json()
        return result

    def run_change(self, argv: tuple[str, ...], timeout_s: float = 300.0) -> CommandResult:
        """Run a command that changes the machine (`update-grub`, `grubby --update-kernel`) on
        the live host: no shell, looked up like `command`, counted as a write (the crash-test
        hook stops after it). A recorded root has no machine to change: NotSupported, nothing
        run. Raises CommandFailed when the program is missing, times out or exits non-zero."""
        what = f"command:{argv[0] if argv else ''}"
        if not argv:
            raise CommandFailed(what, errno_mod.EINVAL, "no command")
        if not self.is_live:
            raise NotSupported(what, None, f"`{' '.join(argv)}` needs the live host (--root /)")
        result = _run(argv, timeout_s)
        if not result.found:
            raise CommandFailed(what, errno_mod.ENOENT, result.reason or "not found")
        if result.returncode is None:
            raise CommandFailed(what, None, result.reason or "did not run")
        if result.returncode != 0:
            detail = (result.stderr.strip() or result.stdout.strip())[-400:]
            raise CommandFailed(
                what, None, f"{' '.join(argv)} exited {result.returncode}: {detail}"
            )
        _count_write()
        return result

    def load_module(self, name: str) -> None:
        """`modprobe -q -- NAME` on the live machine (needs CAP_SYS_MODULE).

        A recorded root has no kernel to load into: raises NotSupported there rather than
        touching this machine. Raises CommandFailed when modprobe fails or is missing."""
        if not _module_name(name):
            raise CommandFailed(f"module:{name}", errno_mod.EINVAL, "not a module name")
        if not self.is_live:
            raise NotSupported(
                f"module:{name}", None, "loading a kernel module needs the live host (--root /)"
            )
        result = _run(("modprobe", "-q", "--", name), _MODPROBE_TIMEOUT_S)
        if not result.found:
            raise CommandFailed(f"module:{name}", errno_mod.ENOENT, "modprobe not found")
        if result.returncode is None:
            raise CommandFailed(f"module:{name}", None, result.reason or "modprobe did not run")
        if result.returncode != 0:
            detail = result.stderr.strip() or f"modprobe exited {result.returncode}"
            raise CommandFailed(f"module:{name}", None, detail)
        _count_write()
