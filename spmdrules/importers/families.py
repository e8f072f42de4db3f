"""Which rule family serves an op of a source model: the suggestions of an unmapped op.

The suggestions come from the rule families (``rules/<family>.py``: the ``family`` of every
registered op's shape rule), not from spelling alone. An op is placed in a family by its name
(the family's op of that very name, or of several of its words: ``batch_norm`` in
``_native_batch_norm_legit``; else a family whose name begins one of its words: ``conv`` in
``convolution``, ``pool`` in ``max_pool2d_with_indices``; else an op named by one of its words:
``mean`` in ``ReduceMean``), then by the source framework's own category of the op (torch's
``pointwise`` and ``reduction`` operator tags), then by the family of the mapped op of the same
arguments closest in name (``cumsum`` for ``cumprod``), and only then by the closest registered
name.
The family's forward ops are listed, the closest to the op's name first.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from functools import cache

from spmdrules.graph.shapes import SHAPE_RULES

#: a source framework's op categories (torch's operator tags) -> the family that serves them
CATEGORY_FAMILIES = {"pointwise": "elementwise", "reduction": "reduction"}
#: the last resort, a registered name this close (difflib's ratio): above ``grouped_mm`` against
#: ``group_norm`` (0.70), which share letters and nothing else
SPELLING_CUTOFF = 0.72


def base_name(op: str) -> str:
    """The op's own name as the importers spell ops: ``aten.max_pool2d.default``,
    ``mylib.rms_norm_rope.default`` and ``aten::max_pool2d`` give ``max_pool2d`` and
    ``rms_norm_rope`` (torch: namespace, name, overload); ``Resize`` and ``com.microsoft.Gelu``
    give ``Resize`` and ``Gelu`` (ONNX: the op type, after its domain)."""
    if "::" in op:
        return op.split("::")[-1].split(".")[0]
    parts = op.split(".")
    torch_like = len(parts) == 3 and (parts[1][:1].islower() or parts[1][:1] == "_") and (
        not parts[2][:1].isupper() or parts[2] in _OVERLOAD_WORDS)
    return parts[1] if torch_like else parts[-1]


#: torch overload names that begin with a capital (ONNX op types do too)
_OVERLOAD_WORDS = frozenset({"Tensor", "Scalar", "Tensor_Tensor", "Tensor_Scalar",
                             "Scalar_Tensor", "Tensor_mode", "Scalar_mode"})


def words(name: str) -> list[str]:
    """``max_pool2d_with_indices`` -> max, pool2d, with, indices; ``ConvTranspose`` -> conv,
    transpose (an ONNX op type is CamelCase)."""
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()
    return [w for w in snake.split("_") if w]


@cache
def families() -> dict[str, tuple[str, ...]]:
    """Family -> its forward ops (a gradient op is not what a converter maps onto)."""
    out: dict[str, list[str]] = {}
    for op, rule in SHAPE_RULES.items():
        if not op.endswith("_grad"):
            out.setdefault(rule.family, []).append(op)
    return {f: tuple(ops) for f, ops in out.items()}


def family_of(name: str, categories: Iterable[str] = (), like: Iterable[str] = ()) -> str | None:
    """The rule family that serves the op named ``name`` (a base name: ``base_name``), or None.

    ``categories`` are the source framework's categories of the op (torch's operator tags);
    ``like`` are its mapped ops that take the same arguments (torch's ``cumsum``, ``softmax``
    and ``log_softmax`` for ``cumprod``): when neither the name nor a category says, the family
    of the one closest in name."""
    ws = words(name)
    if not ws:
        return None
    ops = {op: rule.family for op, rule in SHAPE_RULES.items()}
    fam = _by_name(ws, ops)
    if fam is None:
        fam = next((CATEGORY_FAMILIES[c] for c in categories if c in CATEGORY_FAMILIES), None)
    if fam is None:
        fam = _by_likeness(name, "_".join(ws), like)
    if fam is None:
        close = difflib.get_close_matches("_".join(ws), list(ops), n=1, cutoff=SPELLING_CUTOFF)
        fam = ops[close[0]] if close else None
    return fam


def _by_name(ws: list[str], ops: dict[str, str]) -> str | None:
    """The family the name's words say: a mapped op of several words in them (batch_norm,
    index_put), else a family that starts a word (conv in convolution, pool in pool2d), else a
    mapped op of one word."""
    runs = ["_".join(ws[i:j]) for i in range(len(ws)) for j in range(i + 1, len(ws) + 1)]
    named = sorted((r for r in runs if r in ops), key=lambda r: (-r.count("_"), -len(r)))
    if named and "_" in named[0]:
        return ops[named[0]]
    by_length = sorted(families(), key=len, reverse=True)
    fam = next((f for w in ws for f in by_length if len(f) >= 4 and w.startswith(f)), None)
    if fam is None and named:
        fam = ops[named[0]]
    return fam


def _by_likeness(name: str, joined: str, like: Iterable[str]) -> str | None:
    """The family of the closest in name of the ops that take the same arguments."""
    for other in sorted({o for o in like if o != name},
                        key=lambda o: (-difflib.SequenceMatcher(None, joined, o).ratio(), o)):
        if (fam := family_of(other)) is not None:
            return fam
    return None


def suggest(op: str, categories: Iterable[str] = (), like: Iterable[str] = (),
            n: int = 4) -> tuple[str | None, list[str]]:
    """The family serving ``op`` (any spelling: ``base_name``) and its ``n`` forward ops closest
    to the op's name."""
    name = base_name(op)
    fam = family_of(name, categories, like)
    if fam is None:
        return None, []
    joined = "_".join(words(name))
    ranked = sorted(families()[fam],
                    key=lambda o: (-difflib.SequenceMatcher(None, joined, o).ratio(), o))
    return fam, ranked[:n]


def describe(op: str, categories: Iterable[str] = (), like: Iterable[str] = ()) -> str:
    """``the conv family (rules/conv.py) serves a similar computation: conv2d, ...``."""
    fam, ops = suggest(op, categories, like)
    if fam is None:
        return "no rule family serves it by name or category"
    return f"the {fam} family (rules/{fam}.py) serves a similar computation: {', '.join(ops)}"


__all__ = ["CATEGORY_FAMILIES", "SPELLING_CUTOFF", "base_name", "describe", "families",
           "family_of", "suggest", "words"]
