"""Placement: where each GPU's work should run (plan.py, pure) and the manifest that publishes
it (manifest.py, build.py)."""
