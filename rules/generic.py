"""Generic rules for ops without a rule of their own: ``default_data_parallel`` (alias ``default_``)
and ``replicated``. Both take every input and every output as two lists, in both directions
(``register_described(..., sides=True)``).

Data parallel: every tensor's dim 0 is the batch letter ``a``; the batch shardings of one side merge
(a conflict is an error), and every tensor gets ``a`` sharded that way and every other letter
whole. Forward merges the inputs, reverse the outputs. Replicated: every letter whole.
Partials are dropped in both (the op is opaque, so its inputs must be whole).

The answer is flat, as Paddle returns it: ``info.inputs`` holds one attribute per input tensor and
``info.outputs`` one per output tensor. A 0-d tensor has no batch axis and stays replicated.
"""

from __future__ import annotations

from spmdrules.core.errors import RuleArgumentError
from spmdrules.engine.described import register_described
from spmdrules.engine.description import Description, letters
from spmdrules.engine.registry import Vec

Shapes = tuple[tuple[int, ...], ...]
_BATCH = "a"


def _pieces(shapes: Shapes) -> tuple[str, ...]:
    return tuple(letters(len(s)) for s in shapes)


def _need(side: str, tensors: Shapes) -> None:
    if not tensors:
        raise RuleArgumentError(
            f"{side!r} is an empty list; the batch sharding is read from at least one tensor"
        )


def data_parallel(ins: Shapes, outs: Shapes) -> Description:
    """Every tensor ``a...``: ``a`` merged over one side, the other letters whole."""
    ls_in, ls_out = _pieces(ins), _pieces(outs)
    rest = frozenset("".join((*ls_in, *ls_out))) - {_BATCH}
    return Description((ls_in, ls_out), (), whole=rest, merge=(0,), reverse_merge=(1,))


def replicated(ins: Shapes, outs: Shapes) -> Description:
    """Every letter whole."""
    ls_in, ls_out = _pieces(ins), _pieces(outs)
    return Description((ls_in, ls_out), (), whole=frozenset("".join((*ls_in, *ls_out))))


def _check_ins(ins: Shapes, outs: Shapes) -> None:
    _need("ins", ins)


def _check_outs(ins: Shapes, outs: Shapes) -> None:
    _need("outs", outs)


def _check_any(ins: Shapes, outs: Shapes) -> None:
    if not ins and not outs:
        raise RuleArgumentError("'ins' and 'outs' are both empty; give at least one tensor")


# Both lists are arguments in both directions (Paddle's `(ins, outs)`): with no `outputs` params,
# the reverse binding `(*inputs, *outputs)` is the same `(ins, outs)`.
for _name in ("default_data_parallel", "default_"):
    register_described(_name, data_parallel, inputs=[Vec("ins"), Vec("outs")], outputs=[],
                       sides=True, check_forward=_check_ins, check_reverse=_check_outs,
                       doc="Shard dim 0 of every tensor like the merged batch axis; replicate "
                       "the rest.")
register_described("replicated", replicated, inputs=[Vec("ins"), Vec("outs")], outputs=[],
                   sides=True, check_forward=_check_any, check_reverse=_check_any,
                   doc="Replicate every input and output.")
