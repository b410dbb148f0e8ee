"""What a write needs, and whether this process has it. Pure: the process's effective uid and
capability set are read by state.py from /proc/self/status (through Host, so a fake root can
say "no capabilities").

Facts (measured on Linux 6.18 with setpriv-reduced capability sets; docs/service.md, Privileges):
- /proc/sys uses its own permission check, `test_perm()` in fs/proc/proc_sysctl.c: the owner
  bits apply only to euid 0, and CAP_DAC_OVERRIDE does not help. So sysctls need euid 0...
- ...except `net.*`, where CAP_NET_ADMIN holders get root's bits (`net_ctl_permissions`).
- A few handlers also check a capability, even for root: `kernel.numa_balancing`
  (`sysctl_numa_balancing`), `kernel.kptr_restrict` and `kernel.dmesg_restrict`
  (`proc_dointvec_minmax_sysadmin`), `net.core.bpf_jit_*` — all CAP_SYS_ADMIN.
- sysfs files (THP, cpufreq) use ordinary DAC: root, or CAP_DAC_OVERRIDE.
- Loading a module needs CAP_SYS_MODULE.
"""

from __future__ import annotations

import errno as errno_mod
from dataclasses import dataclass

from mcpnode.tuning import paths

CAP_DAC_OVERRIDE = 1
CAP_NET_ADMIN = 12
CAP_SYS_MODULE = 16
CAP_SYS_ADMIN = 21
CAP_NAMES = {
    CAP_DAC_OVERRIDE: "CAP_DAC_OVERRIDE",
    CAP_NET_ADMIN: "CAP_NET_ADMIN",
    CAP_SYS_MODULE: "CAP_SYS_MODULE",
    CAP_SYS_ADMIN: "CAP_SYS_ADMIN",
}

_EVERY_CAP = sum(1 << cap for cap in CAP_NAMES)

_SYS_ADMIN_KEYS = frozenset(
    {"kernel.numa_balancing", "kernel.kptr_restrict", "kernel.dmesg_restrict"}
)


@dataclass(frozen=True)
class Privileges:
    """The process's effective uid and capabilities; None where /proc/self/status did not say
    (then nothing is predicted and the write itself decides)."""

    euid: int | None
    cap_eff: int | None

    def has(self, cap: int) -> bool | None:
        return None if self.cap_eff is None else bool(self.cap_eff >> cap & 1)


@dataclass(frozen=True)
class Requirement:
    """What writing one key needs: euid 0 unless `cap_instead_of_root` is held; and `cap` always
    (a handler's capable() check)."""

    root: bool
    cap_instead_of_root: int | None
    cap: int | None
    why: str


def requirement(key: str) -> Requirement:
    """What writing `key` (a sysctl name, `vm:...`/`cpu:...` sysfs key, or `module:NAME`) needs,
    by the key's shape: Subsystem.requirement's default, which a subsystem may refine."""
    if key.startswith("module:"):
        return Requirement(False, None, CAP_SYS_MODULE, "loading a kernel module")
    if key.startswith("persist:"):
        return Requirement(True, CAP_DAC_OVERRIDE, None, "/etc/sysctl.d is root-owned")
    if ":" in key:
        return Requirement(True, CAP_DAC_OVERRIDE, None, "sysfs files are root-owned, mode 0644")
    if key in _SYS_ADMIN_KEYS or key.startswith("net.core.bpf_jit"):
        return Requirement(True, None, CAP_SYS_ADMIN, f"the {key} handler checks capable()")
    if key.startswith("net."):
        return Requirement(
            True, CAP_NET_ADMIN, None, "net.* sysctls: root, or CAP_NET_ADMIN for the netns"
        )
    return Requirement(
        True,
        None,
        None,
        "proc/sys gives write access to euid 0 only; CAP_DAC_OVERRIDE does not help",
    )


def missing(key: str, privileges: Privileges, req: Requirement | None = None) -> str | None:
    """Why this process cannot write `key`, naming the capability or uid it lacks; None when it
    can (or when its privileges are unknown). `req`: what the key's subsystem says writing it
    needs (Subsystem.requirement), else the rule by the key's shape."""
    cap_eff = privileges.cap_eff
    if privileges.euid == 0 and cap_eff is not None and cap_eff & _EVERY_CAP == _EVERY_CAP:
        # Root holding every capability a requirement can name (CAP_NAMES: the reasons below
        # name them from it) lacks nothing: the common case, asked once per plan item.
        return None
    req = req if req is not None else requirement(key)
    if req.cap is not None and privileges.has(req.cap) is False:
        name = CAP_NAMES[req.cap]
        return f"needs {name} ({req.why}); this process's CapEff lacks it"
    if req.root and privileges.euid is not None and privileges.euid != 0:
        if req.cap_instead_of_root is not None and privileges.has(req.cap_instead_of_root):
            return None
        alt = ""
        if req.cap_instead_of_root is not None:
            alt = f" or {CAP_NAMES[req.cap_instead_of_root]}"
        return f"needs root (euid 0){alt}; running as euid {privileges.euid} ({req.why})"
    return None


def denied_hint(key: str, errno_value: int | None, req: Requirement | None = None) -> str:
    """The sentence added to an EACCES/EPERM/EROFS write failure; `req` as for `missing`."""
    if errno_value == errno_mod.EROFS:
        return "proc/sys is mounted read-only here (a container?): tune from the host"
    req = req if req is not None else requirement(key)
    if key == paths.TCP_CC and errno_value == errno_mod.EPERM:
        return (
            "outside the initial network namespace only algorithms listed in "
            "net.ipv4.tcp_allowed_congestion_control may be set (EPERM); otherwise the "
            "algorithm's module needs CAP_NET_ADMIN to autoload"
        )
    if req.cap is not None and errno_value == errno_mod.EPERM:
        return f"{CAP_NAMES[req.cap]} is required ({req.why})"
    if req.root:
        alt = f" or {CAP_NAMES[req.cap_instead_of_root]}" if req.cap_instead_of_root else ""
        cap = f" plus {CAP_NAMES[req.cap]}" if req.cap is not None else ""
        return f"needs root (euid 0){alt}{cap}: {req.why}"
    return f"needs {CAP_NAMES[req.cap]}" if req.cap is not None else ""
