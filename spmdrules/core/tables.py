"""The op tables every layer keeps (rules, shapes, kernels, VJPs, verify cases, lowerings, ...).

Each layer owns its table of op name -> entry and fills it from its family modules; the
top-level ``spmdrules.register_op`` fills them all for an op from outside the package. A table
is an ``OpTable``: a read-only mapping whose only writer is ``add``, which remembers where each
entry came from and refuses a second entry for a name with one
``DuplicateRegistrationError``, whatever the table.

Where an entry came from is the registering call's file and line, and the plugin being loaded
when there is one (``spmdrules.core.plugins``), so that a clash between two plugins, or between a
plugin and the package, names both.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Generic, TypeVar

from spmdrules.core.errors import DuplicateRegistrationError

V = TypeVar("V")

#: the plugin whose code is running, set while ``spmdrules.core.plugins`` loads one
_loading: list[str] = []


@contextlib.contextmanager
def loading(plugin: str) -> Iterator[None]:
    """Registrations made inside this block come from ``plugin``."""
    _loading.append(plugin)
    try:
        yield
    finally:
        _loading.pop()


def caller(depth: int = 1) -> str:
    """``file:line`` of the frame ``depth`` levels above the function that calls this one (0:
    that function itself), with the plugin being loaded: the origin of a registration."""
    frame = sys._getframe(depth + 1)  # noqa: SLF001 -- the caller's frame: no public equivalent as cheap
    where = f"{frame.f_code.co_filename}:{frame.f_lineno}"
    return f"{where} (plugin {_loading[-1]})" if _loading else where


class OpTable(Mapping[str, V], Generic[V]):
    """Op name -> entry, filled once per name by ``add``; ``what`` names an entry in errors
    ("kernel", "shape rule", ...)."""

    __slots__ = ("_entries", "_origins", "lookup", "what")

    def __init__(self, what: str) -> None:
        self.what = what
        self._entries: dict[str, V] = {}
        self._origins: dict[str, str] = {}
        #: ``table.lookup(name)``: the entry or None, as fast as a dict's ``get`` (it is one),
        #: for the lookups of every op call (a rule, a kernel)
        self.lookup: Callable[[str], V | None] = self._entries.get

    def add(self, name: str, entry: V, origin: str | None = None) -> None:
        """Add ``entry`` under ``name``; ``origin`` defaults to the caller of ``add``'s caller
        (the family module or plugin that registers, through one registering function)."""
        where = origin if origin is not None else caller(2)
        if name in self._entries:
            raise DuplicateRegistrationError(name, self.what, self._origins[name], where)
        self._entries[name] = entry
        self._origins[name] = where

    def add_all(self, names: Sequence[str], entry: V, origin: str) -> None:
        """Add ``entry`` under every name of ``names``, or under none when one is taken."""
        self.check_new(tuple(names), origin)
        for n in names:
            self.add(n, entry, origin)

    def check_new(self, names: tuple[str, ...], origin: str) -> None:
        """Raise as ``add`` would for the first of ``names`` that has an entry already (checked
        before an op's registration writes any table, so that a clash leaves none half-filled)."""
        for n in names:
            if n in self._entries:
                raise DuplicateRegistrationError(n, self.what, self._origins[n], origin)

    def copy(self) -> OpTable[V]:
        """A table with the same entries, to register into without touching this one."""
        out: OpTable[V] = OpTable(self.what)
        out._entries.update(self._entries)
        out._origins.update(self._origins)
        return out

    @contextlib.contextmanager
    def restored(self) -> Iterator[None]:
        """The entries added inside the block are gone after it: a test that registers scratch
        ops leaves the table as it found it (lookups bound to the table see both states)."""
        entries, origins = dict(self._entries), dict(self._origins)
        try:
            yield
        finally:
            self._entries.clear()
            self._entries.update(entries)
            self._origins.clear()
            self._origins.update(origins)

    def origin(self, name: str) -> str:
        """Where ``name``'s entry was registered."""
        return self._origins[name]

    def __getitem__(self, name: str) -> V:
        return self._entries[name]

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"<OpTable of {len(self)} {self.what}s>"


__all__ = ["OpTable", "caller", "loading"]
