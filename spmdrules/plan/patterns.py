"""The language of plan keys: which tensors and modules of a graph a key names.

A key is read in one of two ways, decided once per key over the whole graph:

1. **A name.** When the key is the name of a tensor or a module of the graph, or a dotted tail of
   one (``q_proj`` is a tail of ``model.layers.0.self_attn.q_proj``, ``0.q_proj`` too, ``proj``
   is not), it names exactly the names it is or ends, after a dot. Its characters are not
   special: ``h[1]`` names the tensor ``h[1]``.
2. **A glob** otherwise, in ``fnmatch``'s syntax: ``*`` any run of characters (dots included),
   ``?`` one character, ``[seq]`` one character of ``seq``, ``[!seq]`` one not in it. It names
   every name that it matches whole, or whose dotted tail it matches (``layers.*.mlp`` matches
   ``model.layers.0.mlp``, not ``model.xlayers.0.mlp``).

To write a glob that holds a literal ``[``, ``*`` or ``?``, put it in brackets: ``[[]``,
``[*]``, ``[?]`` (``glob.escape`` does it for a whole name); ``]`` alone is literal. So
``h[[]1]*`` matches ``h[1].weight`` and ``h[1]``, and ``x[0]`` names the tensor ``x[0]`` when
there is one, or else, as a glob, ``x0``.

Names are indexed by every dotted tail, so a name key is one dictionary look-up and a glob reads
only the tails that begin with its literal prefix (the characters before its first ``*``, ``?``
or ``[``): applying a plan is linear in its entries. A glob that begins with a wildcard
(``*.q_proj``) reads every tail.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Iterable, Iterator
from fnmatch import fnmatchcase, translate
from glob import escape

#: the characters that make a glob: its literal prefix ends at the first of them
_WILDCARD = re.compile(r"[*?\[]")


def tails(name: str) -> Iterator[str]:
    """``name`` and each of its dotted tails, longest first (``a.b.c``, ``b.c``, ``c``)."""
    yield name
    i = name.find(".")
    while i >= 0:
        yield name[i + 1:]
        i = name.find(".", i + 1)


def matches(name: str, pattern: str) -> bool:
    """Whether the glob ``pattern`` matches ``name`` or one of its dotted tails (the glob half of
    the language; a key that is a name of the graph is read as that name, see the module docs).

    >>> matches("model.layers.0.mlp.down_proj", "layers.*.mlp.down_proj")
    True
    >>> matches("h[1].weight", "h[[]1]*"), matches("h1.weight", "h[[]1]*")
    (True, False)
    """
    return any(fnmatchcase(t, pattern) for t in tails(name))


def generic(name: str) -> str:
    """``name`` as a glob with each dotted part that is a number (a layer's index) a ``*``, as
    Hugging Face's plans write it (``model.layers.*.mlp``); its other characters escaped."""
    return ".".join("*" if p.isdigit() else escape(p) for p in name.split("."))


def candidates(key: str, names: Iterable[str]) -> set[str]:
    """Keys to offer for an unmatched ``key``, each matching some of ``names``: the names
    themselves and, when ``key`` is a glob, every dotted tail of their generic forms
    (``layers.*.self_attn.q_proj``; after ``*.`` when ``key`` begins with a wildcard:
    ``*.q_proj``), so that a misspelt glob is compared with globs of its own shape."""
    out = set(names)
    if _WILDCARD.search(key):
        lead = "*." if key.startswith("*") else ""
        for name in list(out):
            whole = generic(name)
            for tail in tails(whole):
                if tail.strip("*."):  # a tail of wildcards alone would match anything
                    # "*." needs a part before the tail: the whole name has none
                    out.add(tail if tail.startswith("*") or tail == whole else lead + tail)
    return out


class Names:
    """Names that keys are matched against (a graph's tensors, or its modules), in their order,
    indexed by every dotted tail."""

    def __init__(self, names: Iterable[str]) -> None:
        self.names = list(names)
        self._by_tail: dict[str, list[int]] = {}
        for i, n in enumerate(self.names):
            for t in tails(n):
                self._by_tail.setdefault(t, []).append(i)
        self._sorted_tails = sorted(self._by_tail)

    def has(self, key: str) -> bool:
        """Whether ``key`` is one of the names or a dotted tail of one."""
        return key in self._by_tail

    def named(self, key: str) -> list[str]:
        """The names that are ``key`` or end in ``.key``, in order."""
        return [self.names[i] for i in self._by_tail.get(key, ())]  # each name once, in order

    def globbed(self, pattern: str) -> list[str]:
        """The names the glob ``pattern`` matches whole or by a dotted tail, in order."""
        wildcard = _WILDCARD.search(pattern)
        prefix = pattern[:wildcard.start()] if wildcard else pattern
        match = re.compile(translate(pattern)).match
        hit: set[int] = set()
        for j in range(bisect_left(self._sorted_tails, prefix), len(self._sorted_tails)):
            t = self._sorted_tails[j]
            if not t.startswith(prefix):
                break
            if match(t):
                hit.update(self._by_tail[t])
        return [self.names[i] for i in sorted(hit)]


class GraphNames:
    """A graph's tensors and modules, and the reading of a key over both (see the module docs)."""

    def __init__(self, tensors: Iterable[str], modules: Iterable[str]) -> None:
        self.tensors = Names(tensors)
        self.modules = Names(modules)

    def is_name(self, key: str) -> bool:
        """Whether ``key`` is read as a name (it is, or ends, a tensor's or a module's name)."""
        return self.tensors.has(key) or self.modules.has(key)

    def tensors_of(self, key: str) -> list[str]:
        return self.tensors.named(key) if self.is_name(key) else self.tensors.globbed(key)

    def modules_of(self, key: str) -> list[str]:
        return self.modules.named(key) if self.is_name(key) else self.modules.globbed(key)
