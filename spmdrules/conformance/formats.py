"""How an answer is written: the format equivalences the comparator reads as one answer.

Paddle's rules and ours can write one layout in different ways. These differences are of format,
not of execution: run on the simulated mesh, the two answers compute alike (each equivalence is
proven so in ``tests/conformance/test_formats.py``, by executing Paddle's answer with the slot it
leaves out, or writes as a placeholder, filled with ours). The comparator (``calls.agrees``) and
the deviation predicates read them as the same answer:

* **mesh dims of size 1**: sharding over one process is no sharding, and a pending reduction over
  one process is none; both answers are compared on the mesh without those dims (:func:`squeezed`);
* **absent optional inputs**: one given as the ``shape0`` spec is our None where Paddle answers a
  mesh-less attribute; one given as a 0-d (``rank0``) spec may be answered replicated at any rank;
* **an argument Paddle's rule answers no attribute for** (:data:`OMITTED`): its gradient rule takes
  a tensor the backward kernel does not read, and answers one attribute fewer than the arguments;
  the public contract wants one per argument, so ours has it, and the comparison skips it;
* **an output the kernel does not write** (:data:`UNWRITTEN`): any attribute lays it out;
* **an output Paddle answers with an absent input's placeholder** (:data:`PLACEHOLDER`): the
  placeholder (no mesh, or the 0-d replicated attribute) says "nothing to lay out"; the kernel
  writes the whole tensor on every process, as ours says (replicated).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from spmdrules.core.attr import DistAttr
from spmdrules.core.mesh import ProcessMesh
from spmdrules.core.spec import SpmdInfo

Case = dict[str, Any]
#: how one slot compares: as written, or under one of the equivalences above
How = Literal["plain", "shape0", "rank0", "unwritten", "placeholder"]


@dataclass(frozen=True, slots=True)
class Omitted:
    """Paddle's rule for ``op`` (``kind``: forward, reverse or grad) answers no attribute for input
    argument ``index`` (``name``), which the kernel does not read."""

    op: str
    kind: str
    index: int
    name: str
    why: str


OMITTED: Final[tuple[Omitted, ...]] = (
    Omitted("einsum", "grad", 1, "inner_cache",
            "EinsumGradInferSpmd lays out the operands and out_grad; the cache holds the operands "
            "and ours lays it out as them"),
    Omitted("pad", "grad", 0, "x",
            "PadGradInferSpmd takes the cotangent only; pad_grad reads x's shape, not its values, "
            "and ours lays x out as the cotangent"),
    Omitted("instance_norm", "grad", 2, "bias",
            "InstanceNormGradInferSpmd answers 5 attributes for 6 tensors; instance_norm_grad does "
            "not read bias, and ours answers it replicated"),
)


@dataclass(frozen=True, slots=True)
class Unwritten:
    """``op``'s output ``index`` (``name``) is not computed when ``when(attrs)``."""

    op: str
    index: int
    name: str
    when: Callable[[Mapping[str, Any]], bool]
    why: str


UNWRITTEN: Final[tuple[Unwritten, ...]] = (
    Unwritten("flash_attention", 1, "softmax", lambda attrs: not attrs.get("return_softmax", False),
              "with return_softmax=False flash attention allocates no softmax"),
)


@dataclass(frozen=True, slots=True)
class Placeholder:
    """Paddle answers ``op``'s output ``output`` with input ``input``'s attribute; when that input
    is absent, the answer is the absent placeholder, and the kernel writes the output whole."""

    op: str
    output: int
    input: int
    why: str


PLACEHOLDER: Final[tuple[Placeholder, ...]] = (
    Placeholder("flash_attention", 3, 3,
                "FlashAttInferSpmdReverse answers seed_offset with fixed_seed_offset's attribute; "
                "the kernel writes the whole [seed, offset] pair on every process"),
)


def kind(case: Case) -> str:
    """``forward``, ``reverse`` or ``grad``: which of Paddle's rules made the record."""
    if case["direction"] == "forward":
        return "forward"
    return "grad" if case.get("reverse_kind") == "grad" else "reverse"


def omitted_input(case: Case) -> Omitted | None:
    k = kind(case)
    return next((o for o in OMITTED if o.op == case["op"] and o.kind == k), None)


# ---- mesh dims of size 1 ---------------------------------------------------------------------------
def unit_dims(case: Case) -> tuple[int, ...]:
    """The mesh dims of size 1 (none for a hand-made record without a mesh)."""
    return tuple(d for d, n in enumerate(case.get("mesh", {}).get("shape", ())) if n == 1)


def _renumber(unit: Sequence[int]) -> Callable[[int], int]:
    return lambda d: d - sum(1 for u in unit if u < d)


def _squeeze_entry(e: Any, unit: Sequence[int]) -> Any:
    if isinstance(e, list):
        return [_squeeze_entry(x, unit) for x in e]
    if not isinstance(e, dict):
        return e
    new = _renumber(unit)
    out = dict(e)
    if "multi_dims_mapping" in e:
        out["multi_dims_mapping"] = [[new(d) for d in dims if d not in unit]
                                     for dims in e["multi_dims_mapping"]]
    if "dims_mapping" in e:
        out["dims_mapping"] = [-1 if d in unit else (new(d) if d >= 0 else d)
                               for d in e["dims_mapping"]]
    if "partial" in e:
        out["partial"] = {str(new(int(k))): v for k, v in e["partial"].items()
                          if int(k) not in unit}
    return out


def _squeeze_attr(a: Any, mesh: ProcessMesh, unit: Sequence[int]) -> Any:
    if isinstance(a, tuple):
        return tuple(_squeeze_attr(x, mesh, unit) for x in a)
    if not isinstance(a, DistAttr):
        return a
    new = _renumber(unit)
    # as written, not validated: a predicate may squeeze Paddle's answer rebuilt by our rule
    return DistAttr._make(mesh, tuple(tuple(new(d) for d in dims if d not in unit)
                                      for dims in a.multi_dims_mapping),
                          tuple((new(d), rt) for d, rt in a.partial_items if d not in unit))


def squeezed(case: Case, got: SpmdInfo | BaseException) -> tuple[Case, SpmdInfo | BaseException]:
    """The case and our answer on the mesh without its dims of size 1 (the same layouts)."""
    unit = unit_dims(case)
    if not unit:
        return case, got
    m = case["mesh"]
    shape = [n for d, n in enumerate(m["shape"]) if d not in unit] or [1]  # a mesh keeps a dim
    out = dict(case, mesh={"shape": shape, "process_ids": m["process_ids"]})
    for side in ("inputs", "outputs"):
        if side in case:
            out[side] = _squeeze_entry(case[side], unit)
    exp = case["expected"]
    out["expected"] = {k: _squeeze_entry(v, unit) if k in ("inputs", "outputs") else v
                       for k, v in exp.items()}
    if isinstance(got, BaseException):
        return out, got
    mesh = ProcessMesh.from_shape(shape, m["process_ids"])
    return out, SpmdInfo([_squeeze_attr(a, mesh, unit) for a in got.inputs],
                         [_squeeze_attr(a, mesh, unit) for a in got.outputs])


# ---- slots, aligned -------------------------------------------------------------------------------
def pairs(case: Case, got: SpmdInfo) -> list[tuple[Any, Any, How]] | None:
    """(Paddle's entry, our slot, how they compare) for every slot Paddle answers, ours aligned to
    it; None when the two answers have different numbers of slots beyond the equivalences."""
    exp = case["expected"]
    ours_in = list(got.inputs)
    given = [*case["inputs"], *case.get("outputs", [])]  # the call's arguments, inputs first
    skip = omitted_input(case)
    if skip is not None and len(exp.get("inputs", [])) == len(ours_in) - 1:
        del ours_in[skip.index]
        del given[skip.index]
    want_in, want_out = exp.get("inputs", []), exp.get("outputs", [])
    if len(want_in) != len(ours_in) or len(want_out) != len(got.outputs):
        return None
    out: list[tuple[Any, Any, How]] = []
    for i, (e, g) in enumerate(zip(want_in, ours_in, strict=True)):
        t = given[i] if i < len(given) else None
        absent = t.get("absent") if isinstance(t, dict) else None
        out.append((e, g, "shape0" if absent == "shape0" else "rank0" if absent == "rank0"
                    else "plain"))
    unwritten = {u.index for u in UNWRITTEN if u.op == case["op"] and u.when(case["attrs"])}
    placeholder = {p.output for p in PLACEHOLDER if p.op == case["op"] and kind(case) != "forward"
                   and case["inputs"][p.input].get("absent")}
    for i, (e, g) in enumerate(zip(want_out, got.outputs, strict=True)):
        how: How = "unwritten" if i in unwritten else "placeholder" if i in placeholder else "plain"
        out.append((e, g, how))
    return out


def normalized(e: dict[str, Any]) -> tuple[tuple[tuple[int, ...], ...], tuple[tuple[int, str], ...]]:
    """Paddle's entry as (multi dims mapping, sorted partial items)."""
    if "multi_dims_mapping" in e:
        mdm = tuple(tuple(d) for d in e["multi_dims_mapping"])
    else:
        mdm = tuple(() if d == -1 else (d,) for d in e["dims_mapping"])
    return mdm, tuple(sorted((int(k), v) for k, v in e.get("partial", {}).items()))


def ours(a: DistAttr | None) -> tuple[tuple[tuple[int, ...], ...], tuple[tuple[int, str], ...]]:
    if a is None:
        return (), ()
    return a.multi_dims_mapping, a.partial_items


def _replicated(a: Any) -> bool:
    return a is None or (isinstance(a, DistAttr) and not any(a.multi_dims_mapping)
                         and not a.partial_items)


def is_placeholder(e: dict[str, Any]) -> bool:
    """Paddle's attribute of an absent tensor: no mesh, or 0-d and replicated."""
    return e.get("process_mesh", 0) is None or (not e["dims_mapping"] and not e.get("partial"))


def same(e: Any, g: Any, how: How = "plain") -> bool:
    """Does our slot ``g`` write Paddle's entry ``e``?"""
    if how == "unwritten":
        return True
    if isinstance(e, list):
        return isinstance(g, list | tuple) and len(e) == len(g) and all(
            same(ei, gi) for ei, gi in zip(e, g, strict=True))
    if isinstance(g, tuple):
        return False
    if e.get("process_mesh", 0) is None and g is None:
        return True  # Paddle's mesh-less placeholder for an absent tensor: our None
    if how == "rank0" and _replicated(g) and normalized(e) == (((),) * len(e["dims_mapping"]), ()):
        return True
    if how == "placeholder" and is_placeholder(e) and _replicated(g):
        return True
    return normalized(e) == ours(g)
