"""Small helpers shared by rule families: attribute construction, divisibility, axis handling."""

from __future__ import annotations

from collections.abc import Sequence

from spmdrules.core.attr import DistAttr, MultiDims, PartialItems
from spmdrules.core.errors import RuleArgumentError
from spmdrules.core.spec import TensorSpec


def attr(like: TensorSpec | DistAttr, mdm: MultiDims, partial: PartialItems = ()) -> DistAttr:
    """An attribute on the same mesh as ``like``, built without re-validation.

    Values are immutable, so where the answer is ``like``'s own attribute it is returned as is.
    """
    a = like.attr if type(like) is TensorSpec else like
    assert isinstance(a, DistAttr)
    if a.multi_dims_mapping == mdm and a.partial_items == partial:
        return a
    return DistAttr._make(a.mesh, mdm, partial)


def replicated_like(t: TensorSpec) -> DistAttr:
    return DistAttr._make(t.attr.mesh, ((),) * len(t.shape), ())


def shard_product(mesh_shape: Sequence[int], dims: Sequence[int]) -> int:
    n = 1
    for d in dims:
        n *= mesh_shape[d]
    return n


def normalise_axis(op: str, tensor: str, axis: int, ndim: int, *, allow_end: bool = False) -> int:
    """A non-negative axis in range for a tensor of rank ``ndim`` (or one past the end).

    ``op`` prefixes the error; a rule whose registry adds the op's name passes ``""``."""
    hi = ndim + 1 if allow_end else ndim
    if not -hi <= axis < hi:
        lo = -hi
        raise RuleArgumentError(
            f"{op + ': ' if op else ''}axis {axis} is out of range for {tensor!r} of rank {ndim}; "
            f"use {lo}..{hi - 1}"
        )
    return axis + hi if axis < 0 else axis
