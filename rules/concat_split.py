"""Joining and cutting along one axis: concat, stack, add_n (join) and split, split_with_num,
unbind (cut), each a Description of a *whole* tensor and its *pieces* along the op axis.

The op axis is never sharded (a piece boundary would fall inside a shard): it is a ``claimed``
letter, which takes part in the merge but is whole in every answer. Every other axis merges as
an elementwise op's. Pieces either keep the op axis (concat, split: ``abc`` <-> ``abc``) or lose
it (stack, unbind: ``ac`` <-> ``abc``). A list output answers flat, one attribute per piece.

The policy: forward concat and stack align their pieces by Paddle's cost
(``Policy(align=True)``, :mod:`spmdrules.engine.align`); unbind's pieces keep x's pending results
(``linear``, every reduce type); add_n's pieces are summands, pending alike or not at all; the
cuts keep a masked pending sum masked (``masks="single"``).
"""

from __future__ import annotations

from collections.abc import Sequence

from spmdrules.core.errors import RuleArgumentError
from spmdrules.engine.described import register_described
from spmdrules.engine.description import Description, letters
from spmdrules.engine.policy import EVERY_REDUCTION, LINEAR_REDUCTIONS, Policy
from spmdrules.engine.registry import A, T, Vec
from spmdrules.engine.rulekit import normalise_axis

Shape = tuple[int, ...]

#: the pending results a join keeps, where every piece has them (read by conformance)
LINEAR_REDUCE = LINEAR_REDUCTIONS

_ALIGNED = Policy(align=True)
_CUT = Policy(masks="single")
# Deviation UnbindPartialOutput: the pieces of a partial tensor are partial; Paddle drops it.
_UNBOUND = Policy(masks="single", linear_types=EVERY_REDUCTION)
_SUMMANDS = Policy(summands=True, linear_types=LINEAR_REDUCTIONS)


# ---- shape checks --------------------------------------------------------------------------------
def _need_pieces(name: str, pieces: Sequence[Shape]) -> None:
    if not pieces:
        raise RuleArgumentError(f"{name!r} is an empty list; give at least one tensor")


def _same_rank(name: str, pieces: Sequence[Shape], ndim: int) -> None:
    for i, s in enumerate(pieces):
        if len(s) != ndim:
            raise RuleArgumentError(
                f"'{name}[{i}]' has rank {len(s)} but '{name}[0]' has rank {ndim}; every "
                "tensor of the list must have the same rank"
            )


def _same_shape_except(name: str, pieces: Sequence[Shape], axis: int | None, ref: Shape,
                       ref_name: str) -> None:
    for i, s in enumerate(pieces):
        for d, (a, b) in enumerate(zip(s, ref, strict=True)):
            if d != axis and a != b:
                raise RuleArgumentError(
                    f"'{name}[{i}]' dim {d} has size {a} but {ref_name} has {b}; only the op "
                    f"axis {axis} may differ" if axis is not None else
                    f"'{name}[{i}]' dim {d} has size {a} but {ref_name} has {b}; every tensor "
                    "must have the same shape"
                )


def _check_whole(name: str, whole: Shape, expect: Shape) -> None:
    if whole != expect:
        raise RuleArgumentError(
            f"{name!r} has shape {list(whole)} but the pieces give {list(expect)}"
        )


def _rank_at_least_1(name: str, shape: Shape) -> None:
    if not shape:
        raise RuleArgumentError(f"{name!r} is a 0-d tensor; it has no axis to split or join on")


def _cut(ls: str, a: int, keeps_axis: bool) -> str:
    """A piece's letters: the whole's, without the op axis where the piece loses it."""
    return ls if keeps_axis else ls[:a] + ls[a + 1:]


# ---- concat and stack: join the pieces `x` -------------------------------------------------------
def _concat_axis(x: Sequence[Shape], axis: int) -> int:
    _need_pieces("x", x)
    ndim = len(x[0])
    _rank_at_least_1("x[0]", x[0])
    _same_rank("x", x, ndim)
    a = normalise_axis("concat", "x", axis, ndim)
    _same_shape_except("x", x, a, x[0], "'x[0]'")
    return a


def concat(x: tuple[Shape, ...], *, axis: int) -> Description:
    """``abc,abc,..->abc``, the axis claimed. Deviations partial-pieces-kept (the concat of
    pending pieces is pending) and join-reverse-echoes-out (reverse gives the out the local
    concat yields; Paddle echoes ``out``)."""
    a = _concat_axis(x, axis)
    ls = letters(len(x[0]))
    return Description((ls,), (ls,), claimed=frozenset(ls[a]), policy=_ALIGNED)


def _check_concat_out(x: tuple[Shape, ...], out: Shape, axis: int) -> None:
    a = _concat_axis(x, axis)
    _check_whole("out", out, (*x[0][:a], sum(s[a] for s in x), *x[0][a + 1:]))


def _stack_axis(x: Sequence[Shape], axis: int) -> int:
    _need_pieces("x", x)
    ndim = len(x[0])
    _same_rank("x", x, ndim)
    _same_shape_except("x", x, None, x[0], "'x[0]'")
    return normalise_axis("stack", "x", axis, ndim, allow_end=True)


def stack(x: tuple[Shape, ...], *, axis: int) -> Description:
    """``ac,ac,..->abc``: the new axis only in the output (deviation join-reverse-echoes-out)."""
    a = _stack_axis(x, axis)
    ls = letters(len(x[0]) + 1)
    return Description((_cut(ls, a, False),), (ls,), claimed=frozenset(ls[a]), policy=_ALIGNED)


def _check_stack_out(x: tuple[Shape, ...], out: Shape, axis: int) -> None:
    a = _stack_axis(x, axis)
    _check_whole("out", out, (*x[0][:a], len(x), *x[0][a:]))


# ---- split / split_with_num / unbind: cut the whole `x` into `outs` ------------------------------
def _pieces(x: Shape, a: int, n: int, keeps_axis: bool, policy: Policy = _CUT) -> Description:
    ls = letters(len(x))
    return Description((ls,), (_cut(ls, a, keeps_axis),) * n, claimed=frozenset(ls[a]),
                       linear=(0,) if policy.linear_types != _CUT.linear_types else (),
                       policy=policy)


def _split_sizes(x: Shape, sections: tuple[int, ...], axis: int) -> tuple[int, tuple[int, ...]]:
    _rank_at_least_1("x", x)
    a = normalise_axis("split", "x", axis, len(x))
    n = x[a]
    if not sections:
        raise RuleArgumentError("'sections' is empty; give at least one section size")
    if any(s < -1 for s in sections) or sections.count(-1) > 1:
        raise RuleArgumentError(
            f"'sections' {list(sections)} may hold sizes >= 0 and at most one -1 (inferred)"
        )
    known = sum(s for s in sections if s != -1)
    if -1 in sections:
        if known > n:
            raise RuleArgumentError(
                f"'sections' {list(sections)} add up to {known}, more than the size {n} of 'x' "
                f"dim {a}"
            )
        sections = tuple(n - known if s == -1 else s for s in sections)
    elif known != n:
        raise RuleArgumentError(
            f"'sections' {list(sections)} add up to {known} but 'x' dim {a} has size {n}; "
            "make them sum to the dim size (or use -1 for one of them)"
        )
    return a, sections


def _check_pieces(x: Shape, outs: Sequence[Shape], a: int, sizes: Sequence[int] | None) -> None:
    """Each out is x cut at axis ``a`` (size ``sizes[i]``), or x without axis ``a`` (unbind)."""
    for i, o in enumerate(outs):
        want = (*x[:a], *x[a + 1:]) if sizes is None else (*x[:a], sizes[i], *x[a + 1:])
        if o != want:
            raise RuleArgumentError(
                f"'outs[{i}]' has shape {list(o)} but cutting 'x' {list(x)} at dim "
                f"{a} gives {list(want)}"
            )


def _count(outs: Sequence[Shape], n: int, what: str) -> None:
    if len(outs) != n:
        raise RuleArgumentError(f"'outs' holds {len(outs)} tensors but {what} gives {n}")


def split(x: Shape, *, sections: tuple[int, ...], axis: int) -> Description:
    a, sizes = _split_sizes(x, sections, axis)
    return _pieces(x, a, len(sizes), keeps_axis=True)


def _check_split_outs(x: Shape, outs: tuple[Shape, ...], sections: tuple[int, ...],
                      axis: int) -> None:
    a, sizes = _split_sizes(x, sections, axis)
    _count(outs, len(sizes), f"'sections' {list(sections)}")
    _check_pieces(x, outs, a, sizes)


def _num_sizes(x: Shape, num: int, axis: int) -> tuple[int, tuple[int, ...]]:
    _rank_at_least_1("x", x)
    a = normalise_axis("split_with_num", "x", axis, len(x))
    n = x[a]
    if num < 1 or n % num:
        raise RuleArgumentError(
            f"'num' {num} must be >= 1 and divide the size {n} of 'x' dim {a}"
        )
    return a, (n // num,) * num


def split_with_num(x: Shape, *, num: int, axis: int) -> Description:
    a, _ = _num_sizes(x, num, axis)
    return _pieces(x, a, num, keeps_axis=True)


def _check_split_with_num_outs(x: Shape, outs: tuple[Shape, ...], num: int, axis: int) -> None:
    a, sizes = _num_sizes(x, num, axis)
    _count(outs, num, f"'num' {num}")
    _check_pieces(x, outs, a, sizes)


def _unbind_axis(x: Shape, axis: int) -> int:
    _rank_at_least_1("x", x)
    return normalise_axis("unbind", "x", axis, len(x))


def unbind(x: Shape, *, axis: int) -> Description:
    a = _unbind_axis(x, axis)
    return _pieces(x, a, x[a], keeps_axis=False, policy=_UNBOUND)


def _check_unbind_outs(x: Shape, outs: tuple[Shape, ...], axis: int) -> None:
    a = _unbind_axis(x, axis)
    _count(outs, x[a], f"'x' dim {a} of size {x[a]}")
    _check_pieces(x, outs, a, None)


# ---- add_n: the pieces are summed, so every axis merges and a shared linear partial survives ------
def add_n(inputs: tuple[Shape, ...]) -> Description:
    _need_pieces("inputs", inputs)
    ndim = len(inputs[0])
    _same_rank("inputs", inputs, ndim)
    _same_shape_except("inputs", inputs, None, inputs[0], "'inputs[0]'")
    ls = letters(ndim)
    return Description((ls,), (ls,), linear=(0,), policy=_SUMMANDS)


# ---- registration --------------------------------------------------------------------------------
register_described("concat", concat, inputs=[Vec("x")], outputs=[T("out")],
                   attrs=[A("axis", "int", 0)], check_reverse=_check_concat_out,
                   doc="Join along `axis`: the axis is replicated, the others aligned by cost.")
register_described("stack", stack, inputs=[Vec("x")], outputs=[T("out")],
                   attrs=[A("axis", "int", 0)], check_reverse=_check_stack_out,
                   doc="Join along a new `axis`: every input axis aligned by cost.")
register_described("split", split, inputs=[T("x")], outputs=[Vec("outs")],
                   attrs=[A("sections", "ints", ()), A("axis", "int", 0)], masks=True,
                   check_reverse=_check_split_outs,
                   doc="Cut along `axis` into `sections`: the axis is replicated.")
register_described("split_with_num", split_with_num, inputs=[T("x")], outputs=[Vec("outs")],
                   attrs=[A("num", "int", 1), A("axis", "int", 0)], masks=True,
                   check_reverse=_check_split_with_num_outs,
                   doc="Cut along `axis` into `num` equal pieces: the axis is replicated.")
register_described("unbind", unbind, inputs=[T("x")], outputs=[Vec("outs")],
                   attrs=[A("axis", "int", 0)], masks=True, check_reverse=_check_unbind_outs,
                   doc="Cut along `axis` into its slices, which lose the axis.")
register_described("add_n", add_n, inputs=[Vec("inputs")], outputs=[T("out")], reverse=False,
                   doc="Sum of same-shape tensors: every axis merges (conflict: error).")
