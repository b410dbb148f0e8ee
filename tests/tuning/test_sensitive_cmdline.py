"""`[bootloader] cmdline` arguments that switch a protection off need `allow_sensitive`, judged
as the kernel parses them (tuning/sensitive_cmdline.py): every hostile spelling below is
refused without the allow-list (one line naming the profile file and the key, exit 2, nothing
written) and accepted with it; the safe controls pass without it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mcpnode.tuning import sensitive_cmdline as sc
from mcpnode.tuning.errors import ProfileError
from mcpnode.tuning.profile import parse_profile
from tests.support.tuningcli import run_cli
from tests.support.tuningroot import tree, write_profiles

# (argument, the allow-list entry it needs)
HOSTILE: list[tuple[str, str]] = [
    # names: '-' and '_' are one character to the kernel (parameq)
    ("intel-iommu=off", "intel_iommu"),
    ("amd-iommu=off", "amd_iommu"),
    ("intel_iommu=on,off", "intel_iommu"),
    ("intel_iommu=off,igfx_off", "intel_iommu"),
    ("iommu=pt,off", "iommu"),
    ("iommu=off", "iommu"),
    ("amd_iommu=fullflush,off", "amd_iommu"),
    ("intremap=off", "intremap"),
    ("module.sig-enforce=0", "module.sig_enforce"),
    ("module.sig_enforce=off", "module.sig_enforce"),
    ("module.sig_enforce=no", "module.sig_enforce"),
    ("vfio_iommu_type1.allow_unsafe_interrupts", "vfio_iommu_type1.allow_unsafe_interrupts"),
    ("vfio-iommu-type1.allow-unsafe-interrupts=Y", "vfio_iommu_type1.allow_unsafe_interrupts"),
    # numbers as kstrtoul(s, 0) reads them; anything not non-zero on older kernels
    ("selinux=0", "selinux"),
    ("selinux=00", "selinux"),
    ("selinux=+0", "selinux"),
    ("selinux=0x0", "selinux"),
    ("selinux=off", "selinux"),
    ("enforcing=00", "enforcing"),
    ("enforcing=0", "enforcing"),
    ("apparmor=0x0", "apparmor"),
    ("apparmor=0", "apparmor"),
    ("audit=off", "audit"),
    ("audit=OFF", "audit"),
    ("audit=0", "audit"),
    ("audit=00", "audit"),
    ("loadpin.enforce=0", "loadpin.enforce"),
    ("lsm=capability,yama", "lsm"),
    ("security=none", "security"),
    ("lockdown=integrity", "lockdown"),
    ("ima_appraise=off", "ima_appraise"),
    ("ima_appraise=log", "ima_appraise"),
    ("evm=fix", "evm"),
    ("module_blacklist=nouveau,tpm_crb", "module_blacklist"),
    ("modprobe.blacklist=tpm-tis", "modprobe.blacklist"),
    # mitigations, each switch and its flags
    ("mitigations=off", "mitigations"),
    ("mitigations=auto,no_user_kernel", "mitigations"),
    ("mds=off", "mds"),
    ("l1tf=off", "l1tf"),
    ("retbleed=off", "retbleed"),
    ("retbleed=off,nosmt", "retbleed"),
    ("spectre_v2=off", "spectre_v2"),
    ("spectre-v2-user=off", "spectre_v2_user"),
    ("spec_store_bypass_disable=off", "spec_store_bypass_disable"),
    ("tsx_async_abort=off", "tsx_async_abort"),
    ("mmio_stale_data=off", "mmio_stale_data"),
    ("gather_data_sampling=off", "gather_data_sampling"),
    ("spec_rstack_overflow=off", "spec_rstack_overflow"),
    ("tsx=on", "tsx"),
    ("nospectre_v1", "nospectre_v1"),
    ("nospectre_v2", "nospectre_v2"),
    ("nospectre-v2=1", "nospectre_v2"),
    ("nopti", "nopti"),
    ("pti=off", "pti"),
    ("kpti=0", "kpti"),
    ("kpti=off", "kpti"),
    ("ssbd=force-off", "ssbd"),
    ("kvm.nx_huge_pages=off", "kvm.nx_huge_pages"),
    ("kvm-intel.vmentry_l1d_flush=never", "kvm_intel.vmentry_l1d_flush"),
    ("nokaslr", "nokaslr"),
    ("norandmaps", "norandmaps"),
    ("nosmap", "nosmap"),
    ("nosmep", "nosmep"),
    ("nosmapx", "nosmapx"),  # __setup("nosmap") matches by prefix
    ("clearcpuid=smap", "clearcpuid"),
    ("noexec=off", "noexec"),
    ("hardened_usercopy=off", "hardened_usercopy"),
    ("hardened_usercopy=0", "hardened_usercopy"),
    ("init_on_free=0", "init_on_free"),
    ("init_on_alloc=off", "init_on_alloc"),
    ("randomize_kstack_offset=n", "randomize_kstack_offset"),
    # kstrtobool: first characters only
    ("hardened_usercopy=of", "hardened_usercopy"),
    ("hardened_usercopy=disable", "hardened_usercopy"),
    ("hardened_usercopy=False", "hardened_usercopy"),
    # debuggers, init, rescue shells
    ("kgdbwait", "kgdbwait"),
    ("kgdboc=ttyS0,115200", "kgdboc"),
    ("sysrq_always_enabled", "sysrq_always_enabled"),
    ("sysrq-always-enabled", "sysrq_always_enabled"),
    ("init=/bin/sh", "init"),
    ("rdinit=/bin/sh", "rdinit"),
    ("systemd.debug_shell", "systemd.debug_shell"),
    ("systemd.debug-shell=1", "systemd.debug_shell"),
    ("systemd.debug_shell=/dev/tty1", "systemd.debug_shell"),
    ("rd.systemd.debug_shell", "rd.systemd.debug_shell"),
    ("rd.break", "rd.break"),
    ("rd.break=pre-mount", "rd.break"),
    ("rd.shell", "rd.shell"),
    ("emergency", "emergency"),
    ("rescue", "rescue"),
    ("single", "single"),
    ("s", "s"),
    ("S", "S"),
    ("1", "1"),
    ("rd.emergency", "rd.emergency"),
    ("systemd.unit=rescue.target", "systemd.unit"),
    ("systemd.unit=emergency.target", "systemd.unit"),
]

SAFE = [
    "intel_iommu=on",
    "intel-iommu=on",
    "iommu=pt",
    "iommu.passthrough=1",
    "amd_iommu=on",
    "audit=1",
    "audit=on",
    "selinux=1",
    "apparmor=1",
    "enforcing=1",
    "mitigations=auto",
    "mitigations=auto,nosmt",
    "spectre_v2=on",
    "retbleed=auto,nosmt",
    "tsx=off",
    "pti=on",
    "kpti=1",
    "hardened_usercopy=on",
    "init_on_free=1",
    "module.sig_enforce",
    "module.sig_enforce=1",
    "module_blacklist=nouveau",
    "modprobe.blacklist=nouveau",
    "systemd.debug_shell=0",
    "systemd.unit=multi-user.target",
    "initrd=/boot/initrd.img",  # not init=
    "nosmt",
    "hugepages=64",
    "isolcpus=managed_irq,2-7",
    "2",
    "quiet",
]


def profile_text(arg: str, allow: str | None) -> str:
    head = '[profile]\nname = "b"\n'
    if allow is not None:
        head += f"allow_sensitive = [{json.dumps('cmdline:' + allow)}]\n"
    return head + f"[bootloader]\ncmdline = [{json.dumps(arg)}]\n"


@pytest.mark.parametrize(("arg", "flag"), HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_spelling_needs_allow_sensitive(arg: str, flag: str) -> None:
    with pytest.raises(ProfileError) as err:
        parse_profile(profile_text(arg, None), "/etc/mcpnode/profiles/b.toml", "b")
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("/etc/mcpnode/profiles/b.toml: [bootloader] 'cmdline': sensitive: ")
    assert f"allow_sensitive = ['cmdline:{flag}']" in message
    doc = parse_profile(profile_text(arg, flag), "b.toml", "b")
    assert doc.settings[0].key == "bootloader:cmdline"


@pytest.mark.parametrize("arg", SAFE)
def test_safe_arguments_need_no_allow_list(arg: str) -> None:
    assert sc.sensitive(arg) is None, arg
    parse_profile(profile_text(arg, None), "b.toml", "b")


def test_either_spelling_of_a_name_allows_it() -> None:
    """`cmdline:intel-iommu` in the allow-list is the kernel's intel_iommu too."""
    doc = parse_profile(profile_text("intel_iommu=off", "intel-iommu"), "b.toml", "b")
    assert doc.settings[0].key == "bootloader:cmdline"


@pytest.mark.parametrize("arg", ["intel-iommu=off", "selinux=00", "init=/bin/sh"])
def test_apply_refuses_in_one_line_and_writes_nothing(
    tmp_path: Path, tuning_root: Path, arg: str
) -> None:
    root = tuning_root
    (root / "etc/default").mkdir(parents=True, exist_ok=True)
    (root / "etc/default/grub").write_text('GRUB_CMDLINE_LINUX="quiet"\n')
    profiles = write_profiles(tmp_path / "profiles", {"b": profile_text(arg, None)})
    before = tree(tmp_path)
    code, out, err = run_cli(
        "apply", "--profile", "b", "--root", str(root), "--profiles-dir", str(profiles)
    )
    assert (code, out) == (2, "")
    (line,) = err.splitlines()
    assert str(profiles / "b.toml") in line and "'cmdline'" in line and "sensitive" in line
    assert tree(tmp_path) == before


# -- the parsers, against what the kernel's own do -------------------------------------------


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("y", True), ("Y", True), ("1", True), ("t", True), ("enable", True), ("on", True),
        ("ON", True), ("n", False), ("N", False), ("0", False), ("00", False), ("0x1", False),
        ("f", False), ("disable", False), ("off", False), ("of", False), ("oF", False),
        ("o", None), ("ox", None), ("", None), (None, None), ("2", None), ("-1", None),
    ],
)  # fmt: skip
def test_kstrtobool_reads_the_first_characters(text: str | None, want: bool | None) -> None:
    assert sc.kstrtobool(text) is want


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("0", 0), ("00", 0), ("+0", 0), ("0x0", 0), ("0X0", 0), ("010", 8), ("0x1f", 31),
        ("10", 10), ("1\n", 1), ("08", None), ("0x", None), ("", None), ("-1", None),
        ("1 ", None), ("one", None), (None, None), ("0x" + "f" * 17, None),
    ],
)  # fmt: skip
def test_kstrtoul_base_zero(text: str | None, want: int | None) -> None:
    assert sc.kstrtoul0(text) == want


def test_comma_items_skip_empty_ones() -> None:
    assert sc.items(",,pt,,off,") == ("pt", "off")
    assert sc.items(None) == ()
