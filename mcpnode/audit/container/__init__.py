"""NVIDIA container stack: toolkit versions, engine runtime configuration, CDI specs, and the
`/dev/char` links the legacy hook depends on.

`collect` reads everything through Host (files, directory listings, symlinks, the components'
`--version` output, live or replayed from a snapshot's `commands`); `check` is pure. The facts
are parsed by `version.py` and `config.py` beside this file (CDI's YAML with PyYAML's safe loader
inside codec/yaml_bounded.py's bounds); the checks live in
`toolkit.py`, `runtime.py` and `cdi.py`, one file per concern.

Findings (ids stable):

- `container.toolkit.present`   toolkit installed; without it: SKIP on a host with no GPU, INFO
  on a GPU host with no container engine configured (bare-metal inference is legitimate),
  WARN on a GPU host whose docker/containerd/CRI-O is configured (its containers get no GPU).
- `container.toolkit.version`   lowest component version against the CVE table: FAIL below
  1.17.8 (CVE-2025-23266, CVE-2025-23267), worded critical below 1.16.2 (CVE-2024-0132).
- `container.toolkit.cli_lib`   `nvidia-container-cli` cli-version equals lib-version.
- `container.toolkit.match`     libnvidia-container equals the toolkit (FAIL since 1.18.0,
  WARN before), and nvidia-container-runtime equals nvidia-ctk (one package).
- `container.toolkit.cgroupv2`  libnvidia-container >= 1.8.1 on a cgroup v2 host.
- `container.toolkit.mode`      `/etc/nvidia-container-runtime/config.toml` mode.
- `container.runtime.docker`, `.containerd`, `.crio`   the nvidia runtime in each engine's
  configuration, as the engine would load it (containerd imports, CRI-O drop-in directory).
- `container.cdi.present`, `.spec`, `.devices`, `.driver`   CDI specs in /etc/cdi and
  /var/run/cdi: present when needed, parseable, one device per GPU, made for this driver.
- `container.devchar.symlinks`  every /dev/nvidia* node has a /dev/char/MAJ:MIN link when the
  legacy hook injects devices (the "Failed to initialize NVML: Unknown Error" after
  `systemctl daemon-reload`, NVIDIA/nvidia-container-toolkit#48).

Unparseable daemon.json, TOML or CDI files are FAIL findings naming the file and the parser's
error; nothing here raises for bad input.
"""

from __future__ import annotations

import fnmatch
import posixpath
from collections.abc import Callable
from typing import TypeVar

from mcpnode.audit.container import cdi, cgroup, runtime, toolkit
from mcpnode.audit.container.config import (
    CdiSpec,
    ConfigError,
    parse_cdi_spec,
    parse_containerd,
    parse_crio,
    parse_daemon_json,
    parse_toolkit_config,
)
from mcpnode.audit.container.facts import (
    CDI_DIRS,
    CDI_SUFFIXES,
    CLI,
    CONTAINERD_CONFIG,
    CONTAINERD_DROPIN_DIRS,
    CRIO_CONFIG,
    CRIO_DROPIN_DIR,
    CRIO_WRONG_DIR,
    CTK,
    DEV,
    DEV_CHAR,
    DOCKER_CONFIG,
    DOCKER_INFO,
    KUBELET_CONFIG,
    MAX_CDI_BYTES,
    MAX_IMPORTS,
    RUNTIME,
    TOOLKIT_CONFIG,
    ContainerdFile,
    ContainerFacts,
    CrioFile,
    Parsed,
)
from mcpnode.audit.context import AuditContext
from mcpnode.audit.facts import FileRead, list_dir, read_file
from mcpnode.audit.model import Finding
from mcpnode.errors import HostError
from mcpnode.host import HostReader

__all__ = ["ContainerFacts", "check", "collect"]

T = TypeVar("T")


def _parse(read: FileRead, parser: Callable[[str], T]) -> Parsed[T]:
    if read.text is None:
        return Parsed(read)
    try:
        return Parsed(read, parser(read.text))
    except ConfigError as err:
        return Parsed(read, error=str(err), unsupported=err.unsupported)


def _cdi_json(text: str) -> CdiSpec:
    return parse_cdi_spec(text, is_json=True)


def _cdi_yaml(text: str) -> CdiSpec:
    return parse_cdi_spec(text, is_json=False)


def collect(host: HostReader, ctx: AuditContext) -> ContainerFacts:
    """Read the container stack's facts through `host`. Never raises for a missing,
    unreadable or malformed file: those are facts."""
    del ctx  # everything here is read whatever the host; the checks decide what applies
    containerd, unresolved = _collect_containerd(host)
    cdi_dirs: list[tuple[str, bool]] = []
    cdi: list[Parsed[CdiSpec]] = []
    for d in CDI_DIRS:
        names = list_dir(host, d)
        cdi_dirs.append((d, names is not None))
        for name in names or ():
            if name.endswith(CDI_SUFFIXES):
                parser = _cdi_json if name.endswith(".json") else _cdi_yaml
                cdi.append(_parse(read_file(host, f"{d}/{name}", MAX_CDI_BYTES), parser))
    dev_nodes, dev_char = _collect_dev(host)
    return ContainerFacts(
        ctk=host.command(CTK),
        runtime=host.command(RUNTIME),
        cli=host.command(CLI),
        toolkit_config=_parse(read_file(host, TOOLKIT_CONFIG), parse_toolkit_config),
        docker=_parse(read_file(host, DOCKER_CONFIG), parse_daemon_json),
        containerd=containerd,
        containerd_unresolved=unresolved,
        crio=_collect_crio(host),
        cdi_dirs=tuple(cdi_dirs),
        cdi=tuple(cdi),
        dev_nodes=dev_nodes,
        dev_char=dev_char,
        docker_info=host.command(DOCKER_INFO),
        kubelet=read_file(host, KUBELET_CONFIG),
    )


def _collect_containerd(
    host: HostReader,
) -> tuple[tuple[ContainerdFile, ...], tuple[tuple[str, str], ...]]:
    """The files containerd loads, in its order: config.toml, then its `imports` (globs
    expanded in name order, relative paths against the importing file's directory, imports of
    imports after them: containerd's LoadConfig queue), then the drop-ins under conf.d/ and
    config.d/ that nothing imported (containerd ignores those; the check says so)."""
    out: list[ContainerdFile] = []
    unresolved: list[tuple[str, str]] = []
    seen: set[str] = set()
    pending: list[tuple[str, str | None]] = []
    main = read_file(host, CONTAINERD_CONFIG)
    if not main.missing:
        pending.append((CONTAINERD_CONFIG, None))
    while pending and len(seen) < MAX_IMPORTS:
        path, via = pending.pop(0)
        if path in seen:
            continue
        seen.add(path)
        read = main if path == CONTAINERD_CONFIG else read_file(host, path)
        if via is not None and read.missing:
            unresolved.append((path, f"imported by {via}, does not exist"))
            continue
        parsed = _parse(read, parse_containerd)
        out.append(ContainerdFile(parsed, loaded=True, via=via))
        for pattern in parsed.value.imports if parsed.value is not None else ():
            paths, why = _expand_import(host, pattern, posixpath.dirname(path))
            if why is not None:
                unresolved.append((pattern, why))
            pending.extend((p, path) for p in paths)
    for d in CONTAINERD_DROPIN_DIRS:
        for name in list_dir(host, d) or ():
            path = f"{d}/{name}"
            if name.endswith(".toml") and path not in seen:
                seen.add(path)
                out.append(
                    ContainerdFile(_parse(read_file(host, path), parse_containerd), False, None)
                )
    return tuple(out), tuple(unresolved)


def _expand_import(host: HostReader, pattern: str, base: str) -> tuple[list[str], str | None]:
    """An `imports` entry -> the paths it names (Go's filepath.Glob, for a pattern in the last
    component; fnmatch's `*`, `?` and `[...]` are the same there)."""
    path = posixpath.normpath(pattern if pattern.startswith("/") else f"{base}/{pattern}")
    parent, name = posixpath.split(path)
    if any(c in parent for c in "*?["):
        return [], "a pattern in a directory name is not followed by mcpnode"
    if not any(c in name for c in "*?["):
        return [path], None
    names = list_dir(host, parent) or ()
    matched = [f"{parent}/{n}" for n in names if fnmatch.fnmatchcase(n, name)]
    return matched, None if matched else "matches no file"


def _collect_crio(host: HostReader) -> tuple[CrioFile, ...]:
    """crio.conf, then every file of crio.conf.d in name order (CRI-O reads the directory whole,
    later files overriding), then the files of the wrong directory conf.d, marked unloaded."""
    out: list[CrioFile] = []
    main = read_file(host, CRIO_CONFIG)
    if not main.missing:
        out.append(CrioFile(_parse(main, parse_crio), True))
    for d, loaded in ((CRIO_DROPIN_DIR, True), (CRIO_WRONG_DIR, False)):
        for name in list_dir(host, d) or ():
            path = f"{d}/{name}"
            if list_dir(host, path) is not None:
                continue  # a subdirectory: CRI-O skips those too
            out.append(CrioFile(_parse(read_file(host, path), parse_crio), loaded))
    return tuple(out)


def _collect_dev(host: HostReader) -> tuple[tuple[str, ...] | None, frozenset[str] | None]:
    """/dev/nvidia* nodes (and the nodes in /dev/nvidia-caps* directories), and the targets of
    /dev/char's links made absolute. Host lists names only; a name that lists as a directory
    is one, the rest are device nodes (on a live host all of /dev/nvidia* are char devices)."""
    names = list_dir(host, DEV)
    if names is None:
        return None, None
    nodes: list[str] = []
    for name in names:
        if not name.startswith("nvidia"):
            continue
        children = list_dir(host, f"{DEV}/{name}")
        if children is None:
            nodes.append(f"{DEV}/{name}")
        else:
            nodes.extend(f"{DEV}/{name}/{child}" for child in children)
    links = list_dir(host, DEV_CHAR)
    if links is None:
        return tuple(nodes), None
    targets: set[str] = set()
    for link in links:
        try:
            target = host.readlink(f"{DEV_CHAR}/{link}")
        except HostError:
            continue
        if target is not None:
            targets.add(posixpath.normpath(posixpath.join(DEV_CHAR, target)))
    return tuple(nodes), frozenset(targets)


def check(facts: ContainerFacts, ctx: AuditContext) -> list[Finding]:
    """Every container finding, in report order. Pure."""
    tools = toolkit.Tools.of(facts)
    return [
        *toolkit.check(facts, ctx, tools),
        *runtime.check(facts, ctx, tools),
        *cdi.check(facts, ctx, tools),
        cgroup.check(facts, ctx),
    ]
