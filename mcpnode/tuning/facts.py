"""What `mcpnode profiles explain KEY` knows about a key beyond the profiles' own comments.

Kernel defaults and scopes are the upstream kernel's (Documentation/admin-guide/sysctl/,
Documentation/networking/ip-sysctl.rst) as observed on 6.18 unless stated, the per-netns ones
with `unshare -n` (docs/tuning.md); they are hints for people, never used to decide a write.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KeyFacts:
    default: str | None  # kernel default, as observed
    note: str  # why people tune it, with the source


FACTS: dict[str, KeyFacts] = {
    "vm.swappiness": KeyFacts("60", "tuned throughput/latency profiles use 10, NVIDIA's 1"),
    "vm.max_map_count": KeyFacts(
        "65530",
        "distros now ship 1048576 (Fedora 39+, Arch, Ubuntu 24.04 via systemd 255): only ever "
        "raise it (min), lowering breaks verify and workloads",
    ),
    "kernel.numa_balancing": KeyFacts(
        "1 on NUMA hosts",
        "CUDA Best Practices: GPU applications should disable automatic NUMA balancing",
    ),
    "kernel.io_uring_disabled": KeyFacts(
        "0 (RHEL 9 ships io_uring disabled)",
        "since Linux 6.6; 0 all, 1 only io_uring_group/CAP_SYS_ADMIN, 2 nobody. There is no "
        "kernel.io_uring_enable",
    ),
    "net.core.somaxconn": KeyFacts(
        "4096 (128 before 5.4)", "listen() silently truncates the backlog to it, per netns"
    ),
    "net.ipv4.tcp_congestion_control": KeyFacts(
        "cubic",
        "bbr (tcp_bbr, upstream since 4.9) with net.core.default_qdisc=fq; a new netns "
        "inherits the host's value at creation",
    ),
    "net.core.default_qdisc": KeyFacts(
        "pfifo_fast / fq_codel (distro)",
        "fq paces BBR; only affects qdiscs created after the change",
    ),
    "net.ipv4.tcp_notsent_lowat": KeyFacts(
        "4294967295", "131072 in tuned network-throughput: bounds unsent data per socket"
    ),
    "net.ipv4.tcp_rmem": KeyFacts("4096 131072 33554432", "min default max, bytes"),
    "net.ipv4.tcp_wmem": KeyFacts("4096 16384 4194304", "min default max, bytes"),
    "net.ipv4.tcp_slow_start_after_idle": KeyFacts("1", "0 keeps cwnd across idle periods"),
    "net.ipv4.ip_local_port_range": KeyFacts(
        "32768 60999", "widen for many outbound connections; Kubernetes-safe sysctl"
    ),
    "net.core.rmem_max": KeyFacts("4194304 (212992 on older kernels)", "socket buffer cap"),
    "net.core.wmem_max": KeyFacts("4194304 (212992 on older kernels)", "socket buffer cap"),
    "net.core.netdev_max_backlog": KeyFacts("1000", "NVIDIA's profiles use 10000"),
    "net.ipv4.tcp_max_syn_backlog": KeyFacts("2048", "NVIDIA's profiles use 8192"),
    "net.ipv4.tcp_fastopen": KeyFacts("1", "3 enables client and server"),
    "net.core.busy_read": KeyFacts("0", "50 in tuned network-latency; burns CPU"),
    "net.core.busy_poll": KeyFacts("0", "50 in tuned network-latency; burns CPU"),
}

# net.* sysctls that exist only in the initial network namespace (absent in a child netns),
# and those visible but read-only there (they mirror init_net): observed on 6.18 with
# `unshare -n` (docs/tuning.md, network namespaces).
NET_GLOBAL_PREFIXES = (
    "net.core.default_qdisc",
    "net.core.netdev_max_backlog",
    "net.core.busy_poll",
    "net.core.busy_read",
    "net.core.bpf_jit_",
    "net.core.netdev_budget",
)
NET_READONLY_IN_CHILD = (
    "net.core.rmem_max",
    "net.core.wmem_max",
    "net.core.rmem_default",
    "net.core.wmem_default",
    "net.core.optmem_max",
)
# Per-netns keys that a new netns copies from the host at creation instead of taking the
# kernel default.
NET_INHERITED = ("net.ipv4.tcp_congestion_control", "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem")


def netns_note(key: str) -> str | None:
    """What host tuning of a net.* key means for containers in their own network namespace."""
    if not key.startswith("net."):
        return None
    if key.startswith(NET_GLOBAL_PREFIXES):
        return (
            "global: exists only in the initial network namespace, so it applies to every "
            "netns (pods included)"
        )
    if key in NET_READONLY_IN_CHILD:
        return "global: read-only inside other network namespaces, which see the host's value"
    base = (
        "per network namespace: host tuning does not reach pods or containers in their own "
        "netns (Kubernetes: securityContext.sysctls; the agent must run in the host netns)"
    )
    if key in NET_INHERITED:
        return base + "; a new netns copies the host's value when it is created"
    return base + "; a new netns starts from the kernel default"
