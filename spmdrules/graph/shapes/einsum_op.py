"""Shape and dtype inference of einsum (numpy's notation, with ``...``)."""

from __future__ import annotations

import string
from collections.abc import Mapping, Sequence
from typing import Any, Final

from spmdrules.graph.shapes import shape_rule
from spmdrules.graph.shapes.shape_rule import Arg, OutShape, ShapeContext

_ELLIPSIS_LETTERS: Final = "0123456789"  # internal labels of ellipsis dims (never user letters)


def _einsum(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    xs = shape_rule.list_arg(args, 0)
    eq = str(attrs.get("equation", "")).replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(xs):
        raise ctx.fail("equation", f"{eq!r} has {len(terms)} operand terms but {len(xs)} "
                       "operands were given", "write one comma-separated term per operand")
    sizes: dict[str, int] = {}
    ell_ndim = 0
    for k, (term, t) in enumerate(zip(terms, xs, strict=True)):
        full, n_ell = _expand_term(ctx, f"inputs[{k}]", term, tuple(t.shape))
        ell_ndim = max(ell_ndim, n_ell)
        _merge_sizes(ctx, f"inputs[{k}]", full, tuple(t.shape), sizes)
    ell = _ELLIPSIS_LETTERS[10 - ell_ndim :] if ell_ndim else ""
    out_labels = _explicit_output(ctx, rhs, ell, sizes) if arrow else _implicit_output(terms, ell)
    return (tuple(sizes.get(c, 1) for c in out_labels),)


def _expand_term(ctx: ShapeContext, name: str, term: str, shape: tuple[int, ...]
                 ) -> tuple[str, int]:
    """``term`` with its ``...`` spelled as internal labels, one per dim of ``shape``, and the
    number of dims the ellipsis stands for."""
    letters = term.replace("...", "")
    if any(c not in string.ascii_letters for c in letters) or term.count("...") > 1:
        raise ctx.fail("equation", f"term {term!r} holds characters other than letters and one "
                       "'...'", "use letters a-z/A-Z and at most one '...' per term")
    if "..." not in term:
        if len(letters) != len(shape):
            raise ctx.fail(name, f"has rank {len(shape)} but term {term!r} names "
                           f"{len(letters)} dims", "write one letter per dim (or use '...')")
        return letters, 0
    n_ell = len(shape) - len(letters)
    if n_ell < 0:
        raise ctx.fail(name, f"has rank {len(shape)} but term {term!r} names "
                       f"{len(letters)} dims", "drop letters or pass a higher-rank operand")
    pre, post = term.split("...")
    return pre + (_ELLIPSIS_LETTERS[10 - n_ell :] if n_ell else "") + post, n_ell


def _merge_sizes(ctx: ShapeContext, name: str, full: str, shape: tuple[int, ...],
                 sizes: dict[str, int]) -> None:
    """Record each label's size; a size of 1 broadcasts against the others."""
    for i, (c, n) in enumerate(zip(full, shape, strict=True)):
        old = sizes.get(c)
        if old is None or old == 1:
            sizes[c] = n
        elif n not in (1, old):
            what = "an ellipsis dim" if c in _ELLIPSIS_LETTERS else f"letter {c!r}"
            raise ctx.fail(name, f"dim {i} ({what}) has size {n} but another operand gives "
                           f"it size {old}", "make the sizes equal (or 1 to broadcast)")


def _explicit_output(ctx: ShapeContext, rhs: str, ell: str, sizes: Mapping[str, int]) -> str:
    if rhs.count("...") > 1 or any(c not in string.ascii_letters for c in rhs.replace("...", "")):
        raise ctx.fail("equation", f"output {rhs!r} is not letters and one '...'",
                       "write the output as letters, with at most one '...'")
    for c in rhs.replace("...", ""):
        if c not in sizes:
            raise ctx.fail("equation", f"output letter {c!r} appears in no operand",
                           "name only letters of the operands in the output")
        if rhs.count(c) > 1:
            raise ctx.fail("equation", f"output letter {c!r} repeats",
                           "name each output letter once")
    return rhs.replace("...", ell)


def _implicit_output(terms: Sequence[str], ell: str) -> str:
    """numpy's implicit output: the ellipsis dims, then the letters used exactly once, sorted."""
    counts: dict[str, int] = {}
    for term in terms:
        for c in term.replace("...", ""):
            counts[c] = counts.get(c, 0) + 1
    return ell + "".join(sorted(c for c, n in counts.items() if n == 1))


shape_rule.register(("einsum",), _einsum, shape_rule.promoted_dtype)
