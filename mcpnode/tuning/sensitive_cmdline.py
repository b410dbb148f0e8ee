"""Kernel command-line arguments that switch a protection off, judged as the kernel parses them.

`[bootloader] cmdline` lands on the next boot's command line. An argument here needs
`allow_sensitive = ["cmdline:NAME"]` in the profile file that sets it, for the same reason as a
sensitive sysctl (tuning/sensitive.py): whoever gets a line into a profile must not silently
boot every node without its IOMMU, its LSM or its CPU mitigations.

Comparing strings is not enough, because the kernel does not compare strings:

* names: kernel/params.c parameq()/parameqn() treat `-` and `_` alike, so `intel-iommu=off` is
  `intel_iommu=off`, and `module.sig-enforce` is `module.sig_enforce`. Names are compared after
  the same folding (case stays significant: the kernel's is);
* handlers registered with `__setup("name", ...)` are matched by prefix (init/main.c
  obsolete_checksetup: parameqn over the setup string's length), so `nosmapX` runs `nosmap`'s
  handler: those rules say `prefix=True`;
* values go through each parameter's own parser: kstrtobool() looks at the first character or
  two only (lib/kstrtox.c: y/Y/t/T/e/E/1 true, n/N/f/F/d/D/0 false, o/O then n/N or f/F), so
  `0x`, `00` and `offline` are all "false"; kstrtoul(s, 0) takes a leading `+`, `0x` hex and
  `0` octal, so `selinux=00` and `apparmor=0x0` are 0; `iommu=` and `intel_iommu=` walk a comma
  list comparing each item's first characters (strncmp), so `iommu=pt,off` and
  `intel_iommu=on,off` end up off.

Where kernels disagree the stricter reading wins: before Linux 4.15 `audit=` went through
simple_strtol() and before 5.1 `apparmor=` too, where any non-number meant 0; so for these a
value is safe only when it is a number the kernel reads as non-zero (or `audit=on`).

Each rule cites its entry in the kernel's Documentation/admin-guide/kernel-parameters.txt
(https://docs.kernel.org/admin-guide/kernel-parameters.html) and the parser it mirrors. The
words the kernel hands on to init (`single`, `emergency`, `rd.break`, `systemd.*`) are cited
from systemd's kernel-command-line(7) and dracut.cmdline(7).
"""

from __future__ import annotations

import string
from collections.abc import Callable
from dataclasses import dataclass

Value = str | None  # None: a bare `name`, no `=`


def param_name(name: str) -> str:
    """A parameter name as the kernel compares it: `-` and `_` alike (kernel/params.c
    dash2underscore in parameqn)."""
    return name.replace("-", "_")


# -- the kernel's value parsers (pure) ---------------------------------------------------------


def kstrtobool(value: Value) -> bool | None:
    """lib/kstrtox.c kstrtobool() (Linux 6.x): only the first one or two characters count.
    None when the kernel would refuse the value (-EINVAL) or there is none."""
    if not value:
        return None
    first = value[0]
    if first in "yYtTeE1":
        return True
    if first in "nNfFdD0":
        return False
    if first in "oO" and len(value) > 1:
        if value[1] in "nN":
            return True
        if value[1] in "fF":
            return False
    return None


def kstrtoul0(value: Value) -> int | None:
    """lib/kstrtox.c kstrtoull(s, 0): an optional `+`, then `0x`/`0X` + hex digits, `0` + octal
    digits or decimal digits, then an optional newline and nothing else; None when refused
    (also past 64 bits: -ERANGE)."""
    if value is None:
        return None
    s = value[1:] if value.startswith("+") else value
    s = s[:-1] if s.endswith("\n") else s
    if s[:1] == "0" and s[1:2] in ("x", "X") and s[2:3] and s[2] in string.hexdigits:
        base, digits = 16, s[2:]
        allowed = string.hexdigits
    elif s[:1] == "0":
        base, digits, allowed = 8, s, string.octdigits
    else:
        base, digits, allowed = 10, s, string.digits
    if not digits or len(digits) > 64 or any(c not in allowed for c in digits):
        return None
    number = int(digits, base)
    return number if number < 1 << 64 else None


def kstrtol0(value: Value) -> int | None:
    """lib/kstrtox.c kstrtoll(s, 0): kstrtoul0 with an optional leading `-`."""
    if value is not None and value.startswith("-"):
        magnitude = kstrtoul0(value[1:])
        return None if magnitude is None else -magnitude
    return kstrtoul0(value)


def items(value: Value) -> tuple[str, ...]:
    """A comma list as the kernel's option walkers split it (`str += strcspn(str, ",")`, then
    skip every `,`): empty items vanish."""
    return tuple(i for i in (value or "").split(",") if i)


def systemd_boolean(value: Value) -> bool | None:
    """systemd's parse_boolean() (src/basic/parse-util.c), case-insensitive."""
    if value is None:
        return None
    low = value.lower()
    if low in ("1", "yes", "y", "true", "t", "on"):
        return True
    if low in ("0", "no", "n", "false", "f", "off"):
        return False
    return None


# -- predicates: does this value switch the protection off? -----------------------------------


def _always(_: Value) -> bool:
    return True


def _any_value(value: Value) -> bool:
    return value is not None


def _item(word: str) -> Callable[[Value], bool]:
    """Some comma item is exactly `word` (strcmp per item, e.g. retbleed_parse_cmdline)."""
    return lambda value: word in items(value)


def _item_prefix(word: str) -> Callable[[Value], bool]:
    """Some comma item starts with `word` (the strncmp(str, word, len) walkers)."""
    return lambda value: any(i.startswith(word) for i in items(value))


def _bool_false(value: Value) -> bool:
    """kstrtobool() reads false (a bare name sets a bool param true: param_set_bool(NULL))."""
    return kstrtobool(value) is False


def _bool_true_or_bare(value: Value) -> bool:
    return value is None or kstrtobool(value) is True


def _not_nonzero(value: Value) -> bool:
    """Safe only when the value is a number the kernel reads as non-zero: kstrtoul(s, 0) now,
    simple_strtol() (any non-number is 0) on older kernels."""
    number = kstrtol0(value)
    return number is None or number == 0


def _audit_off(value: Value) -> bool:
    """kernel/audit.c audit_enable(): strcasecmp "off"/"on", "0"/"1"; kstrtol(s, 0) on 4.15 to
    5.x kernels, simple_strtol() before."""
    if value is not None and value.lower() == "on":
        return False
    return _not_nonzero(value)


def _systemd_on(value: Value) -> bool:
    """systemd's debug-shell switches: bare means on, a value is a boolean or a tty name."""
    return systemd_boolean(value) is not False


def _rescue_unit(value: Value) -> bool:
    return value is not None and value.startswith(("rescue", "emergency"))


def _blacklists_security(value: Value) -> bool:
    """A module blacklist naming a module a protection depends on (module names fold `-` to `_`
    as parameter names do: kernel/module/main.c, kmod)."""
    return any(param_name(m).startswith(_SECURITY_MODULES) for m in items(value))


def _amd_iommu_off(value: Value) -> bool:
    """drivers/iommu/amd/init.c parse_amd_iommu_options(): before Linux 6.x it tried "off" at
    every character position (`for (; *str; ++str)`), so any value containing it counts."""
    return value is not None and "off" in value


# Modules whose absence removes a protection: the TPM drivers (measured boot, sealed keys) and
# dm-verity (verified root file systems).
_SECURITY_MODULES = ("tpm", "dm_verity")


@dataclass(frozen=True)
class Rule:
    """`off(value)` is True when the value switches the protection off; `prefix`: matched as a
    `__setup()` handler is, by the start of the argument (module docstring)."""

    why: str
    off: Callable[[Value], bool]
    prefix: bool = False


_MITIGATION = "CPU vulnerability mitigations"

# Keys are parameter names folded by param_name(); for `prefix` rules the setup string as the
# kernel registers it (`init=` with its `=`). The comment above each group names the
# kernel-parameters.txt entries and the parsers.
RULES: dict[str, Rule] = {
    # mitigations= [X86,PPC,S390,ARM64] "off: Disable all optional CPU mitigations" (kernel/cpu.c
    # mitigations_parse_cmdline: strcmp "off"); since 6.17 x86 also takes attack vectors to
    # leave unmitigated, `auto,no_user_kernel,...` (hw-vuln/attack_vector_controls.rst).
    "mitigations": Rule(
        "turns off CPU vulnerability mitigations",
        lambda v: any(i == "off" or i.startswith("no_") for i in items(v)),
    ),
    # Per-vulnerability switches, each `=off` in kernel-parameters.txt (arch/x86/kernel/cpu/bugs.c
    # parsers, strcmp per value or per comma item as retbleed_parse_cmdline does).
    **{
        name: Rule(f"turns off the {name} mitigation ({_MITIGATION})", _item("off"))
        for name in (
            "mds",
            "tsx_async_abort",
            "mmio_stale_data",
            "l1tf",
            "retbleed",
            "spectre_v2",
            "spectre_v2_user",
            "spectre_bhi",
            "spec_store_bypass_disable",
            "spec_rstack_overflow",
            "gather_data_sampling",
            "reg_file_data_sampling",
            "srbds",
            "indirect_target_selection",
            "tsa",
            "vmscape",
            "pti",
        )
    },
    # nopti, nospectre_v1, nospectre_v2, nospectre_bhb, nospec_store_bypass_disable [X86,ARM64,PPC]:
    # flags (cmdline_find_option_bool / early_param: a value changes nothing).
    **{
        name: Rule(f"{name}: turns off a mitigation ({_MITIGATION})", _always)
        for name in (
            "nopti",
            "nospectre_v1",
            "nospectre_v2",
            "nospectre_bhb",
            "nospec_store_bypass_disable",
        )
    },
    # kpti= [ARM64] "0: force disabled" (arch/arm64/kernel/cpufeature.c parse_kpti: kstrtobool).
    "kpti": Rule("disables kernel page table isolation (Meltdown)", _bool_false),
    # ssbd= [ARM64] force-off.
    "ssbd": Rule("turns off Speculative Store Bypass mitigation", _item("force-off")),
    # tsx= [X86] "on: enable TSX": re-opens TAA on affected CPUs (hw-vuln/tsx_async_abort.rst).
    "tsx": Rule("enables TSX, re-opening TSX Async Abort on affected CPUs", _item("on")),
    # kvm.nx_huge_pages= [KVM] "off: disable mitigation" (arch/x86/kvm/mmu/mmu.c
    # set_nx_huge_pages: "off", then kstrtobool).
    "kvm.nx_huge_pages": Rule(
        "turns off the iTLB multihit mitigation for guests",
        lambda v: v is not None and (v == "off" or _bool_false(v)),
    ),
    # kvm-intel.vmentry_l1d_flush= [KVM,Intel] "never: Disables the mitigation".
    "kvm_intel.vmentry_l1d_flush": Rule(
        "turns off the L1TF flush on VM entry", lambda v: v == "never"
    ),
    # nokaslr [KNL] "disable kernel and module base offset ASLR"; norandmaps: "Don't use address
    # space randomization" for processes.
    "nokaslr": Rule("disables kernel address space layout randomisation", _always),
    "norandmaps": Rule("disables address space randomisation of every process", _always),
    # nosmap, nosmep [X86] (removed in 5.x kernels; __setup handlers before): clearcpuid= [X86]
    # "Disable CPUID feature X for the kernel" (smap, smep, ...: any value).
    "nosmap": Rule("disables SMAP", _always, prefix=True),
    "nosmep": Rule("disables SMEP", _always, prefix=True),
    "clearcpuid": Rule("clears CPU features such as SMAP and SMEP for the kernel", _any_value),
    # noexec= / noexec32= [X86] "off: disable non-executable mappings".
    "noexec": Rule("disables non-executable mappings (NX)", _item("off")),
    "noexec32": Rule("disables non-executable mappings for 32-bit processes", _item("off")),
    # hardened_usercopy= [KNL] "off: disable hardening"; init_on_alloc= / init_on_free= [MM];
    # randomize_kstack_offset= [KNL]: all kstrtobool.
    "hardened_usercopy": Rule("disables hardened usercopy checks", _bool_false),
    "init_on_alloc": Rule("stops zeroing memory on allocation", _bool_false),
    "init_on_free": Rule("stops zeroing memory on free", _bool_false),
    "randomize_kstack_offset": Rule("disables kernel stack offset randomisation", _bool_false),
    # IOMMU: iommu= [X86] "off" (arch/x86/kernel/pci-dma.c iommu_setup, strncmp per comma item);
    # intel_iommu= [DMAR] "off" (drivers/iommu/intel/iommu.c intel_iommu_setup, same walk, in
    # order: `on,off` is off); amd_iommu= [HW,X86-64] "off"; intremap= [X86-64,Intel-IOMMU]
    # "off" (drivers/iommu/irq_remapping.c setup_irqremap). `iommu=pt` and `intel_iommu=on` are
    # not sensitive: translation stays on for devices given to guests and containers.
    "iommu": Rule("disables the IOMMU: devices may DMA anywhere in memory", _item_prefix("off")),
    "intel_iommu": Rule(
        "disables the IOMMU: devices may DMA anywhere in memory", _item_prefix("off")
    ),
    "amd_iommu": Rule("disables the IOMMU: devices may DMA anywhere in memory", _amd_iommu_off),
    "intremap": Rule("disables interrupt remapping", _item_prefix("off")),
    # vfio_iommu_type1.allow_unsafe_interrupts= (drivers/vfio/vfio_iommu_type1.c, bool param).
    "vfio_iommu_type1.allow_unsafe_interrupts": Rule(
        "lets devices assigned without interrupt remapping forge interrupts", _bool_true_or_bare
    ),
    # Linux security modules: selinux= [SELINUX] and enforcing= [SELINUX] (security/selinux/
    # hooks.c: kstrtoul(s, 0)); apparmor= [APPARMOR] (security/apparmor/lsm.c: kstrtoul(s, 0),
    # simple_strtol before 5.1); lsm= [SECURITY] "Choose order of LSM initialization" and
    # security= [SECURITY] "Choose a legacy 'major' security module": any value can leave one
    # out; lockdown= [SECURITY] only raises lockdown (there is no `none`), but
    # `integrity` refuses unsigned modules such as an out-of-tree GPU driver.
    "selinux": Rule("disables SELinux", _not_nonzero),
    "enforcing": Rule("boots SELinux permissive", _not_nonzero),
    "apparmor": Rule("disables AppArmor", _not_nonzero),
    "lsm": Rule("chooses the security modules that run (any list can leave one out)", _any_value),
    "security": Rule("chooses the major security module", _any_value),
    "lockdown": Rule("changes kernel lockdown (refuses unsigned modules)", _any_value),
    # audit= [KNL] "0 | off: disable the audit subsystem" (kernel/audit.c audit_enable).
    "audit": Rule("disables the audit subsystem", _audit_off),
    # ima_appraise= [IMA] { "off" | "enforce" | "fix" | "log" }: all but enforce stop enforcing
    # (security/integrity/ima/ima_appraise.c, strncmp); evm= [EVM] "fix".
    "ima_appraise": Rule("stops enforcing IMA appraisal", lambda v: v != "enforce"),
    "evm": Rule("stops enforcing EVM", _item_prefix("fix")),
    # module.sig_enforce [KNL] (kernel/module/signing.c: bool_enable_only, kstrtobool).
    "module.sig_enforce": Rule("allows unsigned kernel modules", _bool_false),
    # loadpin.enforce= [LOADPIN] (security/loadpin/loadpin.c: int, 0 = do not enforce).
    "loadpin.enforce": Rule("stops LoadPin enforcing", _not_nonzero),
    # module_blacklist= [KNL] "Do not load a comma-separated list of modules"; modprobe.blacklist=
    # is kmod's spelling of the same (modprobe.d(5)).
    "module_blacklist": Rule(
        "keeps a security module (TPM, dm-verity) from loading", _blacklists_security
    ),
    "modprobe.blacklist": Rule(
        "keeps a security module (TPM, dm-verity) from loading", _blacklists_security
    ),
    # init= [KNL] "Run specified binary instead of /sbin/init"; rdinit= [KNL] the same in the
    # initramfs (init/main.c __setup("init=") / __setup("rdinit="): prefix matches).
    "init=": Rule("replaces the init program: code execution as PID 1", _always, prefix=True),
    "rdinit=": Rule("replaces the initramfs init program: code execution", _always, prefix=True),
    # kgdbwait [KGDB] "Stop kernel execution and enter the kernel debugger"; kgdboc= [KGDB]
    # "kgdb over consoles"; kgdbdbgp= [KGDB,HW]; ekgdboc [X86,KGDB].
    "kgdbwait": Rule("stops the boot in the kernel debugger", _always),
    "kgdboc": Rule("opens the kernel debugger on a console", _any_value),
    "kgdbdbgp": Rule("opens the kernel debugger on a USB debug port", _any_value),
    "ekgdboc": Rule("opens the kernel debugger on an early console", _always),
    # sysrq_always_enabled [KNL] "Ignore sysrq setting - this boot parameter will neutralize
    # any effect of /proc/sys/kernel/sysrq" (drivers/tty/sysrq.c __setup).
    "sysrq_always_enabled": Rule(
        "enables every magic SysRq function regardless of kernel.sysrq", _always, prefix=True
    ),
    # Words the kernel hands to init. S [KNL] "Run init in single mode"; systemd's
    # kernel-command-line(7): single, s, S, 1 and rescue boot rescue.target; emergency and
    # rd.emergency emergency.target; systemd.unit= / rd.systemd.unit= pick the target;
    # systemd.debug_shell / rd.systemd.debug_shell a root shell on tty9 with no password.
    # dracut.cmdline(7): rd.break drops to a shell in the initramfs, rd.shell on failure.
    **{
        word: Rule(
            "boots into rescue or emergency mode (a root shell, the node out of service)", _always
        )
        for word in ("single", "s", "S", "1", "rescue", "emergency", "rd.rescue", "rd.emergency")
    },
    "systemd.unit": Rule("boots into rescue or emergency mode", _rescue_unit),
    "rd.systemd.unit": Rule("boots into rescue or emergency mode", _rescue_unit),
    "systemd.debug_shell": Rule("opens a root shell on tty9 without a password", _systemd_on),
    "rd.systemd.debug_shell": Rule("opens a root shell on tty9 without a password", _systemd_on),
    "rd.break": Rule("stops the boot in an initramfs root shell", _always),
    "rd.shell": Rule("opens an initramfs root shell when the boot fails", _systemd_on),
}

_PREFIX_RULES = tuple((key, rule) for key, rule in RULES.items() if rule.prefix)


def flag_name(arg: str) -> str:
    """The name `allow_sensitive = ["cmdline:NAME"]` uses for `arg`: its folded name."""
    return param_name(arg.partition("=")[0])


def sensitive(arg: str) -> str | None:
    """Why `arg` (NAME or NAME=VALUE) switches a protection off, or None (pure)."""
    name, eq, raw = arg.partition("=")
    value: Value = raw if eq else None
    folded = param_name(name)
    rule = RULES.get(folded)
    if rule is not None and not rule.prefix and rule.off(value):
        return rule.why
    whole = param_name(arg)
    for key, prefixed in _PREFIX_RULES:
        if whole.startswith(key):
            return prefixed.why
    return None
