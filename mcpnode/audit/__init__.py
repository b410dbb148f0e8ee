"""The preflight audit: per area, a collector reads facts once through Host, and pure checks
turn those facts into findings. Renderers (text, json, junit) live in cli/."""
