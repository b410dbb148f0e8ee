"""Sysctls that hand out code execution or control of the kernel, refused in a profile unless
the file that sets one names it in `[profile] allow_sensitive = ["kernel.core_pattern"]`.

mcpnode writes profiles as root. Whoever can get a value for one of these keys into a profile
(a planted include, a reviewed-too-quickly pull request, a templating mistake) gets what the
key gives: a program the kernel runs as root, a way to crash or reboot the node, or a security
boundary switched off — often one-way, so `rollback` could not even undo it. The allow-list
makes each such value a deliberate, reviewable line next to the value itself.

Each entry says why; sources are the kernel's own documentation
(Documentation/admin-guide/sysctl/{kernel,fs,vm,net}.rst, Documentation/admin-guide/binfmt-misc.rst,
Documentation/admin-guide/LSM/Yama.rst) and the kernel code named.
"""

from __future__ import annotations

# key (exact) or prefix ending in "." -> why it is sensitive
SENSITIVE: dict[str, str] = {
    # -- programs the kernel runs as root -----------------------------------------------------
    "kernel.core_pattern": (
        "a value starting with '|' is a program the kernel runs as root for every core dump "
        "(kernel.rst, core_pattern): code execution"
    ),
    "kernel.core_pipe_limit": "limits and paces the core_pattern pipe helper run as root",
    "kernel.modprobe": (
        "the program the kernel runs as root to load a module on demand (kernel.rst, modprobe;"
        " kernel/kmod.c call_modprobe): code execution"
    ),
    "kernel.hotplug": (
        "the uevent helper the kernel runs as root for every device event (kernel.rst, hotplug;"
        " lib/kobject_uevent.c): code execution"
    ),
    "kernel.poweroff_cmd": (
        "the program the kernel runs as root on an orderly poweroff (kernel/reboot.c)"
    ),
    "fs.binfmt_misc.": (
        "registers interpreters the kernel runs for matching executables, with the caller's"
        " credentials or (flag C) the file's (binfmt-misc.rst): code execution"
    ),
    # -- control of the kernel itself ----------------------------------------------------------
    "kernel.sysrq": (
        "enables magic SysRq: reboot, crash, kill all tasks, remount read-only from the keyboard"
        " or /proc/sysrq-trigger (kernel.rst, sysrq; admin-guide/sysrq.rst)"
    ),
    "kernel.kexec_load_disabled": (
        "one-way: once 1 it cannot be set back to 0 until reboot, so rollback cannot restore it"
        " (kernel.rst, kexec_load_disabled)"
    ),
    "kernel.modules_disabled": (
        "one-way: once 1 no module can be loaded until reboot (kernel.rst, modules_disabled)"
    ),
    "kernel.panic": "reboots the node N seconds after a panic, or never (kernel.rst, panic)",
    "kernel.panic_on_oops": "turns every oops into a panic: a node-wide outage lever",
    "kernel.panic_on_warn": "turns every WARN() into a panic: a node-wide outage lever",
    "vm.panic_on_oom": "turns an out-of-memory into a panic instead of the OOM killer",
    # -- security boundaries -------------------------------------------------------------------
    "kernel.unprivileged_bpf_disabled": (
        "0 lets unprivileged users load BPF programs (a recurring privilege-escalation surface);"
        " 1 is one-way until reboot (kernel.rst, unprivileged_bpf_disabled)"
    ),
    "net.core.bpf_jit_harden": "0 turns off BPF JIT constant blinding (net.rst, bpf_jit_harden)",
    "net.core.bpf_jit_enable": "controls the BPF JIT, and its debug mode dumps JIT images",
    "kernel.kptr_restrict": (
        "lowering it exposes kernel addresses in /proc to users, defeating KASLR"
        " (kernel.rst, kptr_restrict)"
    ),
    "kernel.dmesg_restrict": "0 lets every user read the kernel log (kernel.rst)",
    "kernel.perf_event_paranoid": (
        "lowering it gives unprivileged users kernel profiling and tracing (kernel.rst)"
    ),
    "kernel.yama.ptrace_scope": (
        "lowering it lets a process ptrace others of the same user; 3 is one-way (Yama.rst)"
    ),
    "kernel.randomize_va_space": "0 disables address-space layout randomisation (kernel.rst)",
    "kernel.unprivileged_userns_clone": (
        "lets unprivileged users create user namespaces (Debian/Ubuntu kernels), a large "
        "privilege-escalation surface"
    ),
    "user.max_user_namespaces": "0 or raising it gates unprivileged user namespaces (user.rst)",
    "vm.mmap_min_addr": (
        "lowering it allows mapping page zero, turning kernel NULL dereferences into exploits"
        " (vm.rst, mmap_min_addr)"
    ),
    "vm.unprivileged_userfaultfd": "1 hands userfaultfd to every user, a known exploit helper",
    "fs.suid_dumpable": (
        "1 or 2 dumps the memory of setuid programs, secrets included (fs.rst, suid_dumpable)"
    ),
    "fs.protected_symlinks": "0 re-opens /tmp symlink races (fs.rst, protected_symlinks)",
    "fs.protected_hardlinks": "0 re-opens hard-link attacks on setuid files (fs.rst)",
    "fs.protected_fifos": "0 re-opens FIFO spoofing in sticky directories (fs.rst)",
    "fs.protected_regular": "0 re-opens file spoofing in sticky directories (fs.rst)",
}


def sensitive_reason(key: str) -> str | None:
    """Why `key` needs `allow_sensitive`, or None when it does not."""
    reason = SENSITIVE.get(key)
    if reason is not None:
        return reason
    for prefix, why in SENSITIVE.items():
        if prefix.endswith(".") and key.startswith(prefix):
            return why
    return None
