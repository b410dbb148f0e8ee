"""Values out of one Host.read_directory() batch (text or the HostError reading it raised),
recorded the way sysfs.read_parsed records a single file: absent is None silently, an error or
garbage is None and a Problem naming the file. Shared by the readers that batch a directory's
attributes (caches.py, rdmaports.py)."""

from __future__ import annotations

from mcpnode.errors import HostError
from mcpnode.topology import parse
from mcpnode.topology.sysfs import Problems

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (codec/typenames.py)
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import TypeVar

    from mcpnode.host import HostReader

    T = TypeVar("T")


def read_attrs(
    host: HostReader, path: str, names: frozenset[str], problems: Problems, code: str
) -> Mapping[str, str | HostError] | None:
    """One read_directory() of `path` for `names`; None, and a Problem `code` naming the
    directory, when it cannot be listed."""
    try:
        return host.read_directory(path, names)[0]
    except HostError as err:
        problems.add(code, path, f"{type(err).__name__}: {err.detail}")
        return None


def attr_text(
    path: str, attrs: Mapping[str, str | HostError], name: str, problems: Problems
) -> str | None:
    """The text of attribute `name` of directory `path`, cut at a NUL (hwloc-gather-topology
    dumps end some values with one, sysfs.read_parsed says why); None when absent or unreadable
    (then a `read.error` Problem)."""
    text = attrs.get(name)
    if isinstance(text, HostError):
        problems.add("read.error", f"{path}/{name}", f"{type(text).__name__}: {text.detail}")
        return None
    return None if text is None else text.split("\x00", 1)[0]


def attr_parsed(
    path: str,
    attrs: Mapping[str, str | HostError],
    name: str,
    parser: Callable[[str], T],
    problems: Problems,
) -> T | None:
    """attr_text() through `parser`; a ParseError is a `read.garbage` Problem and None."""
    text = attr_text(path, attrs, name, problems)
    if text is None:
        return None
    try:
        return parser(text)
    except parse.ParseError as err:
        problems.add("read.garbage", f"{path}/{name}", str(err))
        return None
