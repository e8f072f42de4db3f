"""Joining and cutting along one axis: concat, stack, add_n (join) and split, split_with_num,
unbind (cut).

One description serves the family: a *whole* tensor and its *pieces* along the op axis. The op axis
is never sharded (a piece boundary would fall inside a shard); every other axis merges like an
elementwise op. Pieces either keep the op axis (concat, split: ``abc`` <-> ``abc``) or lose it
(stack, unbind: ``ac`` <-> ``abc``). Joining infers the whole from the pieces, cutting the pieces
from the whole; each op's reverse rule is the other direction.

Forward concat and stack follow Paddle's cost-based alignment (``AlignDimsSharding``): a mesh dim
on which the pieces disagree goes to the aligned axis that is cheapest to reshard to.
"""

from __future__ import annotations

from collections.abc import Sequence

from spmdrules.core.attr import DistAttr, MultiDims, PartialItems
from spmdrules.core.errors import RuleArgumentError
from spmdrules.core.spec import SpmdInfo, TensorSpec
from spmdrules.engine import einsum
from spmdrules.engine.masks import carry, plain
from spmdrules.engine.registry import A, T, Vec, register_rule
from spmdrules.engine.rulekit import attr, normalise_axis

LINEAR_REDUCE = frozenset(("sum", "avg"))


# ---- the family's description: whole <-> piece mappings along the op axis ------------------------
def _cut(whole: MultiDims, axis: int, keeps_axis: bool) -> MultiDims:
    """A piece's mapping read off the whole's: the op axis replicated (concat) or gone (stack)."""
    if keeps_axis:
        return (*whole[:axis], (), *whole[axis + 1 :])
    return (*whole[:axis], *whole[axis + 1 :])


def _join(piece: MultiDims, axis: int) -> MultiDims:
    """The whole's mapping read off a piece that lost the op axis (stack): the axis replicated.

    (A piece that keeps the axis reads the same as the whole, the axis replicated: ``_cut``.)
    """
    return (*piece[:axis], (), *piece[axis:])


# ---- Paddle's alignment of the pieces of concat / stack ------------------------------------------
# A mesh dim's placement for one tensor: the tensor dim it shards, the reduce type of its pending
# partial, or None (replicated).
_Placement = int | str | None


def _placements(a: DistAttr) -> list[_Placement]:
    out: list[_Placement] = [None] * a.mesh.ndim
    for tdim, dims in enumerate(a.multi_dims_mapping):
        for md in dims:
            out[md] = tdim
    for md, rt in a.partial_items:
        out[md] = rt
    return out


def _is_empty(shape: tuple[int, ...]) -> bool:
    return not shape or shape[0] == 0


def _local_numel(t: TensorSpec) -> int:
    # Paddle's GetLocalShape: ceil-divide each sharded dim (by its last mesh dim only).
    mesh_shape = t.attr.mesh.shape
    n = 1
    for size, dims in zip(t.shape, t.attr.multi_dims_mapping, strict=True):
        n *= -(-size // mesh_shape[max(dims)]) if dims else size
    return n


def _align(pieces: Sequence[TensorSpec], aligned: Sequence[int]) -> tuple[MultiDims, PartialItems]:
    """One mapping for every piece (same rank) and the sum/avg partials they all share.

    A mesh dim on which every non-empty piece agrees keeps its shard (of an aligned axis) or its
    sum/avg partial. A mesh dim on which they disagree goes to the aligned axis that is cheapest
    to reshard to (the fewest elements moved; ties: the lowest axis), or to none.
    """
    nonempty = [t for t in pieces if not _is_empty(t.shape)] or [pieces[0]]
    first = nonempty[0].attr
    if all(t.attr == first for t in nonempty):  # already aligned: nothing to choose
        return (
            tuple(d if i in aligned else () for i, d in enumerate(first.multi_dims_mapping)),
            tuple(p for p in first.partial_items if p[1] in LINEAR_REDUCE),
        )
    mesh_shape = first.mesh.shape
    places = [_placements(t.attr) for t in nonempty]
    ref = places[0]
    agreed = [all(p[md] == ref[md] for p in places) for md in range(len(mesh_shape))]
    owner: dict[int, int] = {}  # mesh dim -> tensor dim
    partial: list[tuple[int, str]] = []
    for md, ok in enumerate(agreed):
        where = ref[md]
        if not ok:
            continue
        if isinstance(where, int) and where in aligned:
            owner[md] = where
        elif isinstance(where, str) and where in LINEAR_REDUCE:
            partial.append((md, where))
    # Agreed co-shards keep their order (it is the data layout); a chosen axis was unsharded.
    mdm = [tuple(md for md in dims if md in owner) for dims in first.multi_dims_mapping]
    costs = [_local_numel(t) for t in nonempty]
    for md, ok in enumerate(agreed):
        if not ok:
            tdim = _cheapest_axis(nonempty, costs, aligned, set(owner.values()), mesh_shape[md])
            if tdim is not None:
                owner[md] = tdim
                mdm[tdim] = (md,)
    return tuple(mdm), tuple(partial)


def _cheapest_axis(
    pieces: Sequence[TensorSpec], costs: Sequence[int], aligned: Sequence[int],
    taken: set[int], size: int,
) -> int | None:
    """The aligned tensor dim cheapest to shard over a mesh dim of ``size``; ties: the lowest."""
    best: int | None = None
    best_cost = 0
    for tdim in aligned:
        if tdim in taken:
            continue
        cost = 0
        for t, c in zip(pieces, costs, strict=True):
            if t.shape[tdim] < size:
                break
            if not t.attr.multi_dims_mapping[tdim]:
                cost += c * size
        else:
            if best is None or cost < best_cost:
                best, best_cost = tdim, cost
    return best


def _letters(ndim: int) -> str:
    if ndim > len(einsum.ALPHABET):
        raise RuleArgumentError(
            f"rank {ndim} exceeds the {len(einsum.ALPHABET)} axes this rule can name"
        )
    return einsum.ALPHABET[:ndim]


# ---- shape checks --------------------------------------------------------------------------------
def _need_pieces(name: str, pieces: Sequence[TensorSpec]) -> None:
    if not pieces:
        raise RuleArgumentError(f"{name!r} is an empty list; give at least one tensor")


def _same_rank(name: str, pieces: Sequence[TensorSpec], ndim: int) -> None:
    for i, t in enumerate(pieces):
        if t.ndim != ndim:
            raise RuleArgumentError(
                f"'{name}[{i}]' has rank {t.ndim} but '{name}[0]' has rank {ndim}; every "
                "tensor of the list must have the same rank"
            )


def _same_shape_except(
    name: str, pieces: Sequence[TensorSpec], axis: int | None, ref: tuple[int, ...], ref_name: str
) -> None:
    for i, t in enumerate(pieces):
        for d, (a, b) in enumerate(zip(t.shape, ref, strict=True)):
            if d != axis and a != b:
                raise RuleArgumentError(
                    f"'{name}[{i}]' dim {d} has size {a} but {ref_name} has {b}; only the op "
                    f"axis {axis} may differ" if axis is not None else
                    f"'{name}[{i}]' dim {d} has size {a} but {ref_name} has {b}; every tensor "
                    "must have the same shape"
                )


def _check_whole(name: str, whole: TensorSpec, expect: tuple[int, ...]) -> None:
    if whole.shape != expect:
        raise RuleArgumentError(
            f"{name!r} has shape {list(whole.shape)} but the pieces give {list(expect)}"
        )


def _rank_at_least_1(name: str, t: TensorSpec) -> None:
    if t.ndim == 0:
        raise RuleArgumentError(f"{name!r} is a 0-d tensor; it has no axis to split or join on")


# ---- concat --------------------------------------------------------------------------------------
def _concat_axis(x: Sequence[TensorSpec], axis: int) -> int:
    _need_pieces("x", x)
    ndim = x[0].ndim
    _rank_at_least_1("x[0]", x[0])
    _same_rank("x", x, ndim)
    a = normalise_axis("concat", "x", axis, ndim)
    _same_shape_except("x", x, a, x[0].shape, "'x[0]'")
    return a


def concat_forward(x: tuple[TensorSpec, ...], axis: int) -> SpmdInfo:
    a = _concat_axis(x, axis)
    aligned = [d for d in range(x[0].ndim) if d != a]
    piece = attr(x[0], *_align(x, aligned))
    # Deviation partial-pieces-kept: the concat of partial pieces is partial; Paddle drops it here.
    return SpmdInfo([(piece,) * len(x)], [piece])


def concat_reverse(x: tuple[TensorSpec, ...], out: TensorSpec, axis: int) -> SpmdInfo:
    a = _concat_axis(x, axis)
    whole = (*x[0].shape[:a], sum(t.shape[a] for t in x), *x[0].shape[a + 1 :])
    _check_whole("out", out, whole)
    piece = attr(out, _cut(out.attr.multi_dims_mapping, a, keeps_axis=True))
    # Deviation join-reverse-echoes-out: the out the local concat yields (Paddle echoes `out`).
    return SpmdInfo([(piece,) * len(x)], [piece])


# ---- stack ---------------------------------------------------------------------------------------
def _stack_axis(x: Sequence[TensorSpec], axis: int) -> int:
    _need_pieces("x", x)
    ndim = x[0].ndim
    _same_rank("x", x, ndim)
    _same_shape_except("x", x, None, x[0].shape, "'x[0]'")
    return normalise_axis("stack", "x", axis, ndim, allow_end=True)


def stack_forward(x: tuple[TensorSpec, ...], axis: int) -> SpmdInfo:
    a = _stack_axis(x, axis)
    mdm, part = _align(x, range(x[0].ndim))
    piece = attr(x[0], mdm, part)
    return SpmdInfo([(piece,) * len(x)], [attr(x[0], _join(mdm, a), part)])


def stack_reverse(x: tuple[TensorSpec, ...], out: TensorSpec, axis: int) -> SpmdInfo:
    a = _stack_axis(x, axis)
    _check_whole("out", out, (*x[0].shape[:a], len(x), *x[0].shape[a:]))
    mdm = _cut(out.attr.multi_dims_mapping, a, keeps_axis=False)
    # Deviation join-reverse-echoes-out: the out the local stack yields (Paddle echoes `out`).
    return SpmdInfo([(attr(out, mdm),) * len(x)], [attr(out, _join(mdm, a))])


# ---- split / split_with_num / unbind: cut the whole `x` into `outs` ------------------------------
def _cut_forward(x: TensorSpec, a: int, n: int, keeps_axis: bool, keep_partial: bool) -> SpmdInfo:
    """The pieces of ``x``. A masked pending sum is cut into masked sums, each slice of a piece
    a slice of x (``spmdrules.engine.masks``); a plain one is kept only with ``keep_partial``."""
    if x.attr.mask_items:
        info = _cut_forward(plain(x), a, n, keeps_axis, keep_partial)
        ls = _letters(x.ndim)
        piece_ls = ls if keeps_axis else ls[:a] + ls[a + 1:]
        return carry(info, [(x, ls)], [piece_ls] * n)
    mdm = _cut(x.attr.multi_dims_mapping, a, keeps_axis=True)
    part = x.attr.partial_items if keep_partial else ()
    piece = attr(x, mdm if keeps_axis else _cut(mdm, a, keeps_axis=False), part)
    return SpmdInfo([attr(x, mdm, part)], [piece] * n)


def _cut_reverse(
    x: TensorSpec, outs: tuple[TensorSpec, ...], a: int, keeps_axis: bool
) -> SpmdInfo:
    letters = _letters(x.ndim)
    piece_letters = letters if keeps_axis else letters[:a] + letters[a + 1 :]
    merged = einsum.merge(
        ((piece_letters, o.attr.multi_dims_mapping) for o in outs),
        names=[f"outs[{i}]" for i in range(len(outs))],
    )
    merged = einsum.resolve_mesh_conflicts(merged)
    whole = _cut(einsum.mapping_for(letters, merged), a, keeps_axis=True)
    piece = attr(x, _cut(whole, a, keeps_axis))
    return SpmdInfo([attr(x, whole)], [piece] * len(outs))


def _split_sizes(x: TensorSpec, sections: tuple[int, ...], axis: int) -> tuple[int, tuple[int, ...]]:
    _rank_at_least_1("x", x)
    a = normalise_axis("split", "x", axis, x.ndim)
    n = x.shape[a]
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


def _check_pieces(x: TensorSpec, outs: Sequence[TensorSpec], a: int, sizes: Sequence[int] | None
                  ) -> None:
    """Each out is x cut at axis ``a`` (size ``sizes[i]``), or x without axis ``a`` (unbind)."""
    for i, o in enumerate(outs):
        if sizes is None:
            want = (*x.shape[:a], *x.shape[a + 1 :])
        else:
            want = (*x.shape[:a], sizes[i], *x.shape[a + 1 :])
        if o.shape != want:
            raise RuleArgumentError(
                f"'outs[{i}]' has shape {list(o.shape)} but cutting 'x' {list(x.shape)} at dim "
                f"{a} gives {list(want)}"
            )


def _count(outs: Sequence[TensorSpec], n: int, what: str) -> None:
    if len(outs) != n:
        raise RuleArgumentError(f"'outs' holds {len(outs)} tensors but {what} gives {n}")


def split_forward(x: TensorSpec, sections: tuple[int, ...], axis: int) -> SpmdInfo:
    a, sizes = _split_sizes(x, sections, axis)
    return _cut_forward(x, a, len(sizes), keeps_axis=True, keep_partial=False)


def split_reverse(
    x: TensorSpec, outs: tuple[TensorSpec, ...], sections: tuple[int, ...], axis: int
) -> SpmdInfo:
    a, sizes = _split_sizes(x, sections, axis)
    _count(outs, len(sizes), f"'sections' {list(sections)}")
    _check_pieces(x, outs, a, sizes)
    return _cut_reverse(x, outs, a, keeps_axis=True)


def _num_sizes(x: TensorSpec, num: int, axis: int) -> tuple[int, tuple[int, ...]]:
    _rank_at_least_1("x", x)
    a = normalise_axis("split_with_num", "x", axis, x.ndim)
    n = x.shape[a]
    if num < 1 or n % num:
        raise RuleArgumentError(
            f"'num' {num} must be >= 1 and divide the size {n} of 'x' dim {a}"
        )
    return a, (n // num,) * num


def split_with_num_forward(x: TensorSpec, num: int, axis: int) -> SpmdInfo:
    a, _ = _num_sizes(x, num, axis)
    return _cut_forward(x, a, num, keeps_axis=True, keep_partial=False)


def split_with_num_reverse(x: TensorSpec, outs: tuple[TensorSpec, ...], num: int, axis: int
                           ) -> SpmdInfo:
    a, sizes = _num_sizes(x, num, axis)
    _count(outs, num, f"'num' {num}")
    _check_pieces(x, outs, a, sizes)
    return _cut_reverse(x, outs, a, keeps_axis=True)


def unbind_forward(x: TensorSpec, axis: int) -> SpmdInfo:
    _rank_at_least_1("x", x)
    a = normalise_axis("unbind", "x", axis, x.ndim)
    # Deviation UnbindPartialOutput: the pieces of a partial tensor are partial; Paddle drops it.
    return _cut_forward(x, a, x.shape[a], keeps_axis=False, keep_partial=True)


def unbind_reverse(x: TensorSpec, outs: tuple[TensorSpec, ...], axis: int) -> SpmdInfo:
    _rank_at_least_1("x", x)
    a = normalise_axis("unbind", "x", axis, x.ndim)
    _count(outs, x.shape[a], f"'x' dim {a} of size {x.shape[a]}")
    _check_pieces(x, outs, a, None)
    return _cut_reverse(x, outs, a, keeps_axis=False)


# ---- add_n: the pieces are summed, so every axis merges and a shared linear partial survives ------
def add_n_forward(inputs: tuple[TensorSpec, ...]) -> SpmdInfo:
    _need_pieces("inputs", inputs)
    first = inputs[0]
    _same_rank("inputs", inputs, first.ndim)
    _same_shape_except("inputs", inputs, None, first.shape, "'inputs[0]'")
    if all(t.attr == first.attr for t in inputs):
        mdm = first.attr.multi_dims_mapping
    else:
        letters = _letters(first.ndim)
        merged = einsum.merge(
            ((letters, t.attr.multi_dims_mapping) for t in inputs),
            names=[f"inputs[{i}]" for i in range(len(inputs))],
        )
        mdm = einsum.mapping_for(letters, einsum.resolve_mesh_conflicts(merged))
    part = first.attr.partial_items
    # A sum of pieces partial the same way is partial that way, for linear reductions only.
    if not part or any(t.attr.partial_items != part for t in inputs) or any(
        rt not in LINEAR_REDUCE for _, rt in part
    ):
        part = ()
    piece = attr(first, mdm, part)
    return SpmdInfo([(piece,) * len(inputs)], [piece])


# ---- registration --------------------------------------------------------------------------------
register_rule("concat", forward=concat_forward, reverse=concat_reverse, inputs=[Vec("x")],
              outputs=[T("out")], attrs=[A("axis", "int", 0)],
              doc="Join along `axis`: the axis is replicated, the others aligned by cost.")
register_rule("stack", forward=stack_forward, reverse=stack_reverse, inputs=[Vec("x")],
              outputs=[T("out")], attrs=[A("axis", "int", 0)],
              doc="Join along a new `axis`: every input axis aligned by cost.")
register_rule("split", forward=split_forward, reverse=split_reverse, inputs=[T("x")],
              outputs=[Vec("outs")], attrs=[A("sections", "ints", ()), A("axis", "int", 0)],
              masks=True,
              doc="Cut along `axis` into `sections`: the axis is replicated.")
register_rule("split_with_num", forward=split_with_num_forward, reverse=split_with_num_reverse,
              inputs=[T("x")], outputs=[Vec("outs")],
              attrs=[A("num", "int", 1), A("axis", "int", 0)],
              masks=True,
              doc="Cut along `axis` into `num` equal pieces: the axis is replicated.")
register_rule("unbind", forward=unbind_forward, reverse=unbind_reverse, inputs=[T("x")],
              outputs=[Vec("outs")], attrs=[A("axis", "int", 0)],
              masks=True,
              doc="Cut along `axis` into its slices, which lose the axis.")
register_rule("add_n", forward=add_n_forward, inputs=[Vec("inputs")], outputs=[T("out")],
              doc="Sum of same-shape tensors: every axis merges (conflict: error).")
