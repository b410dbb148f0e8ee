"""cgroup drivers of the container stack: docker, containerd, CRI-O and the kubelet must agree.

Kubernetes ("Configuring a cgroup driver", kubernetes.io/docs/tasks/administer-cluster/
kubeadm/configure-cgroup-driver): the kubelet and the container runtime must use the same
driver, `systemd` or `cgroupfs`; with two managers the node's resource view splits and pods
are killed or throttled under pressure. On cgroup v2 `systemd` is the recommended driver.

Where each one is configured (the defaults apply when nothing says otherwise):
- docker: live, `docker info --format '{{json .}}'` (CgroupDriver, CgroupVersion); else
  daemon.json `exec-opts: ["native.cgroupdriver=..."]`; default systemd on cgroup v2 (docker
  >= 20.10), cgroupfs on v1;
- containerd: the default runtime's `options.SystemdCgroup` (config v2/v3) or the CRI
  plugin's `systemd_cgroup` (v1); default cgroupfs;
- CRI-O: `crio.runtime.cgroup_manager`; default systemd;
- kubelet: `cgroupDriver` in /var/lib/kubelet/config.yaml; default cgroupfs (kubeadm writes
  systemd since v1.22).
Pure; container.py collects.
"""

from __future__ import annotations

import json
import re

from mcpnode.audit.container.facts import KUBELET_CONFIG, ContainerFacts
from mcpnode.audit.context import AuditContext
from mcpnode.audit.facts import command_evidence, file_evidence
from mcpnode.audit.model import Evidence, Finding, Status

_KUBELET_DRIVER = re.compile(r"^cgroupDriver:\s*['\"]?(\w+)['\"]?\s*(#.*)?$", re.MULTILINE)


def docker_info(facts: ContainerFacts) -> dict[str, object] | None:
    """The JSON `docker info` printed (live or replayed), None when it did not run."""
    r = facts.docker_info
    if r is None or not r.found or r.returncode != 0:
        return None
    try:
        doc = json.loads(r.stdout)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def drivers(facts: ContainerFacts, ctx: AuditContext) -> list[tuple[str, str, str]]:
    """(component, driver, where it came from) for each component configured here."""
    out: list[tuple[str, str, str]] = []
    info = docker_info(facts)
    if info is not None and isinstance(info.get("CgroupDriver"), str):
        version = info.get("CgroupVersion", "?")
        out.append(("docker", str(info["CgroupDriver"]), f"docker info (cgroup v{version})"))
    elif facts.docker.value is not None:
        cfg = facts.docker.value
        if cfg.cgroup_driver:
            out.append(("docker", cfg.cgroup_driver, "daemon.json exec-opts"))
        else:
            default = "systemd" if ctx.cgroup_mode == "v2" else "cgroupfs"
            out.append(("docker", default, f"docker's default on cgroup {ctx.cgroup_mode}"))
    loaded = [f.parsed for f in facts.containerd if f.loaded and f.parsed.value is not None]
    if loaded:
        systemd = None
        for parsed in loaded:
            assert parsed.value is not None
            if parsed.value.systemd_cgroup is not None:
                systemd = parsed.value.systemd_cgroup
        if systemd is None:
            out.append(("containerd", "cgroupfs", "containerd's default (SystemdCgroup unset)"))
        else:
            value = "systemd" if systemd else "cgroupfs"
            out.append(("containerd", value, f"SystemdCgroup = {str(systemd).lower()}"))
    crio = [f.parsed.value for f in facts.crio if f.loaded and f.parsed.value is not None]
    if crio:
        manager = None
        for c in crio:
            manager = c.cgroup_manager or manager
        out.append(("crio", manager or "systemd", "cgroup_manager" if manager else "default"))
    kubelet = facts.kubelet
    if kubelet is not None and kubelet.text is not None:
        m = _KUBELET_DRIVER.search(kubelet.text)
        value = m.group(1) if m else "cgroupfs"
        out.append(("kubelet", value, f"{KUBELET_CONFIG} cgroupDriver" if m else "default"))
    return out


def check(facts: ContainerFacts, ctx: AuditContext) -> Finding:
    fid = "container.cgroup.driver"
    found = drivers(facts, ctx)
    ev: list[Evidence] = [Evidence(f"{c} cgroup driver", f"{d} ({w})") for c, d, w in found]
    if facts.docker_info is not None and facts.docker_info.found:
        ev.append(command_evidence(facts.docker_info, "ran" if docker_info(facts) else None))
    if facts.kubelet is not None and not facts.kubelet.missing:
        ev.append(file_evidence(facts.kubelet))
    if not found:
        broken = facts.docker.error is not None
        return Finding(
            fid,
            Status.SKIP,
            "cgroup drivers not checked: "
            + (
                f"{facts.docker.read.path} does not parse (container.runtime.docker)"
                if broken
                else "no container engine or kubelet configured here"
            ),
            tuple(ev) or (Evidence("docker, containerd, CRI-O, kubelet", "not configured"),),
        )
    listed = ", ".join(f"{c} {d}" for c, d, _ in found)
    kubelet = next((d for c, d, _ in found if c == "kubelet"), None)
    if kubelet is not None:
        runtimes = [(c, d) for c, d, _ in found if c in ("containerd", "crio", "docker")]
        wrong = [f"{c} {d}" for c, d in runtimes if d != kubelet]
        if wrong:
            return Finding(
                fid,
                Status.FAIL,
                f"cgroup drivers disagree: kubelet {kubelet}, {', '.join(wrong)}: two managers "
                "of one cgroup tree (pods throttled or killed under pressure)",
                tuple(ev),
                "Use systemd everywhere: containerd `SystemdCgroup = true` under the runc "
                'runtime\'s options, docker `"exec-opts": ["native.cgroupdriver=systemd"]`, '
                "kubelet `cgroupDriver: systemd`; restart the runtime, then the kubelet",
            )
    if ctx.cgroup_mode == "v2" and any(d == "cgroupfs" for _, d, _ in found):
        return Finding(
            fid,
            Status.WARN,
            f"cgroupfs driver on a cgroup v2 host ({listed}): systemd is the recommended "
            "driver there",
            tuple(ev),
            "Switch to the systemd driver (containerd SystemdCgroup = true, docker "
            "native.cgroupdriver=systemd)",
        )
    return Finding(fid, Status.PASS, f"cgroup drivers agree ({listed})", tuple(ev))
