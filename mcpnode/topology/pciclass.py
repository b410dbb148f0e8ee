"""PCI class codes as the names lspci prints (the pci.ids database, `C` lines), for the tree and
JSON: `0302` reads "3D controller", `0207` "Infiniband controller". Pure data; a subclass not
listed takes its base class's name, an unknown base class None (never a guess)."""

from __future__ import annotations

# (base << 8 | sub) -> name, for the subclasses GPU hosts carry
SUBCLASSES = {
    0x0000: "Non-VGA unclassified device",
    0x0100: "SCSI storage controller",
    0x0101: "IDE interface",
    0x0104: "RAID bus controller",
    0x0106: "SATA controller",
    0x0107: "Serial Attached SCSI controller",
    0x0108: "Non-Volatile memory controller",
    0x0200: "Ethernet controller",
    0x0207: "Infiniband controller",
    0x0280: "Network controller",
    0x0300: "VGA compatible controller",
    0x0302: "3D controller",
    0x0403: "Audio device",
    0x0500: "RAM memory",
    0x0600: "Host bridge",
    0x0601: "ISA bridge",
    0x0604: "PCI bridge",
    0x0680: "Bridge",
    0x0700: "Serial controller",
    0x0805: "SD Host controller",
    0x0806: "IOMMU",
    0x0880: "System peripheral",
    0x0B40: "Co-processor",
    0x0C03: "USB controller",
    0x0C05: "SMBus",
    0x0C06: "InfiniBand",
    0x1200: "Processing accelerators",
    0x1300: "Non-Essential Instrumentation",
}
# base class -> name, for the subclasses above does not list
BASES = {
    0x00: "Unclassified device",
    0x01: "Mass storage controller",
    0x02: "Network controller",
    0x03: "Display controller",
    0x04: "Multimedia controller",
    0x05: "Memory controller",
    0x06: "Bridge",
    0x07: "Communication controller",
    0x08: "Generic system peripheral",
    0x09: "Input device controller",
    0x0A: "Docking station",
    0x0B: "Processor",
    0x0C: "Serial bus controller",
    0x0D: "Wireless controller",
    0x0E: "Intelligent controller",
    0x0F: "Satellite communications controller",
    0x10: "Encryption controller",
    0x11: "Signal processing controller",
    0x12: "Processing accelerators",
    0x13: "Non-Essential Instrumentation",
    0x40: "Coprocessor",
}


def class_name(class_code: int | None) -> str | None:
    """lspci's name for a 16-bit base+sub class code, None when it is unknown."""
    if class_code is None:
        return None
    return SUBCLASSES.get(class_code) or BASES.get(class_code >> 8)
