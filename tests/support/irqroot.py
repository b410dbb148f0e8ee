"""Interrupt layouts on a temporary copy of a committed host fixture, as on a real HGX node.

The committed trees are never modified (tools/fixturegen/fixturegen.py owns them): `build()` copies
one and lays over it what `[irq]` reads and writes, from the devices discovery finds in it:

* `/proc/interrupts` with one column per online CPU and, per device, the interrupts its driver
  requests (Linux 6.x names): for each ConnectX function `mlx5_async@pci:ADDR` and one
  completion vector per CPU of its node up to 16 (`mlx5_compN@pci:ADDR`, mlx5 spreads them
  one per CPU of the local node, which lands them inside the GPU slices); for each GPU one
  `nvidia`; for each NVMe controller `nvme0q0` (admin queue) and 8 I/O queues `nvme0qN`, which
  the kernel manages (their affinity is not the user's: EIO on write, see MANAGED); the legacy
  `timer`, `acpi`, `rtc0` and the `i8042` pair;
* `/proc/irq/N/{smp_affinity_list,effective_affinity_list,node}` for each, and
  `/proc/irq/default_smp_affinity`;
* `/etc/default/irqbalance` as Debian's irqbalance 1.9.2 package ships it (comments, one
  `#IRQBALANCE_ONESHOT=` style assignment commented out);
* `queues/rx-0..3/rps_cpus` (RPS off: all-zero words, one per 32 CPUs) for each interface
  backed by a device;
* the freshness facts of a live kernel (boot id, uevent seqnum), so a published manifest is
  current.

A plain copy cannot refuse a write; tests that need the kernel's EIO for a managed interrupt
bind-mount a file that really answers EIO over its affinity file (test_irq_managed.py)."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from mcpnode.host import Host
from mcpnode.topology.discover import discover_host
from mcpnode.topology.model import CpuSet

TESTS = Path(__file__).resolve().parents[1]
HOSTS = TESTS / "fixtures" / "hosts"
HGX = "hgx-h100-8gpu-8nic"

IRQBALANCE_DEBIAN = """\
# irqbalance is a daemon process that distributes interrupts across
# CPUs on SMP systems.  The default is to rebalance once every 10
# seconds.  This is the environment file that is specified to systemd via the
# EnvironmentFile key in the service unit file (or via whatever method the init
# system you're using has).
#
# IRQBALANCE_ONESHOT
#    After starting, wait for ten seconds, then look at the interrupt
#    load and balance it once; after balancing exit and do not change
#    it again.
#
#IRQBALANCE_ONESHOT=

#
# IRQBALANCE_BANNED_CPULIST
#    The CPUs list which allows you to indicate which CPUs should
#    be skipped when reblancing IRQs. CPU numbers in this list will
#    not have any IRQs assigned to them on rebalance.
#
#    The format of this list is the same as the kernel cpulist format.
#
#IRQBALANCE_BANNED_CPULIST=

#
# IRQBALANCE_ARGS
#    Append any args here to the irqbalance daemon as documented in the man
#    page.
#
#IRQBALANCE_ARGS=
"""


@dataclass(frozen=True)
class Irq:
    number: int
    chip: str
    name: str
    node: int  # -1: no device node
    affinity: str  # smp_affinity_list as the kernel prints it
    managed: bool = False


@dataclass(frozen=True)
class IrqRoot:
    root: Path
    irqs: tuple[Irq, ...]
    cpus: CpuSet

    def affinity(self, number: int) -> str:
        return (self.root / f"proc/irq/{number}/smp_affinity_list").read_text().strip()


def layout(src: Path) -> tuple[tuple[Irq, ...], CpuSet]:
    """The interrupts a real node with the devices of fixture `src` has (module docstring)."""
    topo = discover_host(Host(src))
    online = CpuSet(topo.cpus.online)
    every = online.cpulist()
    node_cpus = {n.id: sorted(n.cpus & online) for n in topo.numa_nodes}
    irqs = [
        Irq(0, "IO-APIC", "timer", -1, every),
        Irq(1, "IO-APIC", "i8042", -1, every),
        Irq(8, "IO-APIC", "rtc0", -1, every),
        Irq(9, "IO-APIC", "acpi", -1, every),
        Irq(12, "IO-APIC", "i8042", -1, every),
    ]
    number = 100
    for nic in topo.nics:
        if nic.driver != "mlx5_core":
            continue
        node = nic.numa_node if nic.numa_node is not None else -1
        local = node_cpus.get(node, sorted(online))
        chip = f"PCI-MSIX-{nic.address}"
        irqs.append(Irq(number, chip, f"mlx5_async@pci:{nic.address}", node, every))
        number += 1
        for i, cpu in enumerate(local[:16]):
            irqs.append(Irq(number, chip, f"mlx5_comp{i}@pci:{nic.address}", node, str(cpu)))
            number += 1
    for gpu in topo.gpus:
        node = gpu.numa_node if gpu.numa_node is not None else -1
        irqs.append(Irq(number, f"PCI-MSI-{gpu.address}", "nvidia", node, every))
        number += 1
    for k, nvme in enumerate(topo.nvmes):
        node = nvme.numa_node if nvme.numa_node is not None else -1
        chip = f"PCI-MSIX-{nvme.address}"
        irqs.append(Irq(number, chip, f"nvme{k}q0", node, every))
        number += 1
        # The kernel spreads managed queue vectors over every CPU: 192 CPUs / 8 queues.
        cpus = sorted(online)
        step = max(1, len(cpus) // 8)
        for q in range(8):
            mine = CpuSet(cpus[q * step : (q + 1) * step])
            irqs.append(Irq(number, chip, f"nvme{k}q{q + 1}", node, mine.cpulist(), True))
            number += 1
    return tuple(irqs), online


def interrupts_text(irqs: tuple[Irq, ...], online: CpuSet) -> str:
    cpus = sorted(online)
    head = "     " + "".join(f"{'CPU' + str(c):>11}" for c in cpus)
    lines = [head]
    for irq in irqs:
        counts = "".join(f"{0:>11}" for _ in cpus)
        lines.append(f"{irq.number:>4}:{counts}  {irq.chip}   {irq.name}")
    lines.append(" NMI:" + "".join(f"{0:>11}" for _ in cpus) + "   Non-maskable interrupts")
    lines.append(" LOC:" + "".join(f"{0:>11}" for _ in cpus) + "   Local timer interrupts")
    return "\n".join(lines) + "\n"


def build(dest: Path, name: str = HGX, *, irqbalance: str | None = "debian") -> IrqRoot:
    """Copy fixture `name` to `dest` and lay the interrupts, irqbalance's file (`debian`,
    `redhat` or None: not installed) and the freshness facts over it."""
    src = HOSTS / name
    shutil.copytree(src, dest, symlinks=True)
    irqs, online = layout(src)
    put(dest, "proc/interrupts", interrupts_text(irqs, online))
    put(dest, "proc/irq/default_smp_affinity", "ff" * (len(online) // 8 or 1) + "\n")
    for irq in irqs:
        base = f"proc/irq/{irq.number}"
        put(dest, f"{base}/smp_affinity_list", irq.affinity + "\n")
        put(dest, f"{base}/effective_affinity_list", irq.affinity.split("-")[0].split(",")[0])
        put(dest, f"{base}/node", f"{irq.node}\n")
    if irqbalance == "debian":
        put(dest, "etc/default/irqbalance", IRQBALANCE_DEBIAN)
    elif irqbalance == "redhat":
        put(dest, "etc/sysconfig/irqbalance", IRQBALANCE_DEBIAN)
    off = ",".join(["00000000"] * (max(online) // 32 + 1))
    net = dest / "sys/class/net"
    for link in sorted(net.iterdir()) if net.is_dir() else []:
        if not (link / "device").exists():
            continue  # lo and other virtual interfaces: no queues to steer
        for q in range(4):
            rx = link.resolve() / "queues" / f"rx-{q}"
            rx.mkdir(parents=True, exist_ok=True)
            (rx / "rps_cpus").write_text(off + "\n")
    put(dest, "proc/sys/kernel/random/boot_id", "9a3e1f7c-5b2d-4c8e-a1f0-2d6b7c8e9f01\n")
    put(dest, "sys/kernel/uevent_seqnum", "20417\n")
    return IrqRoot(dest, irqs, online)


def put(root: Path, rel: str, text: str) -> None:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
