"""YAML written by other programs, parsed with PyYAML's safe loader inside explicit bounds.

`safe_load` alone constructs only plain data (no arbitrary objects), but two inputs still hurt:
- deep nesting (`[[[[...` ten thousand levels): PyYAML's composer recurses once per level, so
  it ends in RecursionError;
- alias bombs ("billion laughs": nine levels of ten aliases each): the document is a few
  hundred bytes, the tree it stands for has 10^9 leaves, and any code that walks it hangs.
So the event stream is scanned first (the parser is a state machine and does not recurse):
depth and alias count are checked there, and only a document within bounds is constructed.
The text itself is bounded by the caller (Host.read_optional with a limit). Every refusal is one
`YamlRejected` line naming the problem and where; nothing else escapes.
"""

from __future__ import annotations

from typing import Any

MAX_DEPTH = 64  # kubelet configs nest 4 deep; CDI specs about 6
MAX_ALIASES = 16  # configuration files rarely use anchors at all


class YamlRejected(ValueError):
    """The text is not YAML within bounds; the message is one line."""


class YamlOverBounds(YamlRejected):
    """Valid YAML, as far as it was scanned, that is nested deeper than MAX_DEPTH or holds more
    than MAX_ALIASES aliases: refused unread, not known to be wrong (a caller may tell the two
    apart: "not checked" rather than "invalid")."""


def load_bounded(text: str) -> Any:
    """One YAML document as plain data (dict, list, str, int, float, bool, None, date).

    Raises YamlRejected for a syntax error, more than one document, or a value the safe
    constructor refuses; YamlOverBounds (a YamlRejected) for nesting deeper than MAX_DEPTH or
    more than MAX_ALIASES aliases."""
    # Imported here, not at module level: only a host with a kubelet configuration or a YAML
    # CDI spec pays for PyYAML (~1 MB of the agent's resident memory; the agent runs the audit
    # on every build).
    import yaml

    # libyaml's parser when PyYAML was built with it (Debian's python3-yaml and the PyPI wheels
    # are), the pure-Python one otherwise; both are the *safe* loaders.
    _Loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    depth = 0
    aliases = 0
    try:
        for event in yaml.parse(text, Loader=_Loader):
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                depth += 1
                if depth > MAX_DEPTH:
                    raise YamlOverBounds(
                        f"nested deeper than {MAX_DEPTH} levels{_where(event.start_mark)}"
                    )
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
            elif isinstance(event, yaml.AliasEvent):
                aliases += 1
                if aliases > MAX_ALIASES:
                    raise YamlOverBounds(
                        f"more than {MAX_ALIASES} aliases (an alias bomb?)"
                        f"{_where(event.start_mark)}"
                    )
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - _Loader is a SafeLoader
    except YamlRejected:
        raise
    except yaml.MarkedYAMLError as err:
        parts = [str(p) for p in (err.context, err.problem) if p]
        what = " ".join(": ".join(parts).split()) or "invalid YAML"
        raise YamlRejected(f"{what}{_where(err.problem_mark)}") from err
    except (yaml.YAMLError, RecursionError, ValueError, TypeError) as err:
        raise YamlRejected(" ".join(str(err).split()) or type(err).__name__) from err


def _where(mark: Any) -> str:
    if mark is None:
        return ""
    return f" at line {mark.line + 1}, column {mark.column + 1}"
