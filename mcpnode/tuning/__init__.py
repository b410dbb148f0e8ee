"""Tuning: declarative profiles applied to the kernel through Host, with a journal.

    profile.py   TOML profiles: locations, includes, validation (ProfileError names file + key)
    values.py    the one comparison: exact / at-least / [selected] enums / preference lists
    paths.py     every logical path tuning reads or writes, and key -> path mapping
    privilege.py what each write needs (root, CAP_SYS_ADMIN, CAP_NET_ADMIN, CAP_SYS_MODULE)
    model.py     Setting, HostState, PlanItem: what parse, read and plan pass along
    plugins/     one module per subsystem (sysctl, bootloader, thp, pmqos, governor, irq, rps,
                 housekeeping) behind one registry, SUBSYSTEMS: each parses its profile
                 section, reads, plans and writes its keys
    read.py      the read primitives every subsystem shares (Reading: text, Absent, Unreadable)
    state.py     read what the plan needs through Host (the only I/O before a decision)
    plan.py      pure: (profile, state) -> Plan: set / ok / unsupported / needs-privilege / skipped
    journal.py   originals recorded before the first write (atomic JSON under var/lib/mcpnode)
    apply.py     journal -> writes in plan order -> undo in reverse on failure; rollback; recovery
    verify.py    re-plan and report drift (same comparison as apply)
    persist.py   /etc/sysctl.d/90-mcpnode.conf and the boot-order override report
    explain.py   what a key does, who sets it, per-netns and privilege notes (facts.py)

Flow: plan -> journal -> apply -> verify; rollback restores the journal's originals.
"""
