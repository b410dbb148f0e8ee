"""`mcpnode probe`: host<->GPU copy bandwidth from every NUMA node and GPU<->GPU peer bandwidth,
measured through the CUDA driver API and judged against what the links promise (docs/probe.md).

model.py     the raw recorded run (`mcpnode.probe/v1`) and its strict JSON reader
expected.py  what a PCIe path or a set of NVLinks should carry (pure)
analysis.py  run + topology + placement -> per-GPU figures, fastest node, findings (pure)
record.py    where a run is kept (a snapshot's `mcpnode-probe.json`, the host's last probe)
live.py      the measurement itself, through `cuda-bindings` (the `mcpnode[probe]` extra)
area.py      the audit area `probe.*` that `mcpnode audit --probe` adds
"""
