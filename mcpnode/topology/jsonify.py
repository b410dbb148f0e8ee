"""The topology as JSON-ready data with a schema version. Stable: key order follows the
record classes' fields, collections are already sorted, so two runs on one machine diff clean."""

from __future__ import annotations

from mcpnode.codec.record import fields, is_record
from mcpnode.topology.model import (
    SCHEMA_VERSION,
    CpuSet,
    NumaNode,
    NvmlGpu,
    PciAddress,
    PciDevice,
    Topology,
)
from mcpnode.topology.pciclass import class_name

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (codec/typenames.py)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

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
        elif isinstance(obj, PciDevice):
            out["class_name"] = class_name(obj.class_code)
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
    """jsonable(topo) with the schema version first. The same data as jsonable() gives, built
    faster: an 8,192-VF host has ~50,000 records, and jsonable() asks each value of each of them
    what it is. Here each record class gets its field list and a converter per field once, the
    plain values (str, int, float, bool, None) pass through untouched, and each CpuSet and PCI
    address is printed once however many devices share it. Anything else takes jsonable()."""
    body = _Converter().record(topo)
    return {"schema": SCHEMA_VERSION, **body}


_PLAIN = frozenset({str, int, float, bool, type(None)})


class _Converter:
    """One topology_json() pass: the printed form of each CpuSet and PciAddress seen, by
    identity (the topology holds them all, so no id is reused during the pass)."""

    def __init__(self) -> None:
        self._printed: dict[int, str] = {}

    def value(self, v: Any) -> Any:
        t = type(v)
        if t in _PLAIN:
            return v
        if t is tuple or t is list:
            return [self.value(x) for x in v]
        if t is CpuSet or t is PciAddress:
            printed = self._printed.get(id(v))
            if printed is None:
                printed = self._printed[id(v)] = v.cpulist() if t is CpuSet else str(v)
            return printed
        if hasattr(t, "__record_fields__"):
            return self.record(v)
        return jsonable(v)

    def record(self, obj: Any) -> dict[str, Any]:
        cls = type(obj)
        plan = _PLANS.get(cls)
        if plan is None:
            plan = _PLANS[cls] = tuple((n, self._for_field(n)) for n in fields(cls))
        out = {name: conv(self, getattr(obj, name)) for name, conv in plan}
        if cls is NumaNode:
            out["cpuless"] = obj.cpuless
        elif cls is PciDevice:
            out["class_name"] = class_name(obj.class_code)  # as jsonable() does
        elif cls is NvmlGpu and obj.mig_devices is None:
            del out["mig_devices"]  # as jsonable() does, and why
        return out

    @staticmethod
    def _for_field(name: str) -> Callable[[_Converter, Any], Any]:
        """jsonable()'s rule for a value under key `name`, as an unbound converter."""
        if name in _HEX4:
            return _Converter._hex4
        if name == "prog_if":
            return _Converter._prog_if
        return _Converter.value

    def _hex4(self, v: Any) -> Any:
        if isinstance(v, int) and not isinstance(v, bool):
            return f"0x{v:04x}"
        return self.value(v)

    def _prog_if(self, v: Any) -> Any:
        return f"0x{v:02x}" if isinstance(v, int) else self.value(v)


# Per record class: (field, converter) in field order, made on first use.
_PLANS: dict[type, tuple[tuple[str, Callable[[_Converter, Any], Any]], ...]] = {}
