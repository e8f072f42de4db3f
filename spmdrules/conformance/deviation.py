"""The contract of deviations from Paddle 3.3.1: each a named class with a predicate and a kind.

Each module of ``spmdrules.conformance.deviations`` registers the classes of one rule family (the
rules themselves know nothing of Paddle's recorded cases). The conformance runner files every
disagreement under the first class whose predicate accepts it; an unfiled disagreement is a bug.
Every class is listed in ``docs/deviations.md``, and what it claims is proven by execution
(``spmdrules.conformance.execution`` runs both answers of every case; each class has a test in its
family's tests):

* ``execution``: Paddle's answer does not compute the op: run on the simulated mesh it is
  malformed (claims blocks the kernel does not compute, or lays out no argument it must) or its
  result differs from the serial op's; ours computes it;
* ``parallelism``: Paddle's answer computes the op, but keeps whole what ours keeps split (the
  policy of docs/deviations/uneven.md), or reduces first a partial that ours keeps pending
  through a linear op (``shape-op-keeps-partial``, ``reduce-sum-keeps-partial``): both run
  correctly, ours with less communication.

A difference in how an answer is written only is no deviation: the comparator reads the two as one
answer (:mod:`spmdrules.conformance.formats`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from spmdrules.conformance import formats
from spmdrules.core.attr import DistAttr
from spmdrules.core.spec import SpmdInfo

#: (case record, our answer or our exception) -> does this class explain the disagreement?
Predicate = Callable[[dict[str, Any], SpmdInfo | BaseException], bool]
#: what a class claims of Paddle's answer (see the module's doc)
Kind = Literal["execution", "parallelism"]


@dataclass(frozen=True, slots=True)
class Deviation:
    name: str
    ops: frozenset[str]
    summary: str
    predicate: Predicate
    kind: Kind = "execution"

    def explains(self, case: dict[str, Any], got: SpmdInfo | BaseException) -> bool:
        return case["op"] in self.ops and self.predicate(case, got)


_DEVIATIONS: dict[str, Deviation] = {}


def register_deviation(
    name: str, ops: set[str] | frozenset[str], summary: str, predicate: Predicate,
    kind: Kind = "execution",
) -> Deviation:
    dev = Deviation(name, frozenset(ops), summary, predicate, kind)
    if name in _DEVIATIONS:
        raise ValueError(f"deviation class {name!r} is registered twice")
    _DEVIATIONS[name] = dev
    return dev


def deviations() -> list[Deviation]:
    return list(_DEVIATIONS.values())


def classify(case: dict[str, Any], got: SpmdInfo | BaseException) -> str | None:
    """The name of the deviation class that explains this disagreement, or None.

    A predicate sees the case as recorded and, on a mesh with dims of size 1, also without them
    (the comparator's equivalence, ``formats.squeezed``): a class explains the case either way."""
    variants = [(case, got)]
    if formats.unit_dims(case):
        variants.append(formats.squeezed(case, got))
    for dev in deviations():
        if any(dev.explains(c, g) for c, g in variants):
            return dev.name
    return None


def rule_module(family: str) -> Any:
    """The rule module of ``family`` (``rules/<family>.py``), whose facts a predicate reads.

    ``rules/`` is installed as ``spmdrules.rules`` but type-checked as a package of its own, so the
    deviations import it by name; everything they read from it is typed ``Any``.
    """
    return importlib.import_module(f"spmdrules.rules.{family}")


def _norm(e: dict[str, Any] | None, keep_partial: bool) -> tuple[Any, ...]:
    if e is None:
        return ((), ())
    m = e.get("multi_dims_mapping")
    mdm = tuple(tuple(d) for d in m) if m is not None else tuple(
        () if d == -1 else (d,) for d in e["dims_mapping"]
    )
    part = tuple(sorted((int(k), v) for k, v in e.get("partial", {}).items()))
    return mdm, part if keep_partial else ()


def _ours(a: DistAttr | None) -> tuple[Any, ...]:
    return ((), ()) if a is None else (a.multi_dims_mapping, a.partial_items)


def agrees_when(case: dict[str, Any], got: Any, *, absent_as_none: bool, partial: bool) -> bool:
    """Does ``got`` equal Paddle's answer once absent (shape0) inputs read as None and, unless
    ``partial``, Paddle's partials are dropped? Shared by the nn families' deviations."""
    exp = case["expected"]
    if "error" in exp or isinstance(got, BaseException):
        return False
    absent = {i for i, t in enumerate(case["inputs"]) if t.get("absent") == "shape0"}
    rank0 = {i for i, t in enumerate(case["inputs"]) if t.get("absent") == "rank0"}
    for slot, ours in (("inputs", got.inputs), ("outputs", got.outputs)):
        want = exp[slot]
        if len(want) != len(ours):
            return False
        for i, (e, g) in enumerate(zip(want, ours, strict=True)):
            inputs = slot == "inputs"
            if absent_as_none and inputs and i in absent:
                if g is not None or e.get("process_mesh", 0) is not None:
                    return False
            elif not (inputs and i in rank0 and _nothing_to_shard(e, g)) \
                    and _norm(e, partial) != _ours(g):
                return False
    return True


def _nothing_to_shard(e: dict[str, Any], g: DistAttr | None) -> bool:
    """A rank-0 input that neither answer shards ("nothing to shard", as calls.agrees)."""
    return (g is None or not any(g.multi_dims_mapping)) and not any(_norm(e, False)[0])


def uneven_dropped(m: tuple[Any, ...], shape: Sequence[int], mesh_shape: Sequence[int]
                   ) -> tuple[Any, ...]:
    """The mapping with every dim its mesh dims do not divide evenly replicated."""
    out = []
    for dims, n in zip(m, shape, strict=True):
        count = 1
        for d in dims:
            count *= mesh_shape[d]
        out.append(() if dims and n % count else dims)
    return tuple(out)


def paddle_drops_uneven(case: dict[str, Any], got: Any) -> bool:
    """Is Paddle's answer ours with some unevenly divided dims replicated, for an op whose every
    tensor has x's shape (unary elementwise, softmax)? Ours keeps those shards: a block of any
    size computes its part of the result exactly."""
    exp = case["expected"]
    if "error" in exp or isinstance(got, BaseException):
        return False
    shape = case["inputs"][0]["shape"]
    mesh_shape = case["mesh"]["shape"]
    dropped = False
    for slot, ours in (("inputs", got.inputs), ("outputs", got.outputs)):
        want = exp[slot]
        if len(want) != len(ours):
            return False
        for e, g in zip(want, ours, strict=True):
            if g is None or isinstance(g, tuple) or len(g.multi_dims_mapping) != len(shape):
                if _norm(e, True) != _ours(g):
                    return False
                continue
            mine = _ours(g)
            theirs = _norm(e, True)
            if theirs == mine:
                continue
            if theirs != (uneven_dropped(mine[0], shape, mesh_shape), mine[1]):
                return False
            dropped = True
    return dropped
