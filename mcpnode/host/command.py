"""Commands Host runs: read-only version and status commands (live, or replayed from a
snapshot), and modprobe. No shell, ever; programs are looked up on PATH plus the sbin
directories. subprocess is imported only when a command really runs."""

from __future__ import annotations

import errno as errno_mod
import os
import re

from mcpnode.errors import CommandFailed, NotSupported
from mcpnode.host.record import HostRecord
from mcpnode.host.types import CommandResult, _opt_int
from mcpnode.host.write import _count_write

# Kernel module names as modprobe takes them (module_name() in kmod: [A-Za-z0-9_-]).
_MODULE_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}\Z")
_MODPROBE_TIMEOUT_S = 30


class HostCommands(HostRecord):
    """Commands on the live host, answers replayed on a recorded root."""

    def command(self, argv: tuple[str, ...], timeout_s: float = 10.0) -> CommandResult:
        """Run a read-only version/status command (`nvidia-ctk --version`) on the live host, or
        replay its recorded answer from a snapshot's `commands`. Never raises for a missing
        program or a non-zero exit: those are facts for the caller (the audit).

        Programs are looked up on PATH plus the sbin directories (services run with a short
        PATH); no shell is involved.
        """
        import shutil
        import subprocess

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
        path = os.environ.get("PATH", "") + ":/usr/local/sbin:/usr/sbin:/sbin:/usr/bin:/bin"
        exe = shutil.which(argv[0], path=path)
        if exe is None:
            result = CommandResult(argv, False, None, "", "", f"{argv[0]} not found on PATH")
        else:
            try:
                proc = subprocess.run(
                    [exe, *argv[1:]],
                    capture_output=True,
                    text=True,
                    timeout=timeout_s,
                    check=False,
                    stdin=subprocess.DEVNULL,
                )
                result = CommandResult(argv, True, proc.returncode, proc.stdout, proc.stderr)
            except (OSError, subprocess.TimeoutExpired) as err:
                result = CommandResult(argv, True, None, "", "", f"{argv[0]}: {err}")
        if self._recording is not None:
            self._recording.commands[key] = result.to_json()
        return result

    def run_change(self, argv: tuple[str, ...], timeout_s: float = 300.0) -> CommandResult:
        """Run a command that changes the machine (`update-grub`, `grubby --update-kernel`) on
        the live host: no shell, looked up like `command`, counted as a write (the crash-test
        hook stops after it). A recorded root has no machine to change: NotSupported, nothing
        run. Raises CommandFailed when the program is missing, times out or exits non-zero."""
        import shutil
        import subprocess

        what = f"command:{argv[0] if argv else ''}"
        if not argv:
            raise CommandFailed(what, errno_mod.EINVAL, "no command")
        if not self.is_live:
            raise NotSupported(what, None, f"`{' '.join(argv)}` needs the live host (--root /)")
        path = os.environ.get("PATH", "") + ":/usr/local/sbin:/usr/sbin:/sbin:/usr/bin:/bin"
        exe = shutil.which(argv[0], path=path)
        if exe is None:
            raise CommandFailed(what, errno_mod.ENOENT, f"{argv[0]} not found on PATH")
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
            raise CommandFailed(what, None, f"{argv[0]}: {err}") from err
        if proc.returncode != 0:
            detail = (proc.stderr.strip() or proc.stdout.strip())[-400:]
            raise CommandFailed(what, None, f"{' '.join(argv)} exited {proc.returncode}: {detail}")
        _count_write()
        return CommandResult(argv, True, proc.returncode, proc.stdout, proc.stderr)

    def load_module(self, name: str) -> None:
        """`modprobe -q -- NAME` on the live machine (needs CAP_SYS_MODULE).

        A recorded root has no kernel to load into: raises NotSupported there rather than
        touching this machine. Raises CommandFailed when modprobe fails or is missing."""
        import shutil
        import subprocess

        if not _MODULE_NAME.match(name):
            raise CommandFailed(f"module:{name}", errno_mod.EINVAL, "not a module name")
        if not self.is_live:
            raise NotSupported(
                f"module:{name}", None, "loading a kernel module needs the live host (--root /)"
            )
        # sbin is not on every PATH (sudo -E, cron), and modprobe lives there.
        modprobe = shutil.which("modprobe", path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
        if modprobe is None:
            raise CommandFailed(f"module:{name}", errno_mod.ENOENT, "modprobe not found")
        try:
            proc = subprocess.run(
                [modprobe, "-q", "--", name],
                capture_output=True,
                text=True,
                timeout=_MODPROBE_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as err:
            raise CommandFailed(f"module:{name}", None, f"modprobe: {err}") from err
        if proc.returncode != 0:
            detail = proc.stderr.strip() or f"modprobe exited {proc.returncode}"
            raise CommandFailed(f"module:{name}", None, detail)
        _count_write()
