"""Fleet report: many published manifests in, per property the majority value and the hosts that
differ out. `load.py` reads a directory of manifests through Host, `properties.py` derives the
compared values from one manifest, `report.py` finds majorities and outliers (pure), and
`render.py` prints the result as text or JSON (`mcpnode.fleet-report/v1`). See docs/fleet.md."""
