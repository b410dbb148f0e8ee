"""The per-key facts the tuning engine asks the subsystems for (tuning/plugins/base.py): the one
file a key writes, whole-file and raw keys, atomically replaced files, what a write needs and
how `profiles explain` shows a key. The registry answers for every subsystem; nothing outside
the plugins keeps a table of keys."""

from __future__ import annotations

import pytest

from mcpnode.host import HostReader
from mcpnode.tuning import paths, plugins, privilege
from mcpnode.tuning.model import HostState, PlanItem, Setting
from mcpnode.tuning.plugins.base import SectionInput, StateDraft, Subsystem, value_item
from mcpnode.tuning.values import Exact

PATHS = {
    "vm:transparent_hugepage": "/sys/kernel/mm/transparent_hugepage/enabled",
    "net.core.somaxconn": "/proc/sys/net/core/somaxconn",
    "cpu:governor:policy12": "/sys/devices/system/cpu/cpufreq/policy12/scaling_governor",
    "irq:42": "/proc/irq/42/smp_affinity_list",
    "rps:eth0:3": "/sys/class/net/eth0/queues/rx-3/rps_cpus",
    "irqbalance:debian": "/etc/default/irqbalance",
    "irqbalance:redhat": "/etc/sysconfig/irqbalance",
    "systemd:user.slice": "/etc/systemd/system/user.slice.d/50-mcpnode-housekeeping.conf",
    "bootloader:grub": "/etc/default/grub.d/90-mcpnode.cfg",
    "bootloader:grubby": "/boot/loader/entries",
}
NO_FILE = [
    "module:tcp_bbr",  # loaded, never written
    "cpu:governor",  # a setting, planned as one item per policy
    "cpu:governor:../../x",
    "cpu:force_latency",  # held by the agent, never written to a file
    "irq:policy",
    "irq:1234567",
    "rps:..:0",
    "rps:eth0:x",
    "systemd:other.slice",
    "bootloader:cmdline",
    "net..core",
    "vm:other",
]


@pytest.mark.parametrize(("key", "path"), PATHS.items())
def test_each_item_key_writes_the_one_file_its_subsystem_names(key: str, path: str) -> None:
    assert plugins.path_of(key) == path


@pytest.mark.parametrize("key", NO_FILE)
def test_keys_that_write_no_file_have_no_path(key: str) -> None:
    assert plugins.path_of(key) is None


def test_whole_file_and_raw_keys() -> None:
    files = {k for k in PATHS if plugins.is_file_key(k)}
    assert files == {
        "irqbalance:debian",
        "irqbalance:redhat",
        "systemd:user.slice",
        "bootloader:grub",
    }
    assert {k for k in PATHS if plugins.is_raw_key(k)} == files | {"bootloader:grubby"}
    assert not any(plugins.is_file_key(k) or plugins.is_raw_key(k) for k in NO_FILE)


def test_every_whole_file_is_replaced_atomically_and_its_temporaries_cleaned() -> None:
    atomic = set(plugins.atomic_files())
    for subsystem in plugins.SUBSYSTEMS:
        for key in subsystem.file_keys:
            assert subsystem.owns(key)
            assert subsystem.path_of(key) in atomic, key
    assert len(atomic) == len(plugins.atomic_files())  # no file named by two subsystems


def test_a_write_needs_what_the_owner_says() -> None:
    for key in [*PATHS, "module:tcp_bbr", "kernel.numa_balancing"]:
        owner = plugins.owner(key)
        expected = owner.requirement(key) if owner is not None else privilege.requirement(key)
        assert plugins.requirement(key) == expected
    assert plugins.requirement("net.core.somaxconn").cap_instead_of_root == privilege.CAP_NET_ADMIN
    assert plugins.requirement("irq:3").cap_instead_of_root == privilege.CAP_DAC_OVERRIDE


def test_explain_shows_a_governor_policy_as_its_setting_and_others_as_themselves() -> None:
    governor = plugins.subsystem_of("cpu:governor:policy0")
    assert governor.explained("cpu:governor:policy0") == (
        paths.GOVERNOR_KEY,
        paths.governor_path("policy0"),
    )
    assert governor.explained(paths.GOVERNOR_KEY) == (paths.GOVERNOR_KEY, None)
    thp = plugins.subsystem_of(paths.THP_KEY)
    assert thp.explained(paths.THP_KEY) == (paths.THP_KEY, paths.THP_ENABLED)
    assert plugins.subsystem_of("irq:policy").explained("irq:policy") is None


def test_a_subsystem_that_declares_nothing_gets_the_defaults() -> None:
    class Bare(Subsystem):
        name = "bare"
        section = "bare"

        def owns(self, key: str) -> bool:
            return key.startswith("bare:")

        def parse(self, section: SectionInput) -> list[Setting]:
            return []

        def read(self, host: HostReader, setting: Setting, draft: StateDraft) -> None:
            return None

        def plan(self, setting: Setting, state: HostState) -> list[PlanItem]:
            return []

    bare = Bare()
    assert bare.path_of("bare:x") is None and bare.explained("bare:x") is None
    assert bare.file_keys == frozenset() and bare.atomic_files == ()
    assert bare.requirement("bare:x") == privilege.requirement("bare:x")


def test_a_refined_requirement_decides_the_plan_of_a_one_file_value() -> None:
    """value_item takes the subsystem's requirement: the same sysfs write, planned for a
    process with CAP_DAC_OVERRIDE but not CAP_SYS_ADMIN, is a `set` under the default rule
    and `needs-privilege` under one that also needs CAP_SYS_ADMIN."""
    key, path = "vm:transparent_hugepage", paths.THP_ENABLED
    setting = Setting(key, Exact("never"), "test.toml", "")
    dac_only = privilege.Privileges(euid=1000, cap_eff=1 << privilege.CAP_DAC_OVERRIDE)
    state = HostState({path: "always"}, {}, frozenset(), dac_only, None, None, live=True)
    assert value_item(key, path, setting, state).action == "set"
    stricter = privilege.Requirement(True, privilege.CAP_DAC_OVERRIDE, privilege.CAP_SYS_ADMIN, "x")
    item = value_item(key, path, setting, state, requirement=stricter)
    assert item.action == "needs-privilege" and "CAP_SYS_ADMIN" in item.reason
