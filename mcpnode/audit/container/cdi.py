"""Checks on CDI specs and on the /dev/char links the legacy hook needs. Pure.

"Newer than the driver": Host exposes no file times (and a snapshot keeps none), so a spec's
age is judged by what it names instead. `nvidia-ctk cdi generate` mounts the driver's versioned
libraries (`libcuda.so.550.54.15`, `libnvidia-ml.so.550.54.15`) by their full names; a spec
that names another version than the loaded driver was generated before the driver changed, and
containers using it get bind mounts of files that no longer exist. That is exact where mtime
would only be a hint (a spec copied or touched after an upgrade looks new and is still wrong).
"""

from __future__ import annotations

from mcpnode.audit.container.config import CdiSpec
from mcpnode.audit.container.facts import DEV_CHAR, ContainerFacts, Parsed
from mcpnode.audit.container.toolkit import Tools, effective_mode
from mcpnode.audit.context import AuditContext
from mcpnode.audit.facts import clip, file_evidence, unreadable_finding
from mcpnode.audit.model import Evidence, Finding, Status

GPU_KIND = "nvidia.com/gpu"
NVIDIA_VENDOR = "nvidia.com/"
GENERATE = (
    "`nvidia-ctk cdi generate --output=/var/run/cdi/nvidia.yaml` (from toolkit 1.18 the "
    "nvidia-cdi-refresh.path unit regenerates it on driver and toolkit changes; it does not "
    "follow MIG changes or driver removal)"
)
DEV_CHAR_REMEDY = (
    "`nvidia-ctk system create-dev-char-symlinks --create-all`, kept across reboots by the udev "
    'rule /lib/udev/rules.d/71-nvidia-dev-char.rules: `ACTION=="add", '
    'DEVPATH=="/bus/pci/drivers/nvidia", RUN+="/usr/bin/nvidia-ctk system '
    'create-dev-char-symlinks --create-all"`; better, move to CDI (toolkit mode cdi or jit-cdi), '
    "which puts the device nodes in the OCI spec"
)


def check(facts: ContainerFacts, ctx: AuditContext, tools: Tools) -> list[Finding]:
    out: list[Finding] = []
    if tools.installed or facts.cdi:
        out.append(_present(facts, tools))
    for parsed in facts.cdi:
        out.append(_spec(parsed, ctx))
    for parsed in facts.cdi:
        spec = parsed.value
        if spec is not None and spec.kind == GPU_KIND:
            out.append(_devices(parsed.path, spec, ctx))
            out.append(_driver(parsed.path, spec, ctx))
    if tools.installed:
        out.append(_devchar(facts, ctx, tools))
    return out


def _gpu_specs(facts: ContainerFacts) -> list[Parsed[CdiSpec]]:
    return [p for p in facts.cdi if p.value is not None and p.value.kind == GPU_KIND]


def _present(facts: ContainerFacts, tools: Tools) -> Finding:
    fid = "container.cdi.present"
    mode, why = effective_mode(facts, tools)
    ev = [
        Evidence(d, f"{sum(1 for p in facts.cdi if p.path.startswith(d + '/'))} spec files")
        if listed
        else Evidence(d, "absent")
        for d, listed in facts.cdi_dirs
    ]
    ev.append(Evidence("effective mode", f"{mode} ({why})"))
    specs = _gpu_specs(facts)
    if specs:
        paths = ", ".join(p.path for p in specs)
        return Finding(fid, Status.PASS, f"CDI spec for {GPU_KIND}: {paths}", tuple(ev))
    if mode == "cdi":
        return Finding(
            fid,
            Status.FAIL,
            f"toolkit mode cdi but no usable {GPU_KIND} CDI spec: GPU containers fail to start",
            tuple(ev),
            GENERATE,
        )
    if mode == "legacy":
        return Finding(
            fid, Status.SKIP, f"no {GPU_KIND} CDI spec; the toolkit runs in legacy mode", tuple(ev)
        )
    if mode == "unknown":
        return Finding(
            fid,
            Status.SKIP,
            f"no {GPU_KIND} CDI spec; whether one is needed depends on the toolkit mode, "
            f"unknown here ({why})",
            tuple(ev),
        )
    return Finding(
        fid,
        Status.INFO,
        f"no {GPU_KIND} CDI spec: `--runtime=nvidia` needs none in mode {mode}, but native CDI "
        "requests (`--device nvidia.com/gpu=all`, CDI in Kubernetes) do",
        tuple(ev),
        GENERATE,
    )


def _spec(parsed: Parsed[CdiSpec], ctx: AuditContext) -> Finding:
    fid = "container.cdi.spec"
    read = parsed.read
    path = parsed.path
    if read.denied or read.error is not None:
        return unreadable_finding(fid, read, ctx.is_root, "CDI spec", path)
    if parsed.error is not None:
        ev = (file_evidence(read),)
        if parsed.unsupported:
            return Finding(
                fid,
                Status.WARN,
                f"{path} not checked: {parsed.error}",
                ev,
                "Check it with `nvidia-ctk cdi list`; mcpnode refuses YAML nested deeper or "
                "with more aliases than any generated spec has (mcpnode/codec/yaml_bounded.py)",
                path,
            )
        return Finding(
            fid,
            Status.FAIL,
            f"{path} is not a usable CDI spec: {parsed.error} (the CDI registry refuses it, "
            "so none of its devices can be injected)",
            ev,
            f"Regenerate it ({GENERATE}) or remove it; `nvidia-ctk cdi list` shows what the "
            "registry accepts",
            path,
        )
    spec = parsed.value
    assert spec is not None
    return Finding(
        fid,
        Status.PASS,
        f"{path}: cdiVersion {spec.cdi_version}, kind {spec.kind}, "
        f"{len(spec.device_names)} device names",
        (file_evidence(read, clip("devices: " + ", ".join(spec.device_names))),),
        None,
        path,
    )


def _expected_gpus(ctx: AuditContext) -> tuple[int, str]:
    if ctx.gpu_count_nvml is not None:
        return ctx.gpu_count_nvml, "NVML"
    return ctx.gpu_count_sysfs, "PCI (sysfs)"


def _devices(path: str, spec: CdiSpec, ctx: AuditContext) -> Finding:
    fid = "container.cdi.devices"
    expected, source = _expected_gpus(ctx)
    ev = (
        Evidence(path, clip("devices: " + ", ".join(spec.device_names))),
        Evidence(f"GPUs ({source})", str(expected)),
    )
    if spec.gpu_count == expected:
        return Finding(fid, Status.PASS, f"{path} describes all {expected} GPUs", ev, None, path)
    return Finding(
        fid,
        Status.FAIL,
        f"{path} describes {_gpus(spec.gpu_count)}, the host has {expected}: a stale spec (GPUs "
        "added, removed or failed since it was generated); containers asking for the missing "
        "ones fail",
        ev,
        f"Regenerate: {GENERATE}",
        path,
    )


def _gpus(n: int) -> str:
    return f"{n} GPU" if n == 1 else f"{n} GPUs"


def _driver(path: str, spec: CdiSpec, ctx: AuditContext) -> Finding:
    fid = "container.cdi.driver"
    driver = ctx.driver_version
    if driver is None:
        return Finding(
            fid, Status.SKIP, "driver version unknown: CDI spec age not checked", (), None, path
        )
    ev = (
        Evidence(path, "driver libraries: " + (", ".join(spec.driver_versions) or "none named")),
        Evidence("loaded driver", driver),
    )
    if not spec.driver_versions:
        return Finding(
            fid,
            Status.SKIP,
            f"{path} names no versioned driver library (libcuda.so.X): age not checked",
            ev,
            None,
            path,
        )
    if driver in spec.driver_versions:
        return Finding(
            fid, Status.PASS, f"{path} was generated for driver {driver}", ev, None, path
        )
    return Finding(
        fid,
        Status.FAIL,
        f"{path} was generated for driver {', '.join(spec.driver_versions)}, the loaded driver "
        f"is {driver}: containers would mount libraries that are gone",
        ev,
        f"Regenerate: {GENERATE}",
        path,
    )


def _devchar(facts: ContainerFacts, ctx: AuditContext, tools: Tools) -> Finding:
    fid = "container.devchar.symlinks"
    mode, why = effective_mode(facts, tools)
    mode_ev = Evidence("effective mode", f"{mode} ({why})")
    if mode not in ("legacy", "auto", "unknown"):
        return Finding(
            fid,
            Status.SKIP,
            f"toolkit mode {mode}: device nodes come from the OCI spec, not the legacy hook",
            (mode_ev,),
        )
    nodes = facts.dev_nodes
    if nodes is None:
        return Finding(
            fid,
            Status.SKIP,
            "no /dev under this root (a recorded snapshot): not checked",
            (mode_ev,),
        )
    if not nodes:
        return Finding(
            fid,
            Status.SKIP,
            "no /dev/nvidia* device nodes (driver not loaded, or nodes not created yet)",
            (mode_ev,),
        )
    linked = facts.dev_char or frozenset()
    missing = [n for n in nodes if n not in linked]
    if not missing:
        return Finding(
            fid,
            Status.PASS,
            f"all {len(nodes)} NVIDIA device nodes have a {DEV_CHAR} link",
            (mode_ev, Evidence(DEV_CHAR, clip(", ".join(nodes)))),
        )
    n_links = 0 if facts.dev_char is None else len(facts.dev_char)
    have = "absent" if facts.dev_char is None else f"{n_links} link{'' if n_links == 1 else 's'}"
    ev = (
        mode_ev,
        Evidence(DEV_CHAR, have),
        Evidence("nodes without a link", clip(", ".join(missing))),
        Evidence("cgroup mode", ctx.cgroup_mode),
    )
    # On cgroup v2, docker (20.10+) and the kubelet default to the systemd cgroup driver, the
    # setup in which daemon-reload re-applies device rules without these nodes
    # (NVIDIA/nvidia-container-toolkit#48); elsewhere it needs that driver chosen explicitly.
    status = Status.FAIL if ctx.cgroup_mode == "v2" else Status.WARN
    return Finding(
        fid,
        status,
        f"{len(missing)} of {len(nodes)} NVIDIA device nodes lack a {DEV_CHAR}/MAJ:MIN link: "
        'containers lose the GPU ("Failed to initialize NVML: Unknown Error") after '
        "`systemctl daemon-reload`",
        ev,
        DEV_CHAR_REMEDY,
    )
