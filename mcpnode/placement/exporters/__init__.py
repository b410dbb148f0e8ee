"""Exporters: the placement and audit state in the formats other tools read.

One module per kind, each a pure `render(topology, placement, audit) -> str` (no I/O):
`nfd` (Kubernetes Node Feature Discovery feature file), `prom` (node_exporter textfile),
`slurm` (gres.conf lines), `ansible` (local facts). `write.py` collects the inputs and writes
the result atomically through `Host`; `mcpnode export KIND` is its command.
"""
