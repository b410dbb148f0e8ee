"""Bare metal or a virtual machine, and which hypervisor: what `profiles recommend` needs and
cpufreq/cpuidle's absence hints at. The rules, in the order tried (systemd-detect-virt's DMI
table, src/basic/virt.c, is the peer):

1. DMI `sys_vendor`, `product_name` and `bios_vendor` naming a hypervisor's virtual hardware
   (QEMU, KVM, VMware, Hyper-V's "Microsoft Corporation" + "Virtual Machine", Xen, Amazon EC2
   Nitro guests, Google Compute Engine, VirtualBox, Parallels, bhyve, OpenStack Nova);
2. /sys/hypervisor/type (Xen guests);
3. the `hypervisor` CPU flag in /proc/cpuinfo (CPUID leaf 1 ECX bit 31: set by every x86
   hypervisor for its guests), which says "a VM" without saying whose.
Without any of these readable the answer is unknown (None), never "bare metal".
"""

from __future__ import annotations

from dataclasses import dataclass

from mcpnode.errors import HostError
from mcpnode.topology.sysfs import PROC_CPUINFO, SYS_DMI_ID, SYS_HYPERVISOR_TYPE

# (field, text it contains, hypervisor): first match wins.
_DMI = (
    ("sys_vendor", "QEMU", "qemu"),
    ("product_name", "KVM", "kvm"),
    ("sys_vendor", "Amazon EC2", "amazon"),
    ("bios_vendor", "Amazon EC2", "amazon"),
    ("sys_vendor", "Google", "google"),
    ("product_name", "Google Compute Engine", "google"),
    ("sys_vendor", "VMware", "vmware"),
    ("product_name", "VMware", "vmware"),
    ("sys_vendor", "innotek GmbH", "oracle"),
    ("product_name", "VirtualBox", "oracle"),
    ("sys_vendor", "Xen", "xen"),
    ("sys_vendor", "Parallels", "parallels"),
    ("bios_vendor", "BHYVE", "bhyve"),
    ("product_name", "OpenStack", "openstack"),
    ("bios_vendor", "SeaBIOS", "qemu"),
)

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (codec/typenames.py)
if TYPE_CHECKING:
    from mcpnode.host import HostReader

# ~1.5 KiB per CPU: 4 MiB holds 2,000 CPUs; a larger (or hostile) file is not read at all.
_CPUINFO_LIMIT = 4 << 20


@dataclass(frozen=True)
class Virtualization:
    """`virtual`: True in a guest, False on bare metal, None when nothing said; `hypervisor`:
    its name when known (`kvm`, `microsoft`...); `evidence`: what decided, for people."""

    virtual: bool | None
    hypervisor: str | None
    evidence: str


def _read(host: HostReader, path: str, limit: int = 256) -> str | None:
    try:
        text = host.read_optional(path, limit=limit)
    except HostError:
        return None
    return text.strip() if text is not None else None


def _first_block(host: HostReader) -> str | None:
    """The first processor's block of /proc/cpuinfo (every CPU has the same flags)."""
    text = _read(host, PROC_CPUINFO, _CPUINFO_LIMIT)
    return text.split("\n\n", 1)[0] if text is not None else None


def detect(host: HostReader) -> Virtualization:
    """Read the DMI strings, the hypervisor type and the CPU flags through `host`."""
    fields = ("sys_vendor", "product_name", "bios_vendor")
    dmi = {f: _read(host, f"{SYS_DMI_ID}/{f}") for f in fields}
    if dmi["sys_vendor"] == "Microsoft Corporation" and dmi["product_name"] == "Virtual Machine":
        return Virtualization(True, "microsoft", "DMI: Microsoft Corporation Virtual Machine")
    for field, text, name in _DMI:
        value = dmi.get(field)
        if value is not None and text in value:
            return Virtualization(True, name, f"DMI {field}: {value}")
    xen = _read(host, SYS_HYPERVISOR_TYPE)
    if xen:
        return Virtualization(True, xen, f"{SYS_HYPERVISOR_TYPE}: {xen}")
    block = _first_block(host)
    if block is not None:
        for line in block.splitlines():
            name, _, flags = line.partition(":")
            if name.strip() == "flags":
                if "hypervisor" in flags.split():
                    return Virtualization(True, None, "the CPU's hypervisor flag (/proc/cpuinfo)")
                return Virtualization(False, None, "no hypervisor flag in /proc/cpuinfo")
    if dmi["sys_vendor"]:
        vendor = f"{dmi['sys_vendor']} {dmi['product_name'] or ''}".strip()
        return Virtualization(False, None, f"DMI names physical hardware: {vendor}")
    return Virtualization(None, None, "no DMI strings and no /proc/cpuinfo to tell")
