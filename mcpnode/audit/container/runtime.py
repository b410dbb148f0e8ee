"""Checks on the container engines' configuration: is the `nvidia` runtime defined where the
engine will actually load it? Docker's daemon.json, containerd's config.toml with its imports
(and the drop-ins nothing imports), CRI-O's crio.conf with its drop-in directory. Pure.

An engine with no configuration file at all is skipped (said once when the toolkit is
installed, silent otherwise). Configuration that is broken on its own terms (a file that does
not parse, a default runtime that is not defined) is reported whether or not the toolkit is
there: the engine refuses to start or to run containers either way."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from mcpnode.audit.container.config import NVIDIA_RUNTIME
from mcpnode.audit.container.facts import (
    CONTAINERD_CONFIG,
    CRIO_DROPIN_DIR,
    ContainerdFile,
    ContainerFacts,
    CrioFile,
    Parsed,
)
from mcpnode.audit.container.toolkit import NOT_RECORDED, Tools
from mcpnode.audit.context import AuditContext
from mcpnode.audit.facts import FileRead, file_evidence, unreadable_finding
from mcpnode.audit.model import Evidence, Finding, Status

DOCKER_CONFIGURE = (
    "`nvidia-ctk runtime configure --runtime=docker && systemctl restart docker` (adds "
    '`"runtimes": {"nvidia": {"path": "nvidia-container-runtime", "runtimeArgs": []}}` to '
    "/etc/docker/daemon.json)"
)
T = TypeVar("T")

CONTAINERD_CONFIGURE = (
    "`nvidia-ctk runtime configure --runtime=containerd && systemctl restart containerd` "
    "(writes /etc/containerd/conf.d/99-nvidia.toml and adds it to `imports` in "
    f"{CONTAINERD_CONFIG})"
)
CRIO_CONFIGURE = (
    "`nvidia-ctk runtime configure --runtime=crio && systemctl restart crio` (toolkit 1.19.1 "
    f"or later writes {CRIO_DROPIN_DIR}/99-nvidia.toml)"
)


def check(facts: ContainerFacts, ctx: AuditContext, tools: Tools) -> list[Finding]:
    return [*_docker(facts, ctx, tools), *_containerd(facts, ctx, tools), *_crio(facts, ctx, tools)]


def _runtime_binary_missing(facts: ContainerFacts) -> bool:
    """nvidia-container-runtime is known to be absent (not merely unrecorded)."""
    return not facts.runtime.found and facts.runtime.reason != NOT_RECORDED


def _not_configured(fid: str, engine: str, ctx: AuditContext, tools: Tools) -> list[Finding]:
    """An engine whose configuration holds no nvidia runtime (and nothing broken)."""
    if not tools.installed:
        return []  # no toolkit: the engine is fine as it is; toolkit.present speaks for GPUs
    if not ctx.has_gpus:
        return [Finding(fid, Status.SKIP, f"{engine} has no nvidia runtime; no GPU on this host")]
    return []


def _no_configuration(fid: str, tools: Tools, summary: str, ev: Evidence) -> list[Finding]:
    """An engine without a configuration file: absent or on its defaults. Worth a SKIP line
    only where the toolkit is installed (it would configure the engine)."""
    if not tools.installed:
        return []
    return [Finding(fid, Status.SKIP, summary, (ev,))]


def _no_nvidia_runtime(
    fid: str,
    engine: str,
    ctx: AuditContext,
    tools: Tools,
    ev: list[Evidence],
    default: str | None,
    *,
    undefined_default: str,
    unusable: str,
    configure: str,
    explained: bool,
) -> list[Finding]:
    """An engine whose loaded configuration defines no nvidia runtime: a FAIL when "nvidia" is
    its default all the same (`undefined_default`); nothing more when `explained` (a broken
    file already says why, or nothing is loaded); `_not_configured` without the toolkit or a
    GPU; else a WARN (`unusable`) with the `configure` command as the remedy."""
    if default == NVIDIA_RUNTIME:
        return [
            Finding(
                fid, Status.FAIL, undefined_default, tuple(ev), f"Define the runtime: {configure}"
            )
        ]
    if explained:
        return []
    if not tools.installed or not ctx.has_gpus:
        return _not_configured(fid, engine, ctx, tools)
    return [Finding(fid, Status.WARN, unusable, tuple(ev), configure)]


def _parse_failure(fid: str, parsed: Parsed[T], loaded: bool, remedy: str) -> Finding:
    ignored = "" if loaded else " (nothing loads it, so the engine ignores it for now)"
    return Finding(
        fid,
        Status.FAIL if loaded else Status.WARN,
        f"{parsed.path} does not parse: {parsed.error}{ignored}",
        (file_evidence(parsed.read),),
        remedy,
        parsed.path,
    )


def _unreadable(fid: str, read: FileRead, ctx: AuditContext, what: str) -> Finding | None:
    if read.denied or read.error is not None:
        return unreadable_finding(fid, read, ctx.is_root, what, read.path)
    return None


class _EngineFile(Protocol):
    """A configuration file of an engine (ContainerdFile, CrioFile)."""

    @property
    def parsed(self) -> Parsed[Any]: ...
    @property
    def loaded(self) -> bool: ...


def _broken_files(
    fid: str,
    files: Sequence[_EngineFile],
    ctx: AuditContext,
    what: str,
    fix: Callable[[str], str],
) -> tuple[list[Finding], bool]:
    """A finding for each of an engine's configuration files that cannot be read or does not
    parse (`fix` of its path: the remedy), and whether one the engine loads is among them."""
    out: list[Finding] = []
    broken_loaded = False
    for f in files:
        bad = _unreadable(fid, f.parsed.read, ctx, what)
        if bad is None and f.parsed.error is not None:
            bad = _parse_failure(fid, f.parsed, f.loaded, fix(f.parsed.path))
        if bad is not None:
            out.append(bad)
            broken_loaded = broken_loaded or f.loaded
    return out, broken_loaded


# -- docker ----------------------------------------------------------------------------------


def _docker(facts: ContainerFacts, ctx: AuditContext, tools: Tools) -> list[Finding]:
    fid = "container.runtime.docker"
    parsed = facts.docker
    read = parsed.read
    if read.missing:
        return _no_configuration(
            fid,
            tools,
            f"no {read.path}: docker is absent or runs on defaults (`docker run --gpus` "
            "needs no runtime entry, `--runtime=nvidia` does)",
            file_evidence(read),
        )
    bad = _unreadable(fid, read, ctx, "docker runtime configuration")
    if bad is not None:
        return [bad]
    if parsed.error is not None:
        return [
            Finding(
                fid,
                Status.FAIL,
                f"{read.path} does not parse: {parsed.error} (dockerd refuses to start)",
                (file_evidence(read),),
                f"Fix {read.path} (`python3 -m json.tool {read.path}` points at the error), "
                "then `systemctl restart docker`",
            )
        ]
    cfg = parsed.value
    assert cfg is not None
    ev = [
        file_evidence(read, f"runtimes: {', '.join(cfg.runtimes) or 'none'}"),
        Evidence(f"{read.path}: default-runtime", cfg.default_runtime or "unset (runc)"),
    ]
    if cfg.nvidia_path is not None:
        ev.append(Evidence(f"{read.path}: runtimes.nvidia.path", cfg.nvidia_path))
    if cfg.cdi_feature is not None:
        ev.append(Evidence(f"{read.path}: features.cdi", str(cfg.cdi_feature).lower()))
    has = NVIDIA_RUNTIME in cfg.runtimes
    default_nvidia = cfg.default_runtime == NVIDIA_RUNTIME
    if default_nvidia and not has:
        return [
            Finding(
                fid,
                Status.FAIL,
                'default-runtime is "nvidia" but no runtimes.nvidia is defined: dockerd '
                "refuses to start",
                tuple(ev),
                f"Define the runtime: {DOCKER_CONFIGURE}",
            )
        ]
    if has and _runtime_binary_missing(facts):
        ev.append(Evidence(" ".join(facts.runtime.argv), facts.runtime.reason or "not found"))
        who = "every container" if default_nvidia else "`--runtime=nvidia` containers"
        return [
            Finding(
                fid,
                Status.FAIL if default_nvidia else Status.WARN,
                f"docker names the nvidia runtime but nvidia-container-runtime is not "
                f"installed: {who} fail to start",
                tuple(ev),
                "Install nvidia-container-toolkit, or remove runtimes.nvidia (and "
                f'"default-runtime": "nvidia") from {read.path}; then `systemctl restart docker`',
            )
        ]
    if has:
        default = "the default" if default_nvidia else "available with `--runtime=nvidia`"
        return [Finding(fid, Status.PASS, f"docker has the nvidia runtime, {default}", tuple(ev))]
    if not tools.installed or not ctx.has_gpus:
        return _not_configured(fid, "docker", ctx, tools)
    return [
        Finding(
            fid,
            Status.WARN,
            "docker has no nvidia runtime: `--runtime=nvidia` fails, and `--gpus` works only "
            "while the toolkit is in legacy mode",
            tuple(ev),
            DOCKER_CONFIGURE,
        )
    ]


# -- containerd ------------------------------------------------------------------------------


def _containerd(facts: ContainerFacts, ctx: AuditContext, tools: Tools) -> list[Finding]:
    fid = "container.runtime.containerd"
    files = facts.containerd
    if not files:
        return _no_configuration(
            fid,
            tools,
            f"no {CONTAINERD_CONFIG} and no drop-ins: containerd absent or on defaults",
            Evidence(CONTAINERD_CONFIG, "absent"),
        )
    out, broken_loaded = _broken_files(
        fid,
        files,
        ctx,
        "containerd configuration",
        lambda path: (
            f"Fix the TOML in {path}, then `systemctl restart containerd` "
            "(`containerd config dump` shows the merged result)"
        ),
    )
    loaded = [f for f in files if f.loaded and f.parsed.value is not None]
    ev = [Evidence("containerd loads", " -> ".join(f.parsed.path for f in loaded) or "nothing")]
    ev.extend(Evidence(f"import {imp}", why) for imp, why in facts.containerd_unresolved)
    nvidia = [f for f in loaded if f.parsed.value is not None and f.parsed.value.nvidia]
    defaults = [
        (f, f.parsed.value.default_runtime)
        for f in loaded
        if f.parsed.value is not None and f.parsed.value.default_runtime is not None
    ]
    default = defaults[-1][1] if defaults else None
    if defaults:
        src, _ = defaults[-1]
        ev.append(Evidence(f"{src.parsed.path}: default_runtime_name", str(default)))
    if nvidia:
        out.append(_containerd_runtime(fid, nvidia[-1], default, ev))
        return out
    stray = [
        f for f in files if not f.loaded and f.parsed.value is not None and f.parsed.value.nvidia
    ]
    if stray:
        paths = ", ".join(f.parsed.path for f in stray)
        dirs = sorted({f.parsed.path.rsplit("/", 1)[0] for f in stray})
        globs = ", ".join(f'"{d}/*.toml"' for d in dirs)
        ev.extend(
            Evidence(f.parsed.path, "defines the nvidia runtime; not imported") for f in stray
        )
        out.append(
            Finding(
                fid,
                Status.FAIL,
                f"{paths} defines the nvidia runtime, but {CONTAINERD_CONFIG} does not import "
                "it: containerd ignores the drop-in",
                tuple(ev),
                f"Add `imports = [{globs}]` at the top of {CONTAINERD_CONFIG}, then "
                "`systemctl restart containerd`; or rerun `nvidia-ctk runtime configure "
                "--runtime=containerd`, which adds the import itself",
            )
        )
        return out
    return out + _no_nvidia_runtime(
        fid,
        "containerd",
        ctx,
        tools,
        ev,
        default,
        undefined_default='default_runtime_name is "nvidia" but no nvidia runtime is defined: '
        "containerd cannot start any CRI container",
        unusable="containerd has no nvidia runtime: CRI pods get no GPU through the toolkit",
        configure=CONTAINERD_CONFIGURE,
        explained=broken_loaded,  # the parse FAIL already says why nothing could be found
    )


def _containerd_runtime(
    fid: str, f: ContainerdFile, default: str | None, ev: list[Evidence]
) -> Finding:
    cfg = f.parsed.value
    assert cfg is not None and cfg.nvidia is not None
    rt = cfg.nvidia
    ev.append(
        Evidence(
            f"{f.parsed.path}: {rt.table}",
            f"runtime_type={rt.runtime_type or 'unset'}, BinaryName={rt.binary or 'unset'}",
        )
    )
    if rt.runtime_type is None:
        # The writer before toolkit 1.20.0 could leave it out; containerd then fails to create
        # containers with "container.Runtime.Name must be set" (release notes 1.20.0).
        return Finding(
            fid,
            Status.WARN,
            f"the nvidia runtime in {f.parsed.path} has no runtime_type: containers fail with "
            '"container.Runtime.Name must be set"',
            tuple(ev),
            f'Add `runtime_type = "io.containerd.runc.v2"` to [{rt.table}] in {f.parsed.path} '
            "(toolkit 1.20.0's `nvidia-ctk runtime configure` writes it), then "
            "`systemctl restart containerd`",
        )
    how = "the default" if default == NVIDIA_RUNTIME else "selectable by RuntimeClass"
    return Finding(
        fid,
        Status.PASS,
        f"containerd loads the nvidia runtime from {f.parsed.path}, {how}",
        tuple(ev),
    )


# -- CRI-O -----------------------------------------------------------------------------------


def _crio(facts: ContainerFacts, ctx: AuditContext, tools: Tools) -> list[Finding]:
    fid = "container.runtime.crio"
    files = facts.crio
    if not files:
        return []  # CRI-O is the rarest engine here; its absence is not worth a line
    out, broken_loaded = _broken_files(
        fid,
        files,
        ctx,
        "CRI-O configuration",
        lambda path: f"Fix the TOML in {path}, then `systemctl restart crio`",
    )
    loaded = [f for f in files if f.loaded and f.parsed.value is not None]
    ev = [Evidence("CRI-O loads", " -> ".join(f.parsed.path for f in loaded) or "nothing")]
    nvidia = [f for f in loaded if f.parsed.value is not None and f.parsed.value.has_nvidia]
    defaults = [
        f.parsed.value.default_runtime
        for f in loaded
        if f.parsed.value is not None and f.parsed.value.default_runtime is not None
    ]
    default = defaults[-1] if defaults else None
    ev.append(Evidence("crio.runtime.default_runtime", default or "unset (crun or runc)"))
    if nvidia:
        out.append(_crio_runtime(fid, nvidia[-1], default, ev))
        return out
    stray = [f for f in files if not f.loaded and f.parsed.value and f.parsed.value.has_nvidia]
    if stray:
        ev.extend(
            Evidence(f.parsed.path, "defines the nvidia runtime; CRI-O never reads it")
            for f in stray
        )
        moves = "; ".join(f"`mv {f.parsed.path} {CRIO_DROPIN_DIR}/`" for f in stray)
        out.append(
            Finding(
                fid,
                Status.FAIL,
                f"the nvidia runtime sits in {stray[0].parsed.path}, a directory CRI-O does not "
                "read (toolkit 1.18.0-1.19.0 wrote it there)",
                tuple(ev),
                f"{moves}, then `systemctl restart crio`",
            )
        )
        return out
    return out + _no_nvidia_runtime(
        fid,
        "CRI-O",
        ctx,
        tools,
        ev,
        default,
        undefined_default='default_runtime is "nvidia" but no crio.runtime.runtimes.nvidia is '
        "defined",
        unusable="CRI-O has no nvidia runtime: pods get no GPU through the toolkit",
        configure=CRIO_CONFIGURE,
        explained=broken_loaded or not loaded,
    )


def _crio_runtime(fid: str, f: CrioFile, default: str | None, ev: list[Evidence]) -> Finding:
    cfg = f.parsed.value
    assert cfg is not None
    ev.append(
        Evidence(
            f"{f.parsed.path}: crio.runtime.runtimes.nvidia.runtime_path",
            cfg.nvidia_path or "unset",
        )
    )
    how = "the default" if default == NVIDIA_RUNTIME else "selectable by RuntimeClass"
    return Finding(
        fid, Status.PASS, f"CRI-O loads the nvidia runtime from {f.parsed.path}, {how}", tuple(ev)
    )
