"""Pure value codecs: the leaf layer every other layer may import, and which imports nothing of
mcpnode's outside itself. Text in, values out (and back), no I/O, nothing run at import time.

- `printable`: control characters in text from files escaped for a terminal.
- `bounded`: decimals with a digit cap and cpulists parsed linearly, and `BoundError`.

Modules are imported by their own name (`from mcpnode.codec.printable import printable`): this
file imports none of them, so importing one codec costs only that codec.
"""
