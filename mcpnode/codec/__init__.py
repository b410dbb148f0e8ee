"""Pure value codecs: the leaf layer every other layer may import, and which imports nothing of
mcpnode's outside itself. Text in, values out (and back), no I/O, nothing run at import time.

- `printable`: control characters in text from files escaped for a terminal.
- `bounded`: decimals with a digit cap, and `BoundError`, the error the bounded codecs raise.
- `cpus`: the kernel's CPU list (`0-3,8`, `0-15:2/4`) and hex mask formats, both ways.
- `toml_bounded`, `yaml_bounded`: TOML and YAML parsed inside bounds a hostile file cannot pass.
- `record`: the `@record` value class (slotted, optionally frozen and ordered), `replace`,
  `fields`.
- `reading`: the result of a read that may fail: the text, or `Absent`, or `Unreadable` and why.

Modules are imported by their own name (`from mcpnode.codec.cpus import parse_list`): this
file imports none of them, so importing one codec costs only that codec.
"""
