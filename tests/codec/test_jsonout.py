"""codec/jsonout.py writes json.dumps(obj, indent=2)'s exact text: on generated documents (every
type json takes, subclasses, every key type, empty and deep containers, strings json must
escape), whatever the piece size, and it refuses what json refuses with json's TypeError."""

from __future__ import annotations

import collections
import enum
import json
import random
from typing import Any

import pytest

from mcpnode.codec import jsonout


class _Int(enum.IntEnum):
    MELLANOX = 0x15B3


class _Str(str):
    pass


class _Float(float):
    pass


_STRINGS = ["", "a", 'quo"te', "back\\slash", "tab\tnew\nline\r", "\x00\x1f\x7f", "é", "中文",
            "\U0001f600", "</script>", " spaced ", "0x15b3", "-1"]  # fmt: skip
_FLOATS = [0.0, -0.0, 1.5, -2.25, 1e300, 1e-300, 3.141592653589793, float("nan"), float("inf"),
           float("-inf"), 0.1 + 0.2]  # fmt: skip
_INTS = [0, 1, -1, 255, 2**63, -(2**70), True, False, _Int.MELLANOX]


def _scalar(rng: random.Random) -> Any:
    pick = rng.randrange(7)
    if pick == 0:
        return rng.choice(_STRINGS)
    if pick == 1:
        return _Str(rng.choice(_STRINGS))
    if pick == 2:
        return rng.choice(_FLOATS)
    if pick == 3:
        return _Float(rng.choice([1.0, -3.5, 2e10]))
    if pick == 4:
        return rng.choice(_INTS)
    if pick == 5:
        return None
    return rng.randrange(-(10**6), 10**6)


def _key(rng: random.Random) -> Any:
    return rng.choice([*_STRINGS, "k1", "k2", 0, -5, 2.5, float("nan"), True, False, None,
                       _Int.MELLANOX, _Str("sub")])  # fmt: skip


def _doc(rng: random.Random, depth: int) -> Any:
    if depth <= 0 or rng.random() < 0.3:
        return _scalar(rng)
    kind = rng.randrange(5)
    n = rng.choice([0, 1, 2, 3, 5])
    if kind == 0:
        return [_doc(rng, depth - 1) for _ in range(n)]
    if kind == 1:
        return tuple(_doc(rng, depth - 1) for _ in range(n))
    if kind == 2:
        return collections.OrderedDict((_key(rng), _doc(rng, depth - 1)) for _ in range(n))
    return {_key(rng): _doc(rng, depth - 1) for _ in range(n)}


@pytest.mark.parametrize("seed", range(300))
def test_generated_documents_are_json_dumps(seed: int) -> None:
    rng = random.Random(seed)
    doc = _doc(rng, rng.randrange(1, 7))
    assert jsonout.dumps(doc) == json.dumps(doc, indent=2)


def test_a_top_level_scalar_and_empty_containers() -> None:
    docs: list[Any] = ["x", 1, 1.5, None, True, [], {}, (), [[]], {"a": {}}, [{}], [[], [[]]]]
    for doc in docs:
        assert jsonout.dumps(doc) == json.dumps(doc, indent=2)


def test_pieces_join_to_the_same_text(monkeypatch: pytest.MonkeyPatch) -> None:
    doc = {"devices": [{"address": f"0000:{i:02x}:00.0", "vfs": list(range(i))} for i in range(60)]}
    want = json.dumps(doc, indent=2)
    for flush in (1, 2, 7, 100, 10**6):
        monkeypatch.setattr(jsonout, "_FLUSH", flush)
        pieces: list[str] = []
        jsonout.write_json(doc, pieces.append)
        assert "".join(pieces) == want
        assert len(pieces) > 1 if flush < 60 else len(pieces) >= 1


@pytest.mark.parametrize(
    "doc",
    [object(), {"a": {1, 2}}, [b"bytes"], {(1, 2): "tuple key"}, {"x": [1, complex(1, 2)]}],
)
def test_what_json_refuses_is_refused_alike(doc: Any) -> None:
    with pytest.raises(TypeError) as theirs:
        json.dumps(doc, indent=2)
    with pytest.raises(TypeError) as ours:
        jsonout.dumps(doc)
    assert str(ours.value) == str(theirs.value)


def test_without_the_c_accelerator_it_writes_the_same() -> None:
    """An interpreter without `_json` (its import fails): json.encoder's pure-Python string
    encoders, the same text as json.dumps (which uses the same fallbacks there)."""
    import subprocess
    import sys

    doc = {"s": _STRINGS, "n": [1, 2.5, None, True], "nested": {"k": ["é", "中文"]}}
    code = (
        "import sys; sys.modules['_json'] = None\n"
        "import json\n"
        "from mcpnode.codec import jsonout\n"
        "assert jsonout.encode_basestring_ascii is json.encoder.py_encode_basestring_ascii\n"
        f"doc = json.loads({json.dumps(json.dumps(doc))})\n"
        "for ascii in (True, False):\n"
        "    assert jsonout.dumps(doc, ensure_ascii=ascii) == json.dumps(\n"
        "        doc, indent=2, ensure_ascii=ascii\n"
        "    )\n"
        "print(len(jsonout.dumps(doc)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout == f"{len(json.dumps(doc, indent=2))}\n"
