"""The container stack's facts as `container.collect` reads them, and the logical paths it
reads (named here, in one place). Shared by the collector and the checks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from mcpnode.audit.container.config import (
    CdiSpec,
    ContainerdConfig,
    CrioConfig,
    DockerConfig,
    ToolkitConfig,
)
from mcpnode.audit.facts import FileRead
from mcpnode.host import CommandResult

CTK = ("nvidia-ctk", "--version")
RUNTIME = ("nvidia-container-runtime", "--version")
CLI = ("nvidia-container-cli", "--version")

TOOLKIT_CONFIG = "/etc/nvidia-container-runtime/config.toml"
DOCKER_CONFIG = "/etc/docker/daemon.json"
CONTAINERD_CONFIG = "/etc/containerd/config.toml"
# nvidia-ctk writes its containerd drop-in to conf.d since 1.18.1 and wrote to config.d in
# 1.18.0 (cmd/nvidia-ctk/runtime/configure/configure.go at each tag; release notes 1.18.1);
# containerd reads either only through `imports`.
CONTAINERD_DROPIN_DIRS = ("/etc/containerd/conf.d", "/etc/containerd/config.d")
CRIO_CONFIG = "/etc/crio/crio.conf"
CRIO_DROPIN_DIR = "/etc/crio/crio.conf.d"
# Where toolkit 1.18.0-1.19.0 wrote its CRI-O drop-in by mistake: CRI-O never reads it.
CRIO_WRONG_DIR = "/etc/crio/conf.d"
# Static specs first, then dynamic ones (which win on conflicts): the CDI registry's order
# (tags.cncf.io/container-device-interface pkg/cdi/spec-dirs.go).
CDI_DIRS = ("/etc/cdi", "/var/run/cdi")
DOCKER_INFO = ("docker", "info", "--format", "{{json .}}")
# Where kubeadm writes the KubeletConfiguration (kubeadm's --config for the kubelet)
KUBELET_CONFIG = "/var/lib/kubelet/config.yaml"
CDI_SUFFIXES = (".yaml", ".json")  # the registry reads only these
# `nvidia-ctk cdi generate` writes ~10 KiB for 8 GPUs (each device a few hundred bytes, the
# shared containerEdits the rest); MIG devices add as much again per instance. 4 MiB is far
# above any real spec and bounds what the YAML parser is handed.
MAX_CDI_BYTES = 4 << 20
DEV = "/dev"
DEV_CHAR = "/dev/char"

MAX_IMPORTS = 64  # containerd import fan-out we follow; a loop or a huge glob stops here

T = TypeVar("T")


@dataclass(frozen=True)
class Parsed(Generic[T]):
    """One configuration file: how the read went and, when it was read, the parse result or
    the parser's error."""

    read: FileRead
    value: T | None = None
    error: str | None = None  # ConfigError message
    unsupported: bool = False  # refused unread by a bound (YAML depth, aliases), not invalid

    @property
    def path(self) -> str:
        return self.read.path


@dataclass(frozen=True)
class ContainerdFile:
    parsed: Parsed[ContainerdConfig]
    loaded: bool  # containerd reads it: the main config, or reached through `imports`
    via: str | None  # the file whose `imports` brought it in


@dataclass(frozen=True)
class CrioFile:
    parsed: Parsed[CrioConfig]
    loaded: bool  # False for files in /etc/crio/conf.d, which CRI-O ignores


@dataclass(frozen=True)
class ContainerFacts:
    ctk: CommandResult
    runtime: CommandResult
    cli: CommandResult
    toolkit_config: Parsed[ToolkitConfig]
    docker: Parsed[DockerConfig]
    containerd: tuple[ContainerdFile, ...]  # load order, then drop-ins nothing imports
    containerd_unresolved: tuple[tuple[str, str], ...]  # (import as written, why)
    crio: tuple[CrioFile, ...]
    cdi_dirs: tuple[tuple[str, bool], ...]  # (directory, whether it exists)
    cdi: tuple[Parsed[CdiSpec], ...]
    dev_nodes: tuple[str, ...] | None  # /dev/nvidia* device nodes; None: no /dev here
    dev_char: frozenset[str] | None  # what /dev/char links point at; None: no /dev/char
    docker_info: CommandResult | None = None  # `docker info --format '{{json .}}'`
    kubelet: FileRead | None = None  # the kubelet's KubeletConfiguration file
