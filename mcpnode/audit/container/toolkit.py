"""Checks on the NVIDIA Container Toolkit itself: installed, versions against the CVE table,
components that agree with each other, cgroup v2 support, and the runtime mode. Pure."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from mcpnode.audit.container.config import TOOLKIT_MODES
from mcpnode.audit.container.facts import TOOLKIT_CONFIG, ContainerFacts
from mcpnode.audit.container.version import (
    AUTO_IS_CDI_SINCE,
    CGROUP_V2_MINIMUM,
    CRITICAL_BELOW,
    EXACT_MATCH_SINCE,
    MINIMUM_SAFE,
    CliVersions,
    NamedVersion,
    Version,
    advisories_for,
    parse_cli_versions,
    parse_named_version,
    parse_version,
)
from mcpnode.audit.context import AuditContext
from mcpnode.audit.facts import command_evidence, file_evidence, unreadable_finding
from mcpnode.audit.model import Evidence, Finding, Status
from mcpnode.host import CommandResult

# Host.command's answer on a recorded root that holds no such command (mcpnode/host/command.py).
NOT_RECORDED = "not recorded in this snapshot"

PACKAGES = (
    "nvidia-container-toolkit nvidia-container-toolkit-base "
    "libnvidia-container-tools libnvidia-container1"
)
UPGRADE = (
    f"Upgrade the toolkit and libnvidia-container together to {MINIMUM_SAFE} or later: "
    f"`apt-get update && apt-get install --only-upgrade {PACKAGES}` "
    f"(RHEL/SUSE: `dnf upgrade {PACKAGES}` / `zypper update {PACKAGES}`), then restart the "
    "container engine (`systemctl restart docker`, `containerd` or `crio`)"
)
INSTALL = (
    "Install the NVIDIA Container Toolkit from NVIDIA's repository (install-guide: "
    "`apt-get install nvidia-container-toolkit`), then `nvidia-ctk runtime configure "
    "--runtime=docker` (or `containerd`, `crio`) and restart that engine"
)
CGROUP_V2_RULE = "cgroup v2 needs libnvidia-container >= 1.8.1 (toolkit CHANGELOG 1.8.0/1.8.1)"


@dataclass(frozen=True)
class Tools:
    """What the three version commands said, parsed once for every check."""

    ctk: NamedVersion | None
    runtime: NamedVersion | None
    cli: CliVersions | None
    found: tuple[str, ...]  # commands that exist on the host
    unknown: bool  # the snapshot recorded none of them: presence cannot be told

    @property
    def installed(self) -> bool:
        return bool(self.found)

    @property
    def toolkit(self) -> Version | None:
        """The toolkit's version: nvidia-ctk's, else nvidia-container-runtime's."""
        for named in (self.ctk, self.runtime):
            if named is not None and named.version is not None:
                return named.version
        return None

    @property
    def lib(self) -> Version | None:
        return self.cli.lib if self.cli is not None else None

    def versions(self) -> list[tuple[str, Version]]:
        """(component, version) for everything that printed a version."""
        out: list[tuple[str, Version]] = []
        for label, named in (("nvidia-ctk", self.ctk), ("nvidia-container-runtime", self.runtime)):
            if named is not None and named.version is not None:
                out.append((label, named.version))
        if self.cli is not None:
            if self.cli.cli is not None:
                out.append(("nvidia-container-cli", self.cli.cli))
            if self.cli.lib is not None:
                out.append(("libnvidia-container", self.cli.lib))
        return out

    @staticmethod
    def of(facts: ContainerFacts) -> Tools:
        def answered(r: CommandResult) -> str:
            return r.stdout if r.found and r.returncode == 0 else ""

        results = (facts.ctk, facts.runtime, facts.cli)
        return Tools(
            ctk=parse_named_version(answered(facts.ctk)),
            runtime=parse_named_version(answered(facts.runtime)),
            cli=parse_cli_versions(answered(facts.cli)),
            found=tuple(" ".join(r.argv) for r in results if r.found),
            unknown=all(not r.found and r.reason == NOT_RECORDED for r in results),
        )


def effective_mode(facts: ContainerFacts, tools: Tools) -> tuple[str, str]:
    """The mode the runtime runs in, and why. `auto` resolves to JIT-CDI since 1.18.0 (on hosts
    with NVML) and to legacy before, unless a container asks for CDI devices by name
    (release notes 1.18.0); "auto" stays when the version is unknown, and "unknown" when the
    config file cannot be read or parsed (the runtime itself fails then)."""
    parsed = facts.toolkit_config
    if parsed.error is not None or parsed.read.denied or parsed.read.error is not None:
        return "unknown", f"{TOOLKIT_CONFIG} could not be read"
    mode = parsed.value.mode if parsed.value is not None else "auto"
    if mode != "auto":
        return mode, f"set in {TOOLKIT_CONFIG}"
    version = tools.toolkit
    if version is None:
        return "auto", "default; the toolkit version is unknown"
    if version >= AUTO_IS_CDI_SINCE:
        return "jit-cdi", f"auto resolves to jit-cdi from {AUTO_IS_CDI_SINCE} (toolkit {version})"
    return "legacy", f"auto resolves to legacy before {AUTO_IS_CDI_SINCE} (toolkit {version})"


def engine_configured(facts: ContainerFacts) -> bool:
    return (
        facts.docker.read.text is not None
        or any(f.loaded for f in facts.containerd)
        or any(f.loaded for f in facts.crio)
    )


def _command_evidence(facts: ContainerFacts) -> tuple[Evidence, ...]:
    return tuple(command_evidence(r) for r in (facts.ctk, facts.runtime, facts.cli))


def check(facts: ContainerFacts, ctx: AuditContext, tools: Tools) -> list[Finding]:
    out = [_present(facts, ctx, tools)]
    if not tools.installed:
        return out
    out.append(_version(facts, tools))
    out.append(_cli_lib(facts, tools))
    out.append(_match(facts, tools))
    out.append(_cgroup_v2(facts, ctx, tools))
    out.append(_mode(facts, ctx, tools))
    return out


def _present(facts: ContainerFacts, ctx: AuditContext, tools: Tools) -> Finding:
    fid = "container.toolkit.present"
    ev = _command_evidence(facts)
    if tools.installed:
        listed = ", ".join(f"{name} {v}" for name, v in tools.versions()) or "versions unknown"
        return Finding(fid, Status.PASS, f"NVIDIA Container Toolkit installed: {listed}", ev)
    if tools.unknown:
        return Finding(
            fid,
            Status.SKIP,
            "toolkit not checked: this snapshot recorded no toolkit version command",
            ev,
            "Record the snapshot again with a current mcpnode (it runs the version commands)",
        )
    if not ctx.has_gpus:
        return Finding(
            fid, Status.SKIP, "no NVIDIA GPU and no container toolkit: not applicable", ev
        )
    if engine_configured(facts):
        # A container engine is set up on a GPU host: its containers cannot reach the GPUs.
        return Finding(
            fid,
            Status.WARN,
            "GPUs and a configured container engine, but no NVIDIA Container Toolkit: "
            "containers here get no GPU",
            ev,
            INSTALL,
        )
    # Inference served straight on the host (vLLM, Triton, TensorRT-LLM from a venv) needs no
    # toolkit; nothing says containers are planned, so this is worth knowing, not a fault.
    return Finding(
        fid,
        Status.INFO,
        "no NVIDIA Container Toolkit and no container engine configured: fine for bare-metal "
        "inference; needed before running GPU containers",
        ev,
        INSTALL,
    )


VERSION_ID = "container.toolkit.version"
_VERSION_SOURCE = " version"  # Evidence(f"{component} version", "1.17.8"), written by _version


def toolkit_version(findings: Iterable[Finding]) -> str | None:
    """The lowest toolkit component version the audit read (what the CVE check judged), from
    the `container.toolkit.version` finding's evidence; None when the toolkit is absent, its
    versions unreadable, or the container area did not run. For the manifest, whose readers
    (fleet-report) compare it across hosts."""
    for f in findings:
        if f.id != VERSION_ID:
            continue
        versions = [
            v
            for e in f.evidence
            if e.source.endswith(_VERSION_SOURCE) and (v := parse_version(e.value)) is not None
        ]
        if versions:
            return str(min(versions))
    return None


def _version(facts: ContainerFacts, tools: Tools) -> Finding:
    fid = VERSION_ID
    versions = tools.versions()
    if not versions:
        return Finding(
            fid,
            Status.WARN,
            "toolkit installed but no component printed a version mcpnode can read",
            _command_evidence(facts),
            "Run `nvidia-ctk --version` and `nvidia-container-cli --version` by hand; "
            "reinstall the packages if they fail",
        )
    name, lowest = min(versions, key=lambda nv: nv[1])
    ev = [Evidence(f"{n}{_VERSION_SOURCE}", str(v)) for n, v in versions]
    hits = advisories_for(lowest)
    if not hits:
        return Finding(
            fid,
            Status.PASS,
            f"every component is at {MINIMUM_SAFE} or later (lowest: {name} {lowest}): no "
            "known container-escape CVE",
            tuple(ev),
        )
    ev.extend(Evidence(a.cve, f"fixed in {a.fixed}: {a.what}") for a in hits)
    cfg = facts.toolkit_config.value
    if cfg is not None and cfg.disable_cuda_compat_lib_hook is not None:
        ev.append(
            file_evidence(
                facts.toolkit_config.read,
                "features.disable-cuda-compat-lib-hook = "
                + str(cfg.disable_cuda_compat_lib_hook).lower(),
            )
        )
    cves = ", ".join(a.cve for a in hits)
    if lowest < CRITICAL_BELOW:
        others = ", ".join(a.cve for a in hits if a.cve != "CVE-2024-0132")
        summary = (
            f"CRITICAL: {name} {lowest} allows container escape (CVE-2024-0132, TOCTOU, "
            f"CVSS 9.0); also affected by {others}"
        )
    else:
        summary = f"{name} {lowest} is vulnerable (below {MINIMUM_SAFE}): {cves}"
    remedy = UPGRADE
    if Version(1, 17, 5) <= lowest < MINIMUM_SAFE:
        # The enable-cuda-compat hook arrived in 1.17.5; NVIDIA's stop-gap until the upgrade
        # (bulletin 5659; the bulletin's /etc/nvidia-container-toolkit path is a typo, #1208).
        remedy += (
            "; until then, for CVE-2025-23266 only, set `disable-cuda-compat-lib-hook = true` "
            f"under `[features]` in {TOOLKIT_CONFIG}"
        )
    return Finding(fid, Status.FAIL, summary, tuple(ev), remedy)


def _cli_lib(facts: ContainerFacts, tools: Tools) -> Finding:
    fid = "container.toolkit.cli_lib"
    ev: tuple[Evidence, ...] = (command_evidence(facts.cli),)
    if not facts.cli.found:
        return Finding(
            fid,
            Status.SKIP,
            "nvidia-container-cli not installed (only the legacy hook and `docker --gpus` use "
            "it; CDI does not)",
            ev,
        )
    cli = tools.cli
    if cli is None or cli.cli is None or cli.lib is None:
        return Finding(
            fid,
            Status.WARN,
            "nvidia-container-cli printed no readable cli-version and lib-version",
            ev,
            "Run `nvidia-container-cli --version`; reinstall libnvidia-container-tools and "
            "libnvidia-container1 if it fails",
        )
    ev = (
        Evidence("nvidia-container-cli --version: cli-version", cli.cli_raw or ""),
        Evidence("nvidia-container-cli --version: lib-version", cli.lib_raw or ""),
    )
    if cli.cli == cli.lib:
        return Finding(
            fid, Status.PASS, f"nvidia-container-cli and its library agree: {cli.cli}", ev
        )
    return Finding(
        fid,
        Status.FAIL,
        f"nvidia-container-cli {cli.cli} runs against libnvidia-container {cli.lib}: a partial "
        "upgrade",
        ev,
        f"Install both at one version: `apt-get install --only-upgrade {PACKAGES}` (RHEL: "
        f"`dnf upgrade {PACKAGES}`)",
    )


def _match(facts: ContainerFacts, tools: Tools) -> Finding:
    fid = "container.toolkit.match"
    toolkit, lib = tools.toolkit, tools.lib
    ev = _command_evidence(facts)
    if toolkit is None or lib is None:
        return Finding(
            fid,
            Status.SKIP,
            "toolkit and libnvidia-container versions not both known (needs nvidia-ctk or "
            "nvidia-container-runtime, and nvidia-container-cli)",
            ev,
        )
    problems: list[str] = []
    strict = toolkit >= EXACT_MATCH_SINCE or lib >= EXACT_MATCH_SINCE
    if lib != toolkit:
        problems.append(f"libnvidia-container {lib} differs from the toolkit {toolkit}")
    ctk = tools.ctk.version if tools.ctk is not None else None
    rt = tools.runtime.version if tools.runtime is not None else None
    if ctk is not None and rt is not None and ctk != rt:
        # Both come from nvidia-container-toolkit-base: they differ only after a half upgrade.
        problems.append(f"nvidia-container-runtime {rt} differs from nvidia-ctk {ctk}")
    if not problems:
        return Finding(
            fid, Status.PASS, f"toolkit and libnvidia-container are one release: {toolkit}", ev
        )
    status = Status.FAIL if strict else Status.WARN
    why = (
        f"since {EXACT_MATCH_SINCE} the toolkit requires libnvidia-container at exactly its version"
        if strict
        else f"tolerated before {EXACT_MATCH_SINCE}, required to match from then on"
    )
    return Finding(
        fid,
        status,
        "; ".join(problems) + f" ({why})",
        ev,
        f"Install every package at one version: `apt-get install --only-upgrade {PACKAGES}` "
        f"(RHEL: `dnf upgrade {PACKAGES}`)",
    )


def _cgroup_v2(facts: ContainerFacts, ctx: AuditContext, tools: Tools) -> Finding:
    fid = "container.toolkit.cgroupv2"
    mode_ev = Evidence("cgroup mode", ctx.cgroup_mode)
    if ctx.cgroup_mode != "v2":
        return Finding(
            fid,
            Status.SKIP,
            f"cgroup mode is {ctx.cgroup_mode}: the v2 rule does not apply",
            (mode_ev,),
        )
    lib = tools.lib
    ev = (mode_ev, command_evidence(facts.cli))
    if lib is None:
        return Finding(
            fid,
            Status.SKIP,
            "libnvidia-container version unknown (nvidia-container-cli absent): the legacy "
            "hook is not installed",
            ev,
        )
    if lib >= CGROUP_V2_MINIMUM:
        return Finding(fid, Status.PASS, f"libnvidia-container {lib} supports cgroup v2", ev)
    return Finding(
        fid,
        Status.FAIL,
        f"libnvidia-container {lib} on a cgroup v2 host: {CGROUP_V2_RULE}",
        ev,
        UPGRADE,
    )


def _mode(facts: ContainerFacts, ctx: AuditContext, tools: Tools) -> Finding:
    fid = "container.toolkit.mode"
    parsed = facts.toolkit_config
    read = parsed.read
    if read.denied or read.error is not None:
        return unreadable_finding(fid, read, ctx.is_root, "toolkit mode")
    if parsed.error is not None:
        return Finding(
            fid,
            Status.FAIL,
            f"{read.path} does not parse: {parsed.error}",
            (file_evidence(read),),
            f"Fix the TOML in {read.path}, or regenerate it: `nvidia-ctk config default "
            f"--output={read.path}`",
        )
    mode, why = effective_mode(facts, tools)
    written = parsed.value.mode if parsed.value is not None else "auto"
    ev = (
        file_evidence(read, f"nvidia-container-runtime.mode = {written}")
        if parsed.value is not None and parsed.value.mode_set
        else file_evidence(read, "mode not set (default auto)" if read.text else "absent (auto)"),
        Evidence("effective mode", f"{mode} ({why})"),
    )
    to_cdi = (
        "`nvidia-ctk config --in-place --set nvidia-container-runtime.mode=cdi` and "
        "`nvidia-ctk cdi generate --output=/var/run/cdi/nvidia.yaml` (from 1.18, mode jit-cdi "
        "needs no generated spec); `docker --gpus` works only in legacy mode, so run GPU "
        "containers with `--runtime=nvidia` or `--device nvidia.com/gpu=all` instead"
    )
    if written not in TOOLKIT_MODES:
        return Finding(
            fid,
            Status.FAIL,
            f"unknown toolkit mode {written!r} (known: {', '.join(TOOLKIT_MODES)})",
            ev,
            f"Set a known mode: {to_cdi}",
        )
    version = tools.toolkit
    if mode == "legacy" and version is not None and version < AUTO_IS_CDI_SINCE:
        # Legacy is what 1.17 and older do by default: not a fault in itself; the risk it
        # carries is container.devchar.symlinks' to judge.
        return Finding(
            fid,
            Status.INFO,
            f"toolkit {version} runs in legacy mode (its default before 1.18): GPUs survive "
            "`systemctl daemon-reload` only with /dev/char links (container.devchar.symlinks)",
            ev,
            f"Consider CDI: {to_cdi}",
        )
    if mode == "legacy":
        return Finding(
            fid,
            Status.WARN,
            "toolkit runs in legacy mode, deprecated since 1.18: injected GPUs vanish from "
            "containers after `systemctl daemon-reload` unless /dev/char links exist",
            ev,
            f"Prefer CDI: {to_cdi}",
        )
    if mode == "csv":
        return Finding(
            fid, Status.INFO, "toolkit in csv mode (Tegra/Jetson mount lists): not CDI", ev
        )
    if mode == "auto":
        return Finding(
            fid,
            Status.INFO,
            "toolkit mode auto, toolkit version unknown: legacy before 1.18, jit-cdi from 1.18",
            ev,
        )
    return Finding(fid, Status.PASS, f"toolkit mode {mode}: devices are injected through CDI", ev)
