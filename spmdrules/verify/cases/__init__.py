"""Random verification cases per op family: valid inputs for an op, on a random mesh, with random
given attributes (shards, co-shards, partials of every reduce type the dtype allows).

A :class:`Case` is what :mod:`spmdrules.verify` executes: the op whose local kernel runs, its
inputs as ``TensorSpec`` with the *given* attributes (the ones the rule is called with), its
outputs' global shapes (with given attributes too: the reverse rule is called on them), the op's
attributes with defaults filled, and the value domain of every input (ids must be in range, log
needs positive values, ...). Shapes and attributes follow each op's semantics; output shapes come
from :mod:`spmdrules.graph.shapes`, the graph's shape inference for every op.

Cases are reproducible: :func:`draw_case` takes a generator seeded from (seed, op, direction,
index), so one op's cases do not depend on which other ops are drawn.

>>> import numpy as np
>>> case = draw_case("matmul", "forward", np.random.default_rng(0))
>>> case.op, len(case.inputs), len(case.outputs)
('matmul', 2, 1)
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import numpy as np
from numpy.typing import NDArray

import spmdrules as sr
from spmdrules.core.attr import DistAttr
from spmdrules.core.spec import TensorSpec, flat_slots
from spmdrules.engine.registry import Rule
from spmdrules.graph.shapes import TensorMeta, infer_meta

Direction = Literal["forward", "reverse"]
Rng = np.random.Generator
Array = NDArray[Any]
Shape = tuple[int, ...]
#: one tensor argument: a tensor, an absent optional (None) or a list
Arg = TensorSpec | None | tuple[TensorSpec, ...]
#: the value domain of one tensor argument, in the same structure
DomainArg = str | None | tuple[str, ...]

#: Meshes of at most 8 processes, 1-D to 3-D; sizes 3 and 8 make most dims uneven.
MESH_SHAPES: Final[tuple[Shape, ...]] = (
    (2,), (3,), (4,), (8,),
    (1, 2), (2, 2), (2, 3), (3, 2), (2, 4), (4, 2),
    (2, 2, 2), (1, 2, 3), (2, 1, 2),
)
#: Dim sizes: small, often not divisible by the mesh, sometimes 1 (broadcast, squeeze).
SIZES: Final = (1, 2, 2, 3, 4, 4, 5, 6, 8)

#: Reduce types a partial of each dtype kind can carry (simulate.scatter splits them).
_REDUCES: Final[Mapping[str, tuple[str, ...]]] = {
    "f": ("sum", "sum", "avg", "max", "min", "product"),
    "i": ("sum", "max", "min", "product", "avg"),
    "b": ("any", "all"),
}

# ---- value domains -----------------------------------------------------------------------------
#: domain name -> dtype name; "index:N" domains (ids, hard labels) are int64 in [0, N)
_DOMAIN_DTYPES: Final[Mapping[str, str]] = {
    "real": "float64", "positive": "float64", "unit": "float64", "prob": "float64",
    "ge1": "float64", "nonzero": "float64", "near1": "float64", "bool": "bool", "int": "int64",
}


def domain_dtype(domain: str) -> str:
    return "int64" if domain.startswith("index:") else _DOMAIN_DTYPES[domain]


def draw_values(domain: str, shape: Shape, rng: Rng) -> Array:
    """A random global array of ``shape`` in ``domain`` (an ndarray even when 0-d)."""
    return np.asarray(_values(domain, shape, rng), dtype=domain_dtype(domain))


def _values(domain: str, shape: Shape, rng: Rng) -> Any:
    if domain == "real":
        return rng.standard_normal(shape)
    if domain == "positive":
        return rng.uniform(0.5, 2.0, shape)
    if domain == "unit":
        return rng.uniform(-0.9, 0.9, shape)
    if domain == "prob":
        return rng.uniform(0.1, 0.9, shape)
    if domain == "ge1":
        return rng.uniform(1.1, 3.0, shape)
    if domain in ("nonzero", "near1"):
        # |v| in [0.5, 1.5]: safe divisors, and products of many stay O(1)
        return rng.uniform(0.5, 1.5, shape) * rng.choice([-1.0, 1.0], shape)
    if domain == "bool":
        return np.asarray(rng.integers(0, 2, shape) > 0)
    if domain == "int":
        return rng.integers(-8, 8, shape).astype(np.int64)
    if domain.startswith("index:"):
        return rng.integers(0, int(domain[6:]), shape).astype(np.int64)
    raise ValueError(f"unknown value domain {domain!r}")


# ---- the case ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Case:
    """One verification case of ``rule`` in ``direction``; ``op``'s kernel runs it."""

    rule: str
    direction: Direction
    op: str
    mesh: sr.ProcessMesh
    inputs: tuple[Arg, ...]
    outputs: tuple[Arg, ...]
    attrs: Mapping[str, Any]
    domains: tuple[DomainArg, ...]
    #: generic rules run on a stand-in op: the rule sees every tensor as two flat lists
    generic: bool = False
    reverse_attr_names: tuple[str, ...] = field(default=())
    #: input arguments the rule answers no attribute for; they keep the given one
    #: (einsum_grad's inner_cache: Paddle's EinsumGradInferSpmd lays out only inputs and out_grad)
    unanswered: tuple[int, ...] = field(default=())

    def call(self) -> sr.SpmdInfo:
        """Call the rule on the given attributes (raises the rule's SpmdError if it refuses)."""
        rule = sr.get_rule(self.rule)
        if self.generic:
            fn = rule.infer_forward if self.direction == "forward" else rule.infer_reverse
            return fn(flat_slots(self.inputs, TensorSpec), flat_slots(self.outputs, TensorSpec))
        args: list[Any] = [list(a) if isinstance(a, tuple) else a for a in self.inputs]
        if self.direction == "forward":
            return rule.infer_forward(*args, **dict(self.attrs))
        outs: list[Any] = [list(a) if isinstance(a, tuple) else a for a in self.outputs]
        kw = {k: v for k, v in self.attrs.items() if k in self.reverse_attr_names}
        return rule.infer_reverse(*args, *outs, **kw)

    def describe(self) -> str:
        def fmt(a: Arg) -> str:
            if a is None:
                return "None"
            if isinstance(a, tuple):
                return "[" + ", ".join(fmt(t) for t in a) + "]"
            return f"{list(a.shape)}{a.attr.mapping_str()}"

        ins = ", ".join(fmt(a) for a in self.inputs)
        text = f"{self.rule} {self.direction} on mesh {list(self.mesh.shape)}: inputs {ins}"
        if self.direction == "reverse" or self.generic:
            text += f"; outputs {', '.join(fmt(a) for a in self.outputs)}"
        if self.attrs:
            text += f"; attrs {dict(self.attrs)}"
        if self.op != self.rule:
            text += f"; stand-in op {self.op}"
        return text



def draw_mesh(rng: Rng) -> sr.ProcessMesh:
    shape = MESH_SHAPES[int(rng.integers(len(MESH_SHAPES)))]
    return sr.ProcessMesh.from_shape(list(shape))


def draw_attr(rng: Rng, mesh: sr.ProcessMesh, ndim: int, dtype: str) -> DistAttr:
    """A random valid attribute: each dim replicated, sharded or co-sharded; then pending
    partials, of a reduce type the dtype can hold, on some of the unused mesh dims."""
    free = list(range(mesh.ndim))
    rng.shuffle(free)
    mdm: list[tuple[int, ...]] = []
    for _ in range(ndim):
        u = rng.random()
        take = 0 if u < 0.4 else (1 if u < 0.9 else 2)
        take = min(take, len(free))
        mdm.append(tuple(free.pop() for _ in range(take)))
    kind = "b" if dtype == "bool" else ("i" if dtype.startswith("int") else "f")
    reduces = _REDUCES[kind]
    partial = {d: reduces[int(rng.integers(len(reduces)))] for d in free if rng.random() < 0.25}
    return DistAttr(mesh, multi_dims_mapping=mdm, partial=partial)


def _spec(rng: Rng, mesh: sr.ProcessMesh, shape: Shape, dtype: str) -> TensorSpec:
    return TensorSpec(shape, draw_attr(rng, mesh, len(shape), dtype))


# ---- a draft: what a family generator decides --------------------------------------------------
#: a list argument's shapes are a list, so they never read as one shape
ShapeArg = Shape | None | list[Shape]


@dataclass(frozen=True)
class Draft:
    """An op call without attributes: input shapes, value domains and the op's attributes."""

    op: str
    shapes: tuple[ShapeArg, ...]
    domains: tuple[DomainArg, ...]
    attrs: dict[str, Any]


Family = Callable[[str, Rng], Draft]


def _pick(rng: Rng, seq: Sequence[Any]) -> Any:
    return seq[int(rng.integers(len(seq)))]


def _shape(rng: Rng, rank: int) -> Shape:
    return tuple(int(_pick(rng, SIZES)) for _ in range(rank))


def _rank(rng: Rng, lo: int, hi: int) -> int:
    return int(rng.integers(lo, hi + 1))


def _neg(rng: Rng, axis: int, ndim: int) -> int:
    """``axis`` or its negative spelling (rules and kernels must accept both)."""
    return axis - ndim if ndim and rng.random() < 0.3 else axis


# ---- elementwise -------------------------------------------------------------------------------
_UNARY_DOMAINS: Final[Mapping[str, str]] = {
    **dict.fromkeys(("log", "log10", "log2", "log1p", "sqrt", "rsqrt", "reciprocal", "lgamma",
                     "digamma", "poisson"), "positive"),
    **dict.fromkeys(("asin", "acos", "atanh", "erfinv"), "unit"),
    **dict.fromkeys(("logit", "bernoulli"), "prob"),
    "acosh": "ge1", "logical_not": "bool", "bitwise_not": "int",
}
_BINARY_DOMAINS: Final[Mapping[str, tuple[str, str]]] = {
    **dict.fromkeys(("bitwise_and", "bitwise_or", "bitwise_xor"), ("int", "int")),
    **dict.fromkeys(("logical_and", "logical_or", "logical_xor"), ("bool", "bool")),
    **dict.fromkeys(("divide", "elementwise_div", "floor_divide", "remainder", "trunc_divide"),
                    ("real", "nonzero")),
    "elementwise_pow": ("positive", "real"),
}


def unary(op: str, rng: Rng) -> Draft:
    attrs = {"approximate": bool(rng.integers(2))} if op == "gelu" else {}
    return Draft(op, (_shape(rng, _rank(rng, 0, 3)),), (_UNARY_DOMAINS.get(op, "real"),), attrs)


def _broadcast_pair(rng: Rng) -> tuple[Shape, Shape]:
    out = _shape(rng, _rank(rng, 0, 3))
    x = tuple(1 if rng.random() < 0.2 else n for n in out)
    y = tuple(1 if rng.random() < 0.2 else n for n in out)
    u = rng.random()
    if u < 0.25:
        x = x[int(rng.integers(len(x) + 1)) :]
    elif u < 0.5:
        y = y[int(rng.integers(len(y) + 1)) :]
    return x, y


def binary(op: str, rng: Rng) -> Draft:
    if op == "swiglu":
        shape = _shape(rng, _rank(rng, 1, 3))
        if rng.random() < 0.5:
            return Draft(op, (shape, shape), ("real", "real"), {})
        halves = (*shape[:-1], 2 * shape[-1])
        return Draft(op, (halves, None), ("real", None), {})
    x, y = _broadcast_pair(rng)
    return Draft(op, (x, y), _BINARY_DOMAINS.get(op, ("real", "real")), {})


# ---- concat / split ----------------------------------------------------------------------------
def concat_split(op: str, rng: Rng) -> Draft:
    if op in ("concat", "stack", "add_n"):
        k = _rank(rng, 1, 3)
        lo = 1 if op == "concat" else 0
        base = _shape(rng, _rank(rng, lo, 3))
        if op == "add_n":
            return Draft(op, ([base] * k,), (("real",) * k,), {})
        if op == "stack":
            axis = int(rng.integers(len(base) + 1))
            return Draft(op, ([base] * k,), (("real",) * k,),
                         {"axis": _neg(rng, axis, len(base) + 1)})
        axis = int(rng.integers(len(base)))
        shapes = [(*base[:axis], int(_pick(rng, SIZES)), *base[axis + 1 :]) for _ in range(k)]
        return Draft(op, (shapes,), (("real",) * k,), {"axis": _neg(rng, axis, len(base))})
    x = _shape(rng, _rank(rng, 1, 3))
    axis = int(rng.integers(len(x)))
    n = x[axis]
    attrs: dict[str, Any] = {"axis": _neg(rng, axis, len(x))}
    if op == "split":
        cuts = sorted({int(c) for c in rng.integers(1, n, size=int(rng.integers(0, 3)))}) if n > 1 \
            else []
        sections = [b - a for a, b in zip([0, *cuts], [*cuts, n], strict=True)]
        if rng.random() < 0.3:
            sections[int(rng.integers(len(sections)))] = -1
        attrs["sections"] = sections
    elif op == "split_with_num":
        attrs["num"] = int(_pick(rng, [d for d in range(1, n + 1) if n % d == 0]))
    return Draft(op, (x,), ("real",), attrs)


# ---- reductions --------------------------------------------------------------------------------
_REDUCE_BASE: Final = ("sum", "max", "min", "product", "avg", "any", "all")


def _axes(rng: Rng, ndim: int) -> list[int]:
    """A random set of reduced axes; empty (every dim) sometimes."""
    if ndim == 0 or rng.random() < 0.2:
        return []
    k = _rank(rng, 1, ndim)
    return [_neg(rng, int(a), ndim) for a in rng.permutation(ndim)[:k]]


def reduction(op: str, rng: Rng) -> Draft:
    x = _shape(rng, _rank(rng, 0, 3))
    nd = len(x)
    domain = {"all": "bool", "any": "bool", "prod": "near1"}.get(op, "real")
    attrs: dict[str, Any]
    if op == "mean_all":
        attrs = {}
    elif op in ("argmax", "argmin"):
        x = _shape(rng, _rank(rng, 1, 3))
        attrs = {"axis": _neg(rng, int(rng.integers(len(x))), len(x)),
                 "keepdims": bool(rng.integers(2)), "flatten": rng.random() < 0.25}
    elif op == "logsumexp":
        attrs = {"axis": _axes(rng, nd), "keepdims": bool(rng.integers(2)),
                 "reduce_all": rng.random() < 0.2}
    elif op == "p_norm":
        x = _shape(rng, _rank(rng, 1, 3))
        attrs = {"porder": float(_pick(rng, [0.0, 1.0, 2.0, 3.0, math.inf, -math.inf])),
                 "axis": _neg(rng, int(rng.integers(len(x))), len(x)), "epsilon": 1e-12,
                 "keepdims": bool(rng.integers(2)), "asvector": rng.random() < 0.25}
    else:
        attrs = {"axis": _axes(rng, nd), "keep_dim": bool(rng.integers(2))}
        if op == "reduce_base":
            rt = int(rng.integers(len(_REDUCE_BASE)))
            attrs["reduce_type"] = rt
            domain = {"any": "bool", "all": "bool", "product": "near1"}.get(_REDUCE_BASE[rt], "real")
    return Draft(op, (x,), (domain,), attrs)


# ---- matrix products ---------------------------------------------------------------------------
def matmul(op: str, rng: Rng) -> Draft:
    m, k, n = (int(_pick(rng, SIZES)) for _ in range(3))
    if op == "bmm":
        b = int(_pick(rng, SIZES))
        return Draft(op, ((b, m, k), (b, k, n)), ("real", "real"), {})
    xr, yr = _rank(rng, 1, 4), _rank(rng, 1, 4)
    batch = _shape(rng, max(xr, yr) - 2) if max(xr, yr) > 2 else ()
    tx = xr >= 2 and rng.random() < 0.3
    ty = yr >= 2 and rng.random() < 0.3

    def operand(rank: int, rows: int, cols: int, trans: bool) -> Shape:
        if rank == 1:
            return (cols,) if rows == m else (rows,)
        own = tuple(1 if rng.random() < 0.2 else s for s in batch[len(batch) - (rank - 2) :])
        return (*own, cols, rows) if trans else (*own, rows, cols)

    x = operand(xr, m, k, tx)
    y = (k,) if yr == 1 else operand(yr, k, n, ty)
    return Draft(op, (x, y), ("real", "real"), {"trans_x": tx, "trans_y": ty})


def einsum(op: str, rng: Rng) -> Draft:
    """A random equation of one or two operands; sometimes a diagonal (``ii->i``)."""
    pool = "abcde"
    size = {ch: int(_pick(rng, SIZES)) for ch in pool}
    terms = []
    for _ in range(_rank(rng, 1, 2)):
        term = "".join(rng.permutation(list(pool))[: _rank(rng, 1, 3)])
        if rng.random() < 0.1:
            term += term[0]  # a repeated letter: a diagonal
        terms.append(term)
    letters = sorted(set("".join(terms)))
    kept = [ch for ch in rng.permutation(letters) if rng.random() < 0.6]
    eq = ",".join(terms) + "->" + "".join(kept)
    shapes = [tuple(size[ch] for ch in t) for t in terms]
    return Draft(op, (shapes,), (("real",) * len(terms),), {"equation": eq})


# ---- shape ops ---------------------------------------------------------------------------------
def _factor(rng: Rng, n: int) -> list[int]:
    """A random factorisation of ``n`` into 1..4 factors (ones included sometimes)."""
    primes: list[int] = []
    rest, p = n, 2
    while rest > 1:
        while rest % p == 0:
            primes.append(p)
            rest //= p
        p += 1
    k = _rank(rng, 1, 4)
    out = [1] * k
    for q in primes:
        out[int(rng.integers(k))] *= q
    return out


def shape_op(op: str, rng: Rng) -> Draft:
    x = _shape(rng, _rank(rng, 0 if op in ("reshape", "reshape2", "unsqueeze", "unsqueeze2",
                                           "squeeze", "flatten") else 1, 3))
    nd = len(x)
    attrs: dict[str, Any]
    if op in ("reshape", "reshape2"):
        tgt: list[int] = _factor(rng, math.prod(x))
        if rng.random() < 0.3:
            tgt[int(rng.integers(len(tgt)))] = -1
        elif rng.random() < 0.3:
            same = [i for i in range(min(len(tgt), nd)) if tgt[i] == x[i]]
            if same:
                tgt[int(_pick(rng, same))] = 0  # Paddle's "copy x's dim"
        attrs = {"shape": tgt}
    elif op == "flatten":
        start = int(rng.integers(max(nd, 1)))
        stop = int(rng.integers(start, max(nd, 1)))
        attrs = {"start_axis": _neg(rng, start, nd), "stop_axis": _neg(rng, stop, nd)}
    elif op == "squeeze":
        x = tuple(1 if rng.random() < 0.35 else n for n in x)
        axes = [_neg(rng, int(a), nd) for a in rng.permutation(nd)[: int(rng.integers(nd + 1))]]
        attrs = {"axis": axes if rng.random() < 0.7 else []}
    elif op in ("unsqueeze", "unsqueeze2"):
        axes, rank = [], nd
        for _ in range(_rank(rng, 1, 2)):
            a = int(rng.integers(rank + 1))
            axes.append(_neg(rng, a, rank + 1) if rng.random() < 0.3 else a)
            rank += 1
        attrs = {"axis": axes}
    else:  # transpose
        attrs = {"perm": [_neg(rng, int(p), nd) for p in rng.permutation(nd)]}
    return Draft(op, (x,), ("real",), attrs)


# ---- softmax, norms, embedding, cross entropy --------------------------------------------------
def softmax(op: str, rng: Rng) -> Draft:
    x = _shape(rng, _rank(rng, 1, 3))
    return Draft(op, (x,), ("real",), {"axis": _neg(rng, int(rng.integers(len(x))), len(x))})


def norm(op: str, rng: Rng) -> Draft:
    x = _shape(rng, _rank(rng, 1, 3))
    if op == "fused_rms_norm":
        return Draft(op, (x, x[-1:]), ("real", "positive"), {"epsilon": 1e-5})
    bna = int(rng.integers(len(x)))
    p = (math.prod(x[bna:]),)
    scale = p if rng.random() < 0.7 else None
    bias = p if rng.random() < 0.7 else None
    return Draft(op, (x, scale, bias),
                 ("real", None if scale is None else "positive", None if bias is None else "real"),
                 {"epsilon": 1e-5, "begin_norm_axis": bna})


def embedding(op: str, rng: Rng) -> Draft:
    vocab, hidden = int(_pick(rng, SIZES[2:])), int(_pick(rng, SIZES))
    ids = _shape(rng, _rank(rng, 0, 2))
    pad = int(rng.integers(vocab)) if rng.random() < 0.2 else -1
    return Draft(op, (ids, (vocab, hidden)), (f"index:{vocab}", "real"),
                 {"padding_idx": pad, "sparse": rng.random() < 0.2})


def cross_entropy(op: str, rng: Rng) -> Draft:
    x = _shape(rng, _rank(rng, 1, 3))
    nd = len(x)
    axis = nd - 1 if rng.random() < 0.6 else int(rng.integers(nd))
    classes = x[axis]
    soft = rng.random() < 0.3
    use_softmax = rng.random() < 0.8
    attrs: dict[str, Any] = {
        "soft_label": soft, "use_softmax": use_softmax, "numeric_stable_mode": True,
        "ignore_index": -100, "axis": _neg(rng, axis, nd),
    }
    if soft:
        label, ldom = x, "positive"
    else:
        label, ldom = (*x[:axis], 1, *x[axis + 1 :]), f"index:{classes}"
        if rng.random() < 0.3:
            attrs["ignore_index"] = int(rng.integers(classes))
    return Draft(op, (x, label), ("real" if use_softmax else "prob", ldom), attrs)


# ---- generic rules: stand-in ops whose semantics the rule claims to cover ------------------------
#: default_data_parallel claims: an op whose every tensor has the batch on dim 0 and computes each
#: sample independently. replicated claims: any op.
DATA_PARALLEL_STAND_INS: Final = ("relu", "exp", "add", "multiply", "softmax", "bmm", "layer_norm",
                                  "concat", "transpose", "sum")


def data_parallel_draft(rng: Rng) -> Draft:
    op = str(_pick(rng, DATA_PARALLEL_STAND_INS))
    batch = int(_pick(rng, SIZES[1:]))

    def batched(d: Draft) -> Draft:
        return Draft(d.op, tuple(_with_batch(s, batch) for s in d.shapes), d.domains, d.attrs)

    if op in ("relu", "exp"):
        return batched(unary(op, rng))
    if op in ("add", "multiply"):
        s = _shape(rng, _rank(rng, 0, 2))
        return batched(Draft(op, (s, s), ("real", "real"), {}))
    if op == "softmax":
        s = _shape(rng, _rank(rng, 1, 2))
        return batched(Draft(op, (s,), ("real",), {"axis": -1 if rng.random() < 0.5 else len(s)}))
    if op == "bmm":
        m, k, n = (int(_pick(rng, SIZES)) for _ in range(3))
        return Draft(op, ((batch, m, k), (batch, k, n)), ("real", "real"), {})
    if op == "layer_norm":
        s = _shape(rng, _rank(rng, 1, 2))
        return batched(Draft(op, (s, None, None), ("real", None, None),
                             {"epsilon": 1e-5, "begin_norm_axis": _rank(rng, 1, len(s))}))
    if op == "concat":
        base = _shape(rng, _rank(rng, 1, 2))
        k = _rank(rng, 1, 3)
        shapes = [(batch, *base[:-1], int(_pick(rng, SIZES))) for _ in range(k)]
        return Draft(op, (shapes,), (("real",) * k,), {"axis": len(base)})
    if op == "transpose":
        s = _shape(rng, _rank(rng, 0, 2))
        perm = [0, *(int(p) + 1 for p in rng.permutation(len(s)))]
        return batched(Draft(op, (s,), ("real",), {"perm": perm}))
    s = _shape(rng, _rank(rng, 1, 2))
    axes = [int(a) + 1 for a in rng.permutation(len(s))[: _rank(rng, 1, len(s))]]
    return batched(Draft("sum", (s,), ("real",), {"axis": axes, "keep_dim": rng.random() < 0.5}))


def _with_batch(s: ShapeArg, batch: int) -> ShapeArg:
    if s is None:
        return None
    if isinstance(s, list):
        return [(batch, *t) for t in s]
    return (batch, *s)


FAMILIES: Final[Mapping[str, Family]] = {
    "elementwise_unary": unary,
    "elementwise_binary": binary,
    "concat_split": concat_split,
    "reduction": reduction,
    "matmul": matmul,
    "einsum": einsum,
    "shape": shape_op,
    "softmax": softmax,
    "norm": norm,
    "embedding": embedding,
    "cross_entropy": cross_entropy,
}


# ---- drafts become cases -----------------------------------------------------------------------
class NoCaseError(Exception):
    """No generator covers this rule (or none could draw a valid case for it)."""


def is_gradient_rule(name: str) -> bool:
    """``<op>_grad`` rules lay out a backward op: the op's inputs and the cotangents of its
    outputs in, the cotangents of its inputs out."""
    return name.endswith("_grad")


def _grad_case(name: str, direction: Direction, rng: Rng) -> Case:
    """A case of a gradient rule: a forward case of its op, whose inputs and outputs (as their
    cotangents) are the backward op's inputs and whose input cotangents are its outputs."""
    rule = sr.get_rule(name)
    base = name.removesuffix("_grad")
    base_rule = sr.get_rule(base)
    last: Exception | None = None
    for _ in range(50):
        draft, _ = _draft_for(base_rule, base, rng)
        try:
            fwd = draft_case(base, "forward", draft, rng)
        except sr.SpmdError as e:
            last = e
            continue
        inputs: tuple[Arg, ...] = (*fwd.inputs, *fwd.outputs)
        domains = (*fwd.domains, *(_cotangent_domain(a) for a in fwd.outputs))
        unanswered: tuple[int, ...] = ()
        if name == "einsum_grad":
            # the forward operands again, as the cache Paddle's backward op receives
            inputs = (inputs[0], inputs[0], *inputs[1:])
            domains = (domains[0], domains[0], *domains[1:])
            unanswered = (1,)
        if len(inputs) != len(rule.inputs) or len(rule.outputs) > len(fwd.inputs):
            raise NoCaseError(
                f"{name}: the backward op takes {len(rule.inputs)} tensors, but {base}'s "
                f"inputs and outputs are {len(inputs)}"
            )
        return Case(
            rule=name, direction=direction, op=name, mesh=fwd.mesh, inputs=inputs,
            outputs=fwd.inputs[:len(rule.outputs)],
            attrs={a.name: fwd.attrs.get(a.name, a.default) for a in rule.attrs},
            domains=domains, unanswered=unanswered,
        )
    raise NoCaseError(f"{name}: no valid case in 50 draws (last: {last})")


def _cotangent_domain(arg: Arg) -> DomainArg:
    if arg is None:
        return None
    return "real" if isinstance(arg, TensorSpec) else tuple("real" for _ in arg)


def _draft_for(rule: Rule, name: str, rng: Rng) -> tuple[Draft, bool]:
    if rule.family == "generic":
        if name == "replicated" and rng.random() < 0.5:
            fam = str(_pick(rng, [f for f in FAMILIES if f != "einsum"]))
            stand_in = {"elementwise_unary": "tanh", "elementwise_binary": "subtract",
                        "concat_split": "split", "reduction": "max", "matmul": "matmul",
                        "shape": "reshape", "softmax": "log_softmax", "norm": "layer_norm",
                        "embedding": "embedding", "cross_entropy": "softmax_with_cross_entropy"}
            return FAMILIES[fam](stand_in[fam], rng), True
        return data_parallel_draft(rng), True
    family = FAMILIES.get(rule.family)
    if family is None:
        raise NoCaseError(f"{name}: no case generator for family {rule.family!r}")
    return family(name, rng), False


def _meta(shape: ShapeArg, domain: DomainArg) -> Any:
    if shape is None:
        return None
    if isinstance(shape, list):
        assert isinstance(domain, tuple)
        return tuple(TensorMeta(s, domain_dtype(d)) for s, d in zip(shape, domain, strict=True))
    assert isinstance(domain, str)
    return TensorMeta(shape, domain_dtype(domain))


def _given(rng: Rng, mesh: sr.ProcessMesh, meta: Any) -> Arg:
    if meta is None:
        return None
    if isinstance(meta, TensorMeta):
        return _spec(rng, mesh, meta.shape, meta.dtype)
    return tuple(_spec(rng, mesh, m.shape, m.dtype) for m in meta)


def draft_case(name: str, direction: Direction, draft: Draft, rng: Rng, *, generic: bool = False,
               mesh: sr.ProcessMesh | None = None) -> Case:
    """The case of ``draft`` on a random (or the given) mesh with random given attributes."""
    mesh = mesh if mesh is not None else draw_mesh(rng)
    metas = [_meta(s, d) for s, d in zip(draft.shapes, draft.domains, strict=True)]
    op_rule = sr.get_rule(draft.op)
    attrs = {a.name: draft.attrs.get(a.name, a.default) for a in op_rule.attrs}
    out_metas = infer_meta(draft.op, metas, attrs)
    rule = sr.get_rule(name)
    rev_attrs = rule.reverse_attrs
    return Case(
        rule=name, direction=direction, op=draft.op, mesh=mesh,
        inputs=tuple(_given(rng, mesh, m) for m in metas),
        outputs=tuple(_given(rng, mesh, m) for m in out_metas),
        attrs=attrs, domains=draft.domains, generic=generic,
        reverse_attr_names=tuple(a.name for a in rev_attrs) if rev_attrs is not None else (),
    )


def draw_case(name: str, direction: Direction, rng: Rng) -> Case:
    """A random valid case for rule ``name`` (shape inference accepts it; the rule may refuse)."""
    if is_gradient_rule(name):
        return _grad_case(name, direction, rng)
    rule = sr.get_rule(name)
    last: Exception | None = None
    for _ in range(50):
        draft, generic = _draft_for(rule, name, rng)
        try:
            return draft_case(name, direction, draft, rng, generic=generic)
        except sr.SpmdError as e:  # a draft shape inference rejects: draw again
            last = e
    raise NoCaseError(f"{name}: no valid case in 50 draws (last: {last})")


def case_rng(seed: int, name: str, direction: Direction, index: int) -> Rng:
    """The generator of one case: the same case whatever else is verified."""
    key = zlib.crc32(f"{name}/{direction}".encode())
    return np.random.default_rng([seed, key, index])


__all__ = [
    "FAMILIES", "MESH_SHAPES", "Arg", "Case", "Direction", "DomainArg", "Draft", "NoCaseError",
    "case_rng", "domain_dtype", "draft_case", "draw_attr", "draw_case", "draw_mesh",
    "draw_values", "is_gradient_rule",
]
