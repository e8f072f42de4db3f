"""einsum and its gradient rule, straight on the Einsum engine.

The equation is the notation: einsum is a description (diagonal letters whole, Paddle's reading
of the operands as :class:`spmdrules.engine.contraction.OperandReading`) whose forward the engine
derives. Forward inference merges the operands' mesh dims per letter (a letter
sharded by two different mesh dims is an error, as in Paddle), gives a mesh dim wanted by two letters
to the one met first, and marks the output partial (sum) on the mesh dims of contracted letters.

Paddle's own choices kept here: input partials are dropped; sizes are not checked for divisibility;
size-1 dims are not special; a co-sharded input dim is read as its first (major) mesh dim only, as
Paddle's einsum rule reads the flat ``dims_mapping``; at most two operands; when both factors of an
outer product are sharded, the second is replicated.

Where Paddle is wrong we are not (docs/deviations/matmul.md): the gradient of an operand is partial
on the mesh dims of the letters it lacks *after* mesh-dim conflicts are resolved (Paddle reads them
before, then fails to mark a sharded mesh dim partial: ``einsum-grad-partial-on-shard``), and a
one-operand gradient of a partial out_grad stays partial (``einsum-unary-grad-partial``).
A letter repeated within one operand (a diagonal, ``ii->i``) cannot be computed on shards of it, so
it is replicated everywhere and contributes no partial.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Final

from spmdrules.core.attr import DistAttr, MultiDims
from spmdrules.core.errors import RuleArgumentError, UnsupportedError
from spmdrules.core.spec import SpmdInfo, TensorSpec
from spmdrules.engine import einsum
from spmdrules.engine.contraction import OperandReading
from spmdrules.engine.described import register_described
from spmdrules.engine.description import Description
from spmdrules.engine.registry import A, T, Vec, register_rule
from spmdrules.engine.rulekit import attr, replicated_like

MAX_OPERANDS: Final = 2


@functools.lru_cache(maxsize=256)
def _notation(equation: str, n_operands: int) -> tuple[einsum.Notation, frozenset[str]]:
    """The parsed equation and its diagonal letters (repeated within one operand)."""
    nota = einsum.parse(equation)
    if len(nota.outputs) != 1:
        raise RuleArgumentError(
            f"einsum equation {equation!r} has {len(nota.outputs)} outputs; write exactly one"
        )
    if len(nota.inputs) != n_operands:
        raise RuleArgumentError(
            f"einsum equation {equation!r} names {len(nota.inputs)} operands but "
            f"{n_operands} tensors were given in 'inputs'"
        )
    if n_operands > MAX_OPERANDS:
        raise UnsupportedError(
            f"einsum takes at most {MAX_OPERANDS} operands (as Paddle's rule); contract "
            "pairwise first (e.g. with opt_einsum)"
        )
    if "1" in equation:
        raise RuleArgumentError(f"einsum equation {equation!r}: '1' is not a letter")
    diag = frozenset(ch for ops in nota.inputs for ch in set(ops) if ops.count(ch) > 1)
    return nota, diag


def _sizes(nota: einsum.Notation, shapes: Sequence[tuple[int, ...]], names: Sequence[str]) -> None:
    """Each operand's rank matches its letters and a letter has one size everywhere."""
    sizes: dict[str, tuple[int, str, int]] = {}
    for letters, shape, name in zip(nota.inputs, shapes, names, strict=True):
        if len(letters) != len(shape):
            raise RuleArgumentError(
                f"{name!r} has rank {len(shape)} but the equation gives it {len(letters)} "
                f"letters {letters!r}"
            )
        for i, (ch, n) in enumerate(zip(letters, shape, strict=True)):
            prev = sizes.setdefault(ch, (n, name, i))
            if prev[0] != n:
                raise RuleArgumentError(
                    f"letter {ch!r} is {name!r} dim {i} of size {n} but {prev[1]!r} dim "
                    f"{prev[2]} of size {prev[0]}; a letter has one size"
                )


def _flat(m: MultiDims, letters: str, diag: frozenset[str]) -> MultiDims:
    """Paddle's view of an input mapping: the major mesh dim of each dim; diagonals unsharded."""
    return tuple(
        () if not dims or ch in diag else dims[:1] for ch, dims in zip(letters, m, strict=True)
    )


def _merge(
    nota: einsum.Notation, tensors: Sequence[TensorSpec], names: Sequence[str],
    diag: frozenset[str],
) -> einsum.LetterMap:
    operands = [
        (letters, _flat(t.attr.multi_dims_mapping, letters, diag))
        for letters, t in zip(nota.inputs, tensors, strict=True)
    ]
    operands = READING.read(operands, nota.outputs[0])
    return einsum.resolve_mesh_conflicts(einsum.merge(operands, names=names))


def _operand_names(n: int) -> list[str]:
    return [f"inputs[{i}]" for i in range(n)]


#: Paddle's reading of einsum's operands (see the module doc)
READING: Final = OperandReading(major_only=True, outer_yields=True)


def describe_einsum(inputs: tuple[tuple[int, ...], ...], *, equation: str) -> Description:
    """The equation's letters; diagonal letters are whole; Paddle's reading of the operands."""
    if not inputs:
        raise RuleArgumentError("einsum needs at least one tensor in 'inputs'")
    nota, diag = _notation(equation, len(inputs))
    _sizes(nota, inputs, _operand_names(len(inputs)))
    return Description((nota.inputs,), nota.outputs, whole=diag, reading=READING)


def einsum_grad(
    inputs: tuple[TensorSpec, ...],
    inner_cache: tuple[TensorSpec, ...],
    out_grad: TensorSpec,
    equation: str,
) -> SpmdInfo:
    """EinsumGradInferSpmd: the operands take their forward layout, out_grad the forward output's
    (without partial), and the gradient of each operand is partial on the mesh dims of the letters
    it lacks (they are summed over in its backward product).

    Every argument gets an attribute (Paddle's rule answers none for ``inner_cache``): each cached
    operand is laid out as the operand it caches (replicated if its shape is another)."""
    if not inputs:
        raise RuleArgumentError("einsum_grad needs at least one tensor in 'inputs'")
    nota, diag = _notation(equation, len(inputs))
    names = _operand_names(len(inputs))
    _sizes(nota, [t.shape for t in inputs], names)
    out = nota.outputs[0]
    _check_out_grad(nota, inputs, out_grad)
    if len(inputs) == 1:
        ins, og, grads = _unary_grad(nota, inputs[0], out_grad, diag)
    else:
        letters = _merge(nota, inputs, names, diag)
        ins = tuple(attr(t, einsum.mapping_for(ls, letters))
                    for ls, t in zip(nota.inputs, inputs, strict=True))
        og = attr(out_grad, einsum.mapping_for(out, letters))
        computed = [(ls, a.multi_dims_mapping) for ls, a in zip(nota.inputs, ins, strict=True)]
        # an operand's gradient contracts the other operand and out_grad over the letters it lacks
        grads = tuple(
            attr(a, a.multi_dims_mapping, einsum.contracted_partial(
                [*computed[:i], *computed[i + 1:], (out, og.multi_dims_mapping)], ls))
            for i, (a, ls) in enumerate(zip(ins, nota.inputs, strict=True))
        )
    return SpmdInfo([ins, _cache_attrs(inputs, inner_cache, ins), og], [grads])


def _cache_attrs(inputs: Sequence[TensorSpec], inner_cache: Sequence[TensorSpec],
                 ins: Sequence[DistAttr]) -> tuple[DistAttr, ...]:
    """A cached operand lays out as its operand; one of another shape (or with no operand) is
    replicated: the kernel reads the operands, and a cache of any layout it does not read is
    whole where kept."""
    out = []
    for i, c in enumerate(inner_cache):
        if i < len(inputs) and c.shape == inputs[i].shape:
            out.append(attr(c, ins[i].multi_dims_mapping))
        else:
            out.append(replicated_like(c))
    return tuple(out)


def _unary_grad(
    nota: einsum.Notation, x: TensorSpec, out_grad: TensorSpec, diag: frozenset[str]
) -> tuple[tuple[DistAttr, ...], DistAttr, tuple[DistAttr, ...]]:
    """One operand: x_grad is out_grad transposed/broadcast back, so x and out_grad are merged
    (x first) and x_grad takes x's layout."""
    xl, out = nota.inputs[0], nota.outputs[0]
    operands = [
        (xl, _flat(x.attr.multi_dims_mapping, xl, diag)),
        (out, _flat(out_grad.attr.multi_dims_mapping, out, diag)),
    ]
    letters = einsum.resolve_mesh_conflicts(einsum.merge(operands, names=("inputs[0]", "out_grad")))
    xm = einsum.mapping_for(xl, letters)
    # x_grad is a linear image of out_grad: a pending sum on out_grad stays pending on x_grad
    # (deviation einsum-unary-grad-partial), except on mesh dims that now shard x (reduce first).
    busy = {d for dims in xm for d in dims}
    pending = tuple(p for p in out_grad.attr.partial_items if p[0] not in busy)
    og = attr(out_grad, einsum.mapping_for(out, letters), pending)
    return (attr(x, xm),), og, (attr(x, xm, pending),)


def _check_out_grad(
    nota: einsum.Notation, inputs: Sequence[TensorSpec], out_grad: TensorSpec
) -> None:
    out = nota.outputs[0]
    size = {
        ch: n
        for ls, t in zip(nota.inputs, inputs, strict=True)
        for ch, n in zip(ls, t.shape, strict=True)
    }
    want = [size[ch] for ch in out]
    if list(out_grad.shape) != want:
        raise RuleArgumentError(
            f"'out_grad' has shape {list(out_grad.shape)} but the equation's output {out!r} has "
            f"shape {want}"
        )


register_described(
    "einsum", describe_einsum, inputs=[Vec("inputs")], outputs=[T("out")], reverse=False,
    attrs=[A("equation", "str", "")],
    doc="EinsumInferSpmd: the equation is the notation; contracted sharded letters give partials.",
)
register_rule(
    "einsum_grad", forward=einsum_grad,
    inputs=[Vec("inputs"), Vec("inner_cache"), T("out_grad")], outputs=[Vec("x_grad")],
    attrs=[A("equation", "str", "")],
    doc="EinsumGradInferSpmd: operands and out_grad take the forward layout (inner_cache its "
    "operands'); each operand's gradient is partial on the mesh dims of the letters it lacks.",
)
