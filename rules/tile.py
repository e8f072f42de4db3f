"""tile, expand, expand_as (expand_as_v2) and expand_as's gradient rule: copies of x's values.

Described as data on the result's letters: x takes the letters of the dims it keeps, a ``'1'`` for
a dim it broadcasts (size 1 to n), none for a dim the result prepends. tile's repeated dims are
whole (a block of ``x`` repeated is no block of the result); a prepended dim may stay sharded, each
of its blocks being whole copies. expand_as follows its target ``y`` (else ``target_shape`` and x);
its gradient sums over the dims x broadcasts, a pending sum where the cotangent shards them.
expand (no Paddle rule) follows x forward and keeps a wanted shard of a broadcast dim in reverse.
"""

from __future__ import annotations

from collections.abc import Sequence

from spmdrules.core.errors import RuleArgumentError
from spmdrules.engine.described import register_described
from spmdrules.engine.description import Description, letters
from spmdrules.engine.registry import A, Opt, T

Shape = tuple[int, ...]


def tiled_shape(x: Shape, repeat_times: Sequence[int]) -> tuple[Shape, Shape]:
    """The repeats aligned to the result's rank (1 for x's leading dims) and the result's shape."""
    for i, r in enumerate(repeat_times):
        if r < 1:
            raise RuleArgumentError(f"repeat_times[{i}] is {r}; each repeat must be >= 1")
    reps = (1,) * (len(x) - len(repeat_times)) + tuple(repeat_times)
    padded = (1,) * (len(reps) - len(x)) + x
    return reps, tuple(n * r for n, r in zip(padded, reps, strict=True))


def expanded_shape(x: Shape, shape: Sequence[int], what: str = "shape") -> Shape:
    """numpy's broadcast of x to ``shape`` (-1 keeps x's size); a clash names the dim."""
    if len(shape) < len(x):
        raise RuleArgumentError(f"{what} {list(shape)} has fewer dims than 'x' (rank {len(x)}); "
                                f"give at least {len(x)} sizes")
    out = list(shape)
    diff = len(shape) - len(x)
    for i, n in enumerate(x):
        want = shape[i + diff]
        if want == -1:
            out[i + diff] = n
        elif n not in (1, want):
            raise RuleArgumentError(f"'x' dim {i} has size {n}, which cannot broadcast to {want} "
                                    f"({what} dim {i + diff}); make it 1 or {want}")
    for j, n in enumerate(out):
        if n < 0:
            raise RuleArgumentError(f"{what} dim {j} is {n}; -1 keeps x's size only where x has a "
                                    "dim, give a size >= 0")
    return tuple(out)


def x_letters(x: Shape, out: Shape, names: str) -> str:
    diff = len(out) - len(x)
    return "".join(names[i + diff] if n == out[i + diff] else "1" for i, n in enumerate(x))


def describe_tile(x: Shape, *, repeat_times: Sequence[int]) -> Description:
    reps, out = tiled_shape(x, repeat_times)
    ol = letters(len(out))
    diff = len(out) - len(x)
    xl = ol[diff:]
    return Description((xl,), (ol,), whole=frozenset(xl[i] for i in range(len(x)) if reps[i + diff] > 1),
                       pending=None)


def describe_expand(x: Shape, *, shape: Sequence[int]) -> Description:
    out = expanded_shape(x, shape)
    ol = letters(len(out))
    return Description((x_letters(x, out, ol),), (ol,))


def describe_expand_as(x: Shape, y: Shape | None, *, target_shape: Sequence[int]) -> Description:
    out = expanded_shape(x, y if y is not None else target_shape,
                         "'y' shape" if y is not None else "target_shape")
    ol = letters(len(out))
    return Description((x_letters(x, out, ol), ol), (ol,), merge=(0,) if y is None else (1,))


def describe_expand_as_grad(x: Shape, out_grad: Shape, *, target_shape: Sequence[int]
                            ) -> Description:
    ol = letters(len(out_grad))
    expanded_shape(x, out_grad, "'out_grad' shape")
    xl = x_letters(x, out_grad, ol)
    return Description((xl, ol), (xl,), merge=(1,))


TARGET = A("target_shape", "ints", ())
register_described("tile", describe_tile, inputs=[T("x")], outputs=[T("out")],
                   attrs=[A("repeat_times", "ints", None)],
                   doc="TileInferSpmd: repeated dims replicated, the others keep their shards.")
register_described("expand", describe_expand, inputs=[T("x")], outputs=[T("out")],
                   attrs=[A("shape", "ints", None)],
                   doc="x broadcast to `shape` (-1 keeps a dim): x's dims keep their shards.")
register_described("expand_as", describe_expand_as, inputs=[T("x"), Opt("y")], outputs=[T("out")],
                   attrs=[TARGET], aliases=["expand_as_v2"],
                   doc="ExpandAsInferSpmd: the result and x follow y; broadcast dims of x replicated.")
register_described("expand_as_grad", describe_expand_as_grad, inputs=[T("x"), T("out_grad")],
                   outputs=[T("x_grad")], attrs=[TARGET], aliases=["expand_as_v2_grad"], reverse=False,
                   doc="ExpandAsGradInferSpmd: x follows out_grad; sums over sharded broadcast "
                   "dims are pending.")
