"""Where mcpnode keeps its state on a host (logical paths, under the Host's root).

The state directory holds the tuning journal (its format: tuning/journal.py) and, beside it,
the state lock (state/lock.py); `--state-dir` moves both together.
"""

from __future__ import annotations

STATE_DIR = "/var/lib/mcpnode"
JOURNAL_PATH = f"{STATE_DIR}/tuning-journal.json"
