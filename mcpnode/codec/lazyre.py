"""`pattern(source)`: a regular expression compiled at its first use, then kept.

The commands that run hot (`topo`, `gpus`, `exec`) never import `re`: with `enum`, `re._parser`
and `re._compiler` it costs ~3 ms of their start on a quiet 2-core VM, and a module-level
`re.compile` also compiles at every import, whether the pattern is used or not. Host's few
patterns (the kernel log's record heads, a temporary file's name, a pax header's records) live
on paths those commands never take, so each is named here by its source, with its flags inline
(`(?a)` for re.ASCII), and compiled the first time it is matched.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (codec/typenames.py)
if TYPE_CHECKING:
    import re
    from typing import AnyStr

_COMPILED: dict[str | bytes, re.Pattern[str] | re.Pattern[bytes]] = {}


def pattern(source: AnyStr) -> re.Pattern[AnyStr]:
    """`re.compile(source)`, compiled once per process (re's own cache holds only 512 and is
    keyed per call)."""
    try:
        return _COMPILED[source]  # type: ignore[return-value]
    except KeyError:
        import re

        compiled = re.compile(source)
        _COMPILED[source] = compiled
        return compiled
