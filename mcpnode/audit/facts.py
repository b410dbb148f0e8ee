"""Reading helpers for collectors: every read outcome is a fact (a Reading: text, absent, or
unreadable with the reason), so a collector never raises for a missing or unreadable file and
a check can say SKIP ("needs root") instead of FAIL. Evidence helpers build the `Evidence` rows
checks attach.
"""

from __future__ import annotations

from dataclasses import dataclass

from mcpnode.audit.model import Evidence, Finding, Status
from mcpnode.codec.reading import Absent, Reading, Unreadable
from mcpnode.errors import AccessDenied, HostError
from mcpnode.host import CommandResult, HostReader


@dataclass(frozen=True)
class FileRead:
    """One file as a collector read it: its logical path (`/etc/docker/daemon.json`) and the
    Reading (codec/reading.py): the text, Absent (ENOENT, ENODEV, EINVAL), or Unreadable
    (`denied` for EACCES/EPERM; the reason is the HostError's detail)."""

    path: str
    reading: Reading

    @property
    def text(self) -> str | None:
        return self.reading if isinstance(self.reading, str) else None

    @property
    def denied(self) -> bool:
        return isinstance(self.reading, Unreadable) and self.reading.denied

    @property
    def error(self) -> str | None:
        """The detail of a failed read (denied or other), None when it was read or absent."""
        return self.reading.reason if isinstance(self.reading, Unreadable) else None

    @property
    def missing(self) -> bool:
        return isinstance(self.reading, Absent)

    @property
    def ok(self) -> bool:
        return isinstance(self.reading, str)


def read_file(host: HostReader, path: str, limit: int | None = None) -> FileRead:
    """Read `path` through Host (at most `limit` bytes, default Host's), never raising:
    absence, EACCES, a file over the limit and other errors are facts."""
    try:
        text = host.read_optional(path, limit)
    except AccessDenied as err:
        return FileRead(path, Unreadable(err.detail, denied=True))
    except HostError as err:
        return FileRead(path, Unreadable(err.detail, denied=False))
    return FileRead(path, Absent(f"no {path}") if text is None else text)


def list_dir(host: HostReader, path: str) -> tuple[str, ...] | None:
    """Names in a directory (sorted), or None when it is absent or unreadable."""
    try:
        names = host.listdir_optional(path)
    except HostError:
        return None
    return None if names is None else tuple(names)


def file_evidence(read: FileRead, value: str | None = None) -> Evidence:
    """Evidence for a file: the value given, else what the read found (first line, clipped)."""
    if value is not None:
        return Evidence(read.path, value)
    if read.text is not None:
        return Evidence(
            read.path, clip(read.text.strip().splitlines()[0] if read.text.strip() else "")
        )
    if read.denied:
        return Evidence(read.path, f"unreadable: {read.error or 'permission denied'}")
    if read.error is not None:
        return Evidence(read.path, f"unreadable: {read.error}")
    return Evidence(read.path, "absent")


def command_evidence(result: CommandResult, value: str | None = None) -> Evidence:
    """Evidence for a command: the argv as the source; the value given, else its output."""
    source = " ".join(result.argv)
    if value is not None:
        return Evidence(source, value)
    if not result.found:
        return Evidence(source, f"not found ({result.reason})" if result.reason else "not found")
    out = (result.stdout.strip() or result.stderr.strip()).splitlines()
    first = out[0] if out else ""
    if result.returncode not in (0, None):
        return Evidence(source, clip(f"exit {result.returncode}: {first}"))
    if result.returncode is None:
        return Evidence(source, clip(result.reason or "did not complete"))
    return Evidence(source, clip(first))


def clip(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def unreadable_finding(
    finding_id: str, read: FileRead, is_root: bool, what: str, subject: str | None = None
) -> Finding:
    """The finding for a file that exists but could not be read. Without root that is a SKIP
    naming the reason (not a fault of the host); as root it is a WARN: something (an LSM, a
    read-only bind mount with odd permissions) hides it even from root."""
    ev = file_evidence(read)
    if read.denied and not is_root:
        return Finding(
            finding_id,
            Status.SKIP,
            f"{what} not checked: {read.path} needs root to read",
            (ev,),
            f"Run the audit as root: sudo mcpnode audit --only '{finding_id}'",
            subject,
        )
    return Finding(
        finding_id,
        Status.WARN,
        f"{what} not checked: {read.path} is unreadable ({read.error})",
        (ev,),
        f"Check the permissions and the security policy (SELinux/AppArmor) on {read.path}",
        subject,
    )
