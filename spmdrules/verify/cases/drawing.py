"""Drafts become cases: the mesh, the given attributes and the output shapes; gradient rules."""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import Any

import numpy as np

from spmdrules.core.attr import DistAttr
from spmdrules.core.errors import SpmdError
from spmdrules.core.families import import_families
from spmdrules.core.mesh import ProcessMesh
from spmdrules.core.spec import TensorSpec
from spmdrules.engine.registry import Rule, get_rule
from spmdrules.graph.shapes.shape_rule import TensorMeta, infer_meta
from spmdrules.verify.cases.case import (
    FAMILIES,
    Arg,
    Case,
    Direction,
    DomainArg,
    Draft,
    NoCaseError,
    Rng,
    ShapeArg,
    Split,
    domain_dtype,
    draw_mesh,
    draw_spec,
    pick,
)
from spmdrules.verify.cases.generic import REPLICATED_STAND_INS, data_parallel_draft

# every family module registers its generator as it is imported (``register_cases``)
import_families(__package__ or "", [str(Path(__file__).parent)], besides=("case", "drawing"))


def is_gradient_rule(name: str) -> bool:
    """``<op>_grad`` rules lay out a backward op: the op's inputs and the cotangents of its
    outputs in, the cotangents of its inputs out."""
    return name.endswith("_grad")


def _grad_case(name: str, direction: Direction, rng: Rng) -> Case:
    """A case of a gradient rule: a forward case of its op, whose inputs and outputs (as their
    cotangents) are the backward op's inputs and whose input cotangents are its outputs."""
    rule = get_rule(name)
    base = name.removesuffix("_grad")
    base_rule = get_rule(base)
    last: Exception | None = None
    for _ in range(50):
        draft, _ = _draft_for(base_rule, base, rng)
        try:
            fwd = draft_case(base, "forward", draft, rng)
        except SpmdError as e:
            last = e
            continue
        inputs: tuple[Arg, ...] = (*fwd.inputs, *fwd.outputs)
        domains = (*fwd.domains, *(_cotangent_domain(a) for a in fwd.outputs))
        if name == "einsum_grad":
            # the forward operands again, as the cache Paddle's backward op receives
            inputs = (inputs[0], inputs[0], *inputs[1:])
            domains = (domains[0], domains[0], *domains[1:])
        elif [p.name for p in rule.inputs] != [p.name for p in base_rule.inputs] + [
                f"{p.name}_grad" for p in base_rule.outputs]:
            inputs, domains = _by_name(rule, base_rule, fwd, inputs, domains)
        if len(inputs) != len(rule.inputs) or len(rule.outputs) > len(fwd.inputs):
            raise NoCaseError(
                f"{name}: the backward op takes {len(rule.inputs)} tensors, but {base}'s "
                f"inputs and outputs are {len(inputs)}"
            )
        return Case(
            rule=name, direction=direction, op=name, mesh=fwd.mesh, inputs=inputs,
            outputs=_input_cotangents(rule, base_rule, fwd),
            attrs={a.name: fwd.attrs.get(a.name, a.default) for a in rule.attrs},
            domains=domains,
        )
    raise NoCaseError(f"{name}: no valid case in 50 draws (last: {last})")


def _input_cotangents(rule: Rule, base: Rule, fwd: Case) -> tuple[Arg, ...]:
    """The backward op's outputs: ``<input>_grad`` shaped as that forward input (index_put_grad's
    value_grad is the value's, not the indices'), else the forward inputs in order."""
    names = [p.name for p in base.inputs]
    return tuple(fwd.inputs[names.index(p.name.removesuffix("_grad"))]
                 if p.name.removesuffix("_grad") in names else fwd.inputs[i]
                 for i, p in enumerate(rule.outputs))


def _by_name(rule: Rule, base: Rule, fwd: Case, inputs: tuple[Arg, ...],
             domains: tuple[DomainArg, ...]) -> tuple[tuple[Arg, ...], tuple[DomainArg, ...]]:
    """The backward op's arguments picked by name when they are not every forward input then
    every output's cotangent (expand_as_grad takes x and out_grad, not y; topk_grad takes the
    forward's indices): a forward input or output by its name, an ``<output>_grad`` as that
    output's cotangent. Integer outputs (indices along ``axis``) hold positions of that axis."""
    n_in = len(fwd.inputs)
    names = ([p.name for p in base.inputs] + [p.name for p in base.outputs]
             + [f"{p.name}_grad" for p in base.outputs])
    args = (*fwd.inputs, *fwd.outputs, *inputs[n_in:])
    doms = (*fwd.domains, *_value_domains(fwd), *domains[n_in:])
    picked = [names.index(p.name) for p in rule.inputs if p.name in names]
    if len(picked) != len(rule.inputs):
        return inputs, domains
    return tuple(args[i] for i in picked), tuple(doms[i] for i in picked)


def _value_domains(fwd: Case) -> list[DomainArg]:
    """The forward outputs passed as values: real, or for an integer output (indices) positions
    along the op's ``axis`` of its first input."""
    x = fwd.inputs[0]
    shapes: list[ShapeArg] = [None if a is None else a.shape if isinstance(a, TensorSpec)
                              else [t.shape for t in a] for a in fwd.inputs]
    metas = infer_meta(fwd.op, [_meta(s, d) for s, d in zip(shapes, fwd.domains, strict=True)],
                       dict(fwd.attrs))
    out: list[DomainArg] = []
    for a, m in zip(fwd.outputs, metas, strict=True):
        if (isinstance(m, TensorMeta) and m.dtype.startswith("int") and isinstance(x, TensorSpec)
                and x.shape):
            axis = int(fwd.attrs.get("axis", -1)) % len(x.shape)
            out.append(f"index:{max(1, x.shape[axis])}")
        else:
            out.append(_cotangent_domain(a))
    return out


def _cotangent_domain(arg: Arg) -> DomainArg:
    if arg is None:
        return None
    return "real" if isinstance(arg, TensorSpec) else tuple("real" for _ in arg)


def _draft_for(rule: Rule, name: str, rng: Rng) -> tuple[Draft, bool]:
    if rule.family == "generic":
        if name == "replicated" and rng.random() < 0.5:
            stand_in = str(pick(rng, REPLICATED_STAND_INS))
            return FAMILIES[get_rule(stand_in).family](stand_in, rng), True
        return data_parallel_draft(rng), True
    family = FAMILIES.lookup(rule.family)
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


def _given(rng: Rng, mesh: ProcessMesh, meta: Any) -> Arg:
    if meta is None:
        return None
    if isinstance(meta, TensorMeta):
        return draw_spec(rng, mesh, meta.shape, meta.dtype)
    return tuple(draw_spec(rng, mesh, m.shape, m.dtype) for m in meta)


def _sharded_on(t: TensorSpec, dim: int, mesh_dim: int) -> TensorSpec:
    """``t`` with ``dim`` sharded on ``mesh_dim`` alone, which its other dims and partials give up."""
    a = t.attr
    mdm = [tuple(d for d in dims if d != mesh_dim) for dims in a.multi_dims_mapping]
    mdm[dim] = (mesh_dim,)
    partial = {d: rt for d, rt in a.partial_items if d != mesh_dim}
    return TensorSpec(t.shape, DistAttr(a.mesh, multi_dims_mapping=mdm, partial=partial))


def _split(given: tuple[Arg, ...], splits: tuple[Split, ...], mesh: ProcessMesh, rng: Rng
           ) -> tuple[Arg, ...]:
    """The given arguments (inputs then outputs) with every split dim sharded on one mesh dim of
    size > 1: a contracted dim of size 1 split alike in every tensor that holds it."""
    wide = [d for d, n in enumerate(mesh.shape) if n > 1]
    if not splits or not wide:
        return given
    mesh_dim = int(pick(rng, wide))
    out = list(given)
    for s in splits:
        a = out[s.arg]
        if isinstance(a, tuple) and s.item is not None:
            out[s.arg] = tuple(_sharded_on(t, s.dim, mesh_dim) if j == s.item else t
                               for j, t in enumerate(a))
        elif isinstance(a, TensorSpec):
            out[s.arg] = _sharded_on(a, s.dim, mesh_dim)
    return tuple(out)


def draft_case(name: str, direction: Direction, draft: Draft, rng: Rng, *, generic: bool = False,
               mesh: ProcessMesh | None = None) -> Case:
    """The case of ``draft`` on a random (or the given) mesh with random given attributes."""
    mesh = mesh if mesh is not None else draw_mesh(rng)
    metas = [_meta(s, d) for s, d in zip(draft.shapes, draft.domains, strict=True)]
    op_rule = get_rule(draft.op)
    # the op's attributes beyond its rule's (nonzero's size) reach shape inference and the kernel
    attrs = {a.name: draft.attrs.get(a.name, a.default) for a in (*op_rule.attrs,
                                                                  *op_rule.op_attrs)}
    out_metas = infer_meta(draft.op, metas, attrs)
    rule = get_rule(name)
    rev_attrs = rule.reverse_attrs
    given = _split((*(_given(rng, mesh, m) for m in metas), *(_given(rng, mesh, m)
                                                              for m in out_metas)),
                   draft.split, mesh, rng)
    return Case(
        rule=name, direction=direction, op=draft.op, mesh=mesh,
        inputs=given[:len(metas)], outputs=given[len(metas):],
        attrs=attrs, domains=draft.domains, generic=generic,
        reverse_attr_names=tuple(a.name for a in rev_attrs) if rev_attrs is not None else (),
    )


def draw_case(name: str, direction: Direction, rng: Rng) -> Case:
    """A random valid case for rule ``name`` (shape inference accepts it; the rule may refuse)."""
    if is_gradient_rule(name):
        return _grad_case(name, direction, rng)
    rule = get_rule(name)
    last: Exception | None = None
    for _ in range(50):
        draft, generic = _draft_for(rule, name, rng)
        try:
            return draft_case(name, direction, draft, rng, generic=generic)
        except SpmdError as e:  # a draft shape inference rejects: draw again
            last = e
    raise NoCaseError(f"{name}: no valid case in 50 draws (last: {last})")


def case_rng(seed: int, name: str, direction: Direction, index: int) -> Rng:
    """The generator of one case: the same case whatever else is verified."""
    key = zlib.crc32(f"{name}/{direction}".encode())
    return np.random.default_rng([seed, key, index])
