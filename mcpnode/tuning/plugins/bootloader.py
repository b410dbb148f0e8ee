"""The kernel command line (`[bootloader]`): arguments the next boot should have, written the way
the distribution expects, and compared with the running `/proc/cmdline`.

    [bootloader]
    cmdline = ["iommu=pt", "default_hugepagesz=1G", "hugepagesz=1G", "hugepages=64"]
    isolate = ["nohz_full", "rcu_nocbs", "isolcpus"]     # each = the GPU slices

How the boot configuration is changed is detected, never assumed (like tuned's bootloader
plugin, which knows GRUB2 and BLS via grubby):

* `grubby` on PATH (Fedora, RHEL, CentOS Stream, Amazon Linux: BLS entries): `grubby
  --update-kernel=ALL --args="..."`; the default kernel's arguments (`grubby --info=DEFAULT`) are
  journaled, and rollback removes what mcpnode added and puts back values it changed.
* `/etc/default/grub` (Debian, Ubuntu, SUSE): a drop-in `/etc/default/grub.d/90-mcpnode.cfg`
  appending to `GRUB_CMDLINE_LINUX` (grub-mkconfig sources grub.d/*.cfg after the main file; a
  later value of a parameter wins when the kernel parses the line), then `update-grub`, else
  `grub2-mkconfig -o /boot/grub2/grub.cfg`, else `grub-mkconfig -o /boot/grub/grub.cfg`. The
  drop-in is journaled as a file; rollback removes it and regenerates again.
* `/etc/kernelstub/configuration` (Pop!_OS, systemd-boot through kernelstub) and
  `/etc/kernel/cmdline` (systemd-boot, unified kernel images, kernel-install) are detected and
  reported `unsupported` with the command to run (`kernelstub -a ARG`, edit the file and run
  `kernel-install`): mcpnode does not change them yet.

Commands run through Host.run_change (no shell; live host only). The plan's item is `ok` once
the configuration holds every wanted argument; whether the *running* kernel has them is said in
its reason and in apply's notes ("reboot required: ... not in /proc/cmdline"), and the audit
reports the arguments that are wanted but not active (`tuning.bootloader`).

Arguments are validated strictly: `name` or `name=value` of [A-Za-z0-9_.,:/@+-], so nothing can
reach the shell that sources /etc/default/grub. Arguments that switch off a security feature
(`mitigations=off`, `nokaslr`, `selinux=00`, `intel-iommu=off`, ...: judged as the kernel
parses them, tuning/sensitive_cmdline.py) need `allow_sensitive = ["cmdline:NAME"]` in the
profile, like sensitive sysctls.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from mcpnode.codec.cpus import format_list
from mcpnode.errors import CommandFailed, HostError
from mcpnode.host import Host, HostReader
from mcpnode.tuning import paths, privilege, sensitive_cmdline
from mcpnode.tuning.model import Action, HostState, PlanItem, Setting
from mcpnode.tuning.outcome import Outcome
from mcpnode.tuning.plugins.base import SectionInput, StateDraft, Subsystem, err
from mcpnode.tuning.read import Absent, Reading, file_reading, optional
from mcpnode.tuning.values import Exact

ARG = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}(=[A-Za-z0-9_.,:/@+-]{1,256})?\Z", re.ASCII)
ISOLATE = ("nohz_full", "rcu_nocbs", "isolcpus")
GRUB_DROPIN_TEXT_HEAD = "# Written by mcpnode ([bootloader]); `mcpnode rollback` removes it.\n"

Method = Literal["grubby", "grub", "kernelstub", "systemd-boot", "none"]


def arg_problem(arg: str) -> str | None:
    """Why `arg` cannot go on the command line, or None when it can (pure)."""
    if not ARG.match(arg):
        return (
            f"{arg[:60]!r} is not NAME or NAME=VALUE of letters, digits and _ . , : / @ + - "
            "(no spaces, quotes or shell characters)"
        )
    return None


def sensitive_arg(arg: str) -> str | None:
    """Why `arg` needs `allow_sensitive = ["cmdline:NAME"]` (NAME as sensitive_flag gives it),
    or None: judged as the kernel parses names and values (tuning/sensitive_cmdline.py)."""
    return sensitive_cmdline.sensitive(arg)


def sensitive_flag(arg: str) -> str:
    """`cmdline:NAME` for `arg`, with `-` folded to `_` as the kernel compares names, so
    `intel-iommu=off` and `intel_iommu=off` need the same allow-list entry."""
    return "cmdline:" + sensitive_cmdline.flag_name(arg)


def split_cmdline(text: str) -> list[str]:
    """The arguments of a kernel command line (`/proc/cmdline`, grubby's args="..."). Double
    quotes group a value with spaces, as the kernel's own parser (lib/cmdline.c next_arg)."""
    try:
        return shlex.split(text, posix=True)
    except ValueError:
        return text.split()


def last_values(args: list[str]) -> dict[str, str | None]:
    """name -> the value of its last occurrence (None for a bare flag): the kernel applies a
    parameter given twice in order, so the later one is what holds."""
    out: dict[str, str | None] = {}
    for arg in args:
        name, eq, value = arg.partition("=")
        out[name] = value if eq else None
    return out


def missing(wanted: list[str], have: list[str]) -> list[str]:
    """The wanted arguments `have` does not satisfy, in order (pure)."""
    values = last_values(have)
    out = []
    for arg in wanted:
        name, eq, value = arg.partition("=")
        if name not in values or (values[name] != (value if eq else None)):
            out.append(arg)
    return out


def wanted_args(cmdline: list[str], isolate: list[str], slices: str | None) -> list[str] | None:
    """The profile's arguments plus the isolation ones of the GPU slices; None when isolation
    is asked for but the slices are not known."""
    out = list(cmdline)
    if isolate:
        if not slices:
            return None
        for name in isolate:
            # isolcpus' managed_irq flag alone keeps kernel-managed interrupts off the slices
            # (where a housekeeping CPU can serve them) without taking the slices out of the
            # scheduler's load balancing, which multi-threaded Python servers need
            # (kernel-parameters.txt, isolcpus: flags).
            out.append(
                f"isolcpus=managed_irq,{slices}" if name == "isolcpus" else f"{name}={slices}"
            )
    return out


def encode(cmdline: list[str], isolate: list[str]) -> str:
    """The setting's value as the profile's Exact text: `iommu=pt hugepages=64;nohz_full`."""
    return " ".join(cmdline) + ";" + " ".join(isolate)


def decode(text: str) -> tuple[list[str], list[str]]:
    args, _, isolate = text.partition(";")
    return args.split(), isolate.split()


# -- detection --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Boot:
    """How this host's boot command line is configured, and what is configured now.

    method: detected way (module docstring); key/path: the journal key and its path;
    configured: the arguments the next boot gets as far as mcpnode can tell (grubby: the
    default kernel's; grub: mcpnode's drop-in's; None when it cannot be told);
    content: the journaled original (the drop-in's text, grubby's args); regen: the command
    that regenerates GRUB's configuration; why: for unsupported or unknown methods."""

    method: Method
    key: str
    path: str
    configured: list[str] | None
    content: str | None
    regen: tuple[str, ...] | None
    why: str


def _found(host: HostReader, *argv: str) -> bool:
    return host.command(tuple(argv)).found


def grubby_args(host: HostReader) -> str | None:
    """`args="..."` of `grubby --info=DEFAULT`, None when it does not answer."""
    res = host.command(("grubby", "--info=DEFAULT"))
    if not res.found or res.returncode != 0:
        return None
    for line in res.stdout.splitlines():
        if line.startswith("args="):
            return line[len("args=") :].strip().strip('"')
    return None


def grub_dropin_text(args: list[str]) -> str:
    return GRUB_DROPIN_TEXT_HEAD + f'GRUB_CMDLINE_LINUX="$GRUB_CMDLINE_LINUX {" ".join(args)}"\n'


def dropin_args(text: str) -> list[str]:
    """The arguments mcpnode's GRUB drop-in appends (pure; its own format only)."""
    m = re.search(r'GRUB_CMDLINE_LINUX="\$GRUB_CMDLINE_LINUX ([^"$`\\]*)"', text)
    return m.group(1).split() if m else []


def grub_regen(host: HostReader) -> tuple[str, ...] | None:
    if _found(host, "update-grub", "--version"):
        return ("update-grub",)
    if _found(host, "grub2-mkconfig", "--version"):
        return ("grub2-mkconfig", "-o", "/boot/grub2/grub.cfg")
    if _found(host, "grub-mkconfig", "--version"):
        return ("grub-mkconfig", "-o", "/boot/grub/grub.cfg")
    return None


def detect(host: HostReader) -> Boot:
    """How the machine behind `host` configures its kernel command line (module docstring)."""
    stub = paths.BOOT_PATHS["bootloader:kernelstub"]
    if host.exists(stub):
        return Boot(
            "kernelstub",
            "bootloader:kernelstub",
            stub,
            None,
            None,
            None,
            f"kernelstub manages the command line ({stub}): run `kernelstub -a ARG` for each "
            "argument (mcpnode does not change kernelstub's configuration)",
        )
    if _found(host, "grubby", "--version"):
        args = grubby_args(host)
        return Boot(
            "grubby",
            "bootloader:grubby",
            paths.BOOT_PATHS["bootloader:grubby"],
            split_cmdline(args) if args is not None else None,
            args,
            None,
            "" if args is not None else "`grubby --info=DEFAULT` did not answer",
        )
    dropin = paths.BOOT_PATHS[paths.GRUB_KEY]
    if host.exists("/etc/default/grub"):
        try:
            text = host.read_optional(dropin, limit=1 << 16)
        except HostError as err:
            return Boot("grub", paths.GRUB_KEY, dropin, None, None, None, str(err))
        regen = grub_regen(host)
        why = "" if regen is not None else "no update-grub, grub2-mkconfig or grub-mkconfig"
        return Boot(
            "grub",
            paths.GRUB_KEY,
            dropin,
            dropin_args(text or ""),
            text or "",
            regen,
            why,
        )
    if host.exists("/etc/kernel/cmdline"):
        return Boot(
            "systemd-boot",
            "bootloader:kernel-cmdline",
            "/etc/kernel/cmdline",
            None,
            None,
            None,
            "the command line is /etc/kernel/cmdline (systemd-boot / kernel-install): add the "
            "arguments there and run `kernel-install add` (mcpnode does not change it yet)",
        )
    return Boot(
        "none",
        "bootloader:none",
        "",
        None,
        None,
        None,
        "no boot loader configuration found (grubby, /etc/default/grub, kernelstub, "
        "/etc/kernel/cmdline)",
    )


# -- effects ---------------------------------------------------------------------------------


def grubby_update(host: Host, wanted: list[str]) -> None:
    """Add `wanted` to every kernel's arguments. Raises CommandFailed, NotSupported."""
    host.run_change(("grubby", "--update-kernel=ALL", f"--args={' '.join(wanted)}"))


def grubby_restore(host: Host, original: str) -> None:
    """Back to the default kernel's `original` arguments: remove the ones added since, put back
    the original value of each one changed. Raises CommandFailed, NotSupported."""
    now = grubby_args(host)
    if now is None:
        raise CommandFailed("grubby", None, "`grubby --info=DEFAULT` did not answer")
    before, after = last_values(split_cmdline(original)), last_values(split_cmdline(now))
    added = [n for n in after if n not in before]
    changed = [
        n if before[n] is None else f"{n}={before[n]}"
        for n in before
        if n in after and after[n] != before[n]
    ]
    argv = ["grubby", "--update-kernel=ALL"]
    if added:
        argv.append(f"--remove-args={' '.join(added)}")
    if changed:
        argv.append(f"--args={' '.join(changed)}")
    if len(argv) > 2:
        host.run_change(tuple(argv))


def regenerate_grub(host: Host) -> None:
    """Regenerate GRUB's configuration after the drop-in changed. Raises CommandFailed when
    no generator is installed or it fails, NotSupported on a recorded root."""
    regen = grub_regen(host)
    if regen is None:
        raise CommandFailed("grub", None, "no update-grub, grub2-mkconfig or grub-mkconfig")
    host.run_change(regen)


# -- the subsystem ---------------------------------------------------------------------------


class Bootloader(Subsystem):
    """One setting, `bootloader:cmdline`; its item is keyed by the method found
    (`bootloader:grub`, `bootloader:grubby`, ...), each with the one path it changes."""

    name = "bootloader"
    section = "bootloader"
    options = ("cmdline", "isolate")

    # GRUB's drop-in is a whole file; grubby's argument string is kept exactly as read.
    file_keys = frozenset({paths.GRUB_KEY})
    raw_keys = frozenset({paths.GRUBBY_KEY})
    atomic_files = (paths.BOOT_PATHS[paths.GRUB_KEY],)

    def owns(self, key: str) -> bool:
        return key.startswith("bootloader:")

    def path_of(self, key: str) -> str | None:
        """The one path each way of changing the command line changes (grubby edits the BLS
        entries itself; mcpnode never writes under /boot)."""
        return paths.BOOT_PATHS[key] if key in (paths.GRUB_KEY, paths.GRUBBY_KEY) else None

    def parse(self, section: SectionInput) -> list[Setting]:
        boot, file = section.table, section.file
        if not boot:
            return []
        cmdline = boot.get("cmdline", [])
        isolate = boot.get("isolate", [])
        if not isinstance(cmdline, list) or not all(isinstance(a, str) for a in cmdline):
            raise err(file, "cmdline", "must be a list of kernel parameters", "bootloader")
        for arg in cmdline:
            problem = arg_problem(arg)
            if problem:
                raise err(file, "cmdline", problem, "bootloader")
            flag = sensitive_flag(arg)
            why = sensitive_arg(arg)
            if why is not None and flag not in section.allowed:
                raise err(
                    file,
                    "cmdline",
                    f"sensitive: {arg} {why}. It needs `allow_sensitive = [{flag!r}]` in this "
                    "file's [profile] table",
                    "bootloader",
                )
            if why is not None:
                section.used.add(flag)
        if not isinstance(isolate, list) or not all(i in ISOLATE for i in isolate):
            raise err(file, "isolate", f"must be a list of {', '.join(ISOLATE)}", "bootloader")
        note = section.comment("bootloader", "cmdline") or section.comment("bootloader", "isolate")
        return [Setting(paths.BOOTLOADER_KEY, Exact(encode(cmdline, isolate)), file, note)]

    def read(self, host: HostReader, setting: Setting, draft: StateDraft) -> None:
        boot = detect(host)
        draft.found[self.name] = boot
        if boot.content is not None:
            draft.readings[boot.path] = boot.content
        draft.cmdline = optional(host, paths.PROC_CMDLINE)

    def read_restore(self, host: HostReader, path: str) -> Reading | None:
        if path == paths.BOOT_PATHS[paths.GRUBBY_KEY]:
            args = grubby_args(host)
            return args if args is not None else Absent("grubby does not answer")
        if path == paths.BOOT_PATHS[paths.GRUB_KEY]:
            return file_reading(host, path)
        return None

    def plan(self, setting: Setting, state: HostState) -> list[PlanItem]:
        boot = state.found.get(self.name)
        return _boot_items(setting, state, boot if isinstance(boot, Boot) else None)

    def write(self, host: Host, key: str, path: str, new: str, whole: bool) -> str | None:
        """grubby: add the arguments `new` to every kernel, or with `whole` bring the default
        kernel's arguments back to `new`. Returns the arguments before."""
        if key != paths.GRUBBY_KEY:
            return super().write(host, key, path, new, whole)
        before = grubby_args(host) or ""
        if whole:
            grubby_restore(host, new)
        else:
            grubby_update(host, new.split())
        return before

    def current_text(self, host: Host, key: str, path: str) -> str | None:
        if key == paths.GRUBBY_KEY:
            return grubby_args(host)
        return super().current_text(host, key, path)

    def after_file_write(self, host: Host, key: str) -> None:
        if key == paths.GRUB_KEY:
            regenerate_grub(host)  # GRUB reads grub.cfg, not the drop-in

    def notes(self, host: Host, items: Sequence[PlanItem], done: Sequence[Outcome]) -> list[str]:
        booted = [i for i in items if self.owns(i.key)]
        if any(self.owns(o.key) for o in done):
            return ["reboot required: the kernel command line changes at the next boot"]
        if any("reboot required" in i.reason for i in booted):
            return [next(i.reason for i in booted if "reboot required" in i.reason)]
        return []


def _boot_items(setting: Setting, state: HostState, boot: Boot | None) -> list[PlanItem]:
    """One item: the boot configuration holds every wanted argument. `ok` says whether the
    running kernel has them too, or that a reboot is required."""
    assert isinstance(setting.desired, Exact)
    src = setting.source
    args, isolate = decode(setting.desired.text)
    slices = format_list(state.partition.slices) if state.partition is not None else None
    wanted = wanted_args(args, isolate, slices)
    rule = "kernel command line: " + " ".join(args + [f"{i}=<GPU slices>" for i in isolate])
    key = boot.key if boot is not None else setting.key
    if wanted is None:
        why = "the GPU slices are not known to this run (no current manifest)"
        return [PlanItem(key, "", rule, None, None, "skipped", why, src)]
    if boot is None or boot.method in ("kernelstub", "systemd-boot", "none"):
        why = boot.why if boot is not None else "not detected"
        return [PlanItem(key, "", rule, None, " ".join(wanted), "unsupported", why, src)]
    if boot.configured is None or boot.content is None:
        return [PlanItem(key, boot.path, rule, None, None, "skipped", boot.why, src, unread=True)]
    running = split_cmdline(state.cmdline or "")
    inactive = missing(wanted, running)
    todo = missing(wanted, boot.configured)
    current = boot.content if boot.method == "grub" else " ".join(boot.configured)
    if boot.method == "grub":
        keep = [a for a in boot.configured if a.partition("=")[0] not in last_values(wanted)]
        desired = grub_dropin_text(keep + wanted)
    else:
        desired = " ".join(wanted)
    after = (
        "active now"
        if not inactive
        else (f"reboot required: {' '.join(inactive)} not in /proc/cmdline")
    )
    if not todo:
        return [PlanItem(key, boot.path, rule, current, desired, "ok", f"configured; {after}", src)]
    if boot.method == "grub" and boot.regen is None:
        return [PlanItem(key, boot.path, rule, current, desired, "unsupported", boot.why, src)]
    lacking = privilege.missing(key, state.privileges)
    action: Action = "needs-privilege" if lacking is not None else "set"
    how = "grubby --update-kernel=ALL" if boot.method == "grubby" else " ".join(boot.regen or ())
    why = lacking or f"add {' '.join(todo)} ({how}); reboot required"
    return [PlanItem(key, boot.path, rule, current, desired, action, why, src)]
