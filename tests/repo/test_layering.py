"""Imports flow one way (docs/architecture.md): model imports nothing of ours but the leaf
codecs, topology never imports the CLI, only mcpnode/host/ touches the machine."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "mcpnode"

# Lower layers first; a module may import only from its own layer or below.
LAYERS = [
    # Pure value codecs (cpulists and masks, bounded decimals, TOML and YAML, records, read
    # results, printable text): the leaf every layer may import.
    "codec",
    # The exit statuses, shared by the agent and the CLI above it.
    "exitcodes",
    "errors",
    "logs",
    "host",
    # The published manifest's one reader: the audit (below placement) reads it too.
    "published",
    "topology",
    # What the CLI, the agent and the audit share: the lock, the journal's place, agent state,
    # the active profile's record. Below tuning, whose journal it places.
    "state",
    "tuning",
    "audit",
    "placement",
    # The probe judges measurements against topology and the placement plan, and brings its
    # own audit area (probe/area.py) because audit sits below placement; snapshot records it.
    "probe",
    "snapshot",
    "fleet",
    "agent",
    "cli",
]
ALLOWED_EXTRA = {"__init__": 0, "__main__": len(LAYERS)}


def layer_of(module: str) -> int:
    parts = module.split(".")
    name = parts[1] if len(parts) > 1 else "__init__"
    if name in ALLOWED_EXTRA:
        return ALLOWED_EXTRA[name]
    return LAYERS.index(name)


def imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("mcpnode"):
            out.append(node.module)
        elif isinstance(node, ast.Import):
            out.extend(a.name for a in node.names if a.name.startswith("mcpnode"))
    return out


def modules() -> list[tuple[str, Path]]:
    out = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG.parent).with_suffix("")
        out.append((".".join(rel.parts), path))
    return out


def test_imports_flow_downward() -> None:
    bad = []
    for mod, path in modules():
        for imp in imports(path):
            if imp == "mcpnode":
                continue
            if layer_of(imp) > layer_of(mod):
                bad.append(f"{mod} imports {imp}")
    assert bad == []


def test_model_imports_nothing_of_ours() -> None:
    """Nothing but the leaf codecs: the model is values, whatever discovers them."""
    assert [
        i for i in imports(PKG / "topology" / "model.py") if not i.startswith("mcpnode.codec")
    ] == []


def test_only_host_touches_the_machine() -> None:
    pattern = re.compile(
        r"\bopen\(|os\.listdir|os\.scandir|glob\.|subprocess|['\"]/(proc|sys)/|shell=True"
    )
    offenders = []
    for mod, path in modules():
        if mod == "mcpnode.host" or mod.startswith("mcpnode.host.") or mod == "mcpnode.snapshot":
            continue
        for i, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if pattern.search(code):
                offenders.append(f"{mod}:{i}: {line.strip()}")
    # Logical paths are named in the readers (topology/sysfs.py, tuning/paths.py, each tuning
    # subsystem's plugin for the files it alone reads and writes) and resolved by Host.
    named_here = (
        "mcpnode.topology.sysfs:",
        "mcpnode.tuning.paths:",
        "mcpnode.tuning.plugins.",
        "mcpnode.audit.paths:",
        "mcpnode.published:",
    )
    offenders = [o for o in offenders if not o.startswith(named_here)]
    assert offenders == []


def test_tuning_never_imports_topology_or_cli() -> None:
    """Tuning sits beside topology, not above it: a profile apply must not need discovery."""
    bad = [
        f"{mod} imports {imp}"
        for mod, path in modules()
        if mod.startswith("mcpnode.tuning")
        for imp in imports(path)
        if imp.startswith(("mcpnode.topology", "mcpnode.cli", "mcpnode.snapshot"))
    ]
    assert bad == []


def test_placement_plan_is_pure() -> None:
    """plan.py decides from the model alone: it imports the topology layer's pure modules, the
    leaf codecs and the errors, never Host, discovery, tuning or audit."""
    pure = (
        "mcpnode.codec.cpus",
        "mcpnode.codec.record",
        "mcpnode.errors",
        "mcpnode.topology.model",
        "mcpnode.topology.distance",
        "mcpnode.topology.matrix",
        "mcpnode.topology.parse",
    )
    assert [i for i in imports(PKG / "placement" / "plan.py") if i not in pure] == []
