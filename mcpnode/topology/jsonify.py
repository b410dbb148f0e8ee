"""The topology as JSON-ready data with a schema version. Stable: key order follows the
record classes' fields, collections are already sorted, so two runs on one machine diff clean."""

from __future__ import annotations

from typing import Any

from mcpnode.topology.model import (
    SCHEMA_VERSION,
    CpuSet,
    NumaNode,
    NvmlGpu,
    PciAddress,
    Topology,
    fields,
    is_record,
)

# Ids printed the way lspci and sysfs print them.
_HEX4 = frozenset(
    {"vendor_id", "device_id", "subsystem_vendor_id", "subsystem_device_id", "class_code"}
)


def jsonable(obj: Any, key: str | None = None) -> Any:
    if isinstance(obj, CpuSet):
        return obj.cpulist()
    if isinstance(obj, PciAddress):
        return str(obj)
    if is_record(obj) or (
        hasattr(type(obj), "__dataclass_fields__") and not isinstance(obj, type)
    ):  # a model record, or a renderer's own dataclass (render_gpus)
        out = {name: jsonable(getattr(obj, name), name) for name in fields(obj)}
        if isinstance(obj, NumaNode):
            out["cpuless"] = obj.cpuless
        if isinstance(obj, NvmlGpu) and obj.mig_devices is None:
            # Only in MIG mode, when known: the JSON of every other GPU (and of captures made
            # before MIG devices were enumerated) stays as it was; `unavailable` says why.
            del out["mig_devices"]
        return out
    if isinstance(obj, tuple | list):
        return [jsonable(x) for x in obj]
    if isinstance(obj, int) and not isinstance(obj, bool) and key in _HEX4:
        return f"0x{obj:04x}"
    if key == "prog_if" and isinstance(obj, int):
        return f"0x{obj:02x}"
    return obj


def topology_json(topo: Topology) -> dict[str, Any]:
    body = jsonable(topo)
    return {"schema": SCHEMA_VERSION, **body}
