"""Memo tables that every completion run in the process shares: they make a repeated layer cost
almost nothing, within a run and across runs."""

from __future__ import annotations

from typing import Final, NamedTuple

from spmdrules.core.attr import DistAttr
from spmdrules.core.spec import SpmdInfo, TensorSpec
from spmdrules.graph.annotation import Annotation
from spmdrules.graph.opschema import OpSchema

# TensorSpecs interned by (shape, attr): the layers of a model repeat a few hundred of them, so a
# run allocates almost none, and the rules' memo compares its keys by identity.
SPECS: dict[tuple[tuple[int, ...], DistAttr], TensorSpec] = {}
SPECS_MAX: Final = 1 << 16


def cached_spec(shape: tuple[int, ...], attr: DistAttr) -> TensorSpec:
    key = (shape, attr)
    s = SPECS.get(key)
    if s is None or s.attr.mesh is not attr.mesh:  # keep the caller's mesh object (``is`` tests)
        if len(SPECS) >= SPECS_MAX:
            SPECS.clear()
        s = SPECS[key] = TensorSpec._make(shape, attr)
    return s


class Flattened(NamedTuple):
    """A rule's answer flattened for an op of ``schema`` with ``n_in`` operand slots."""

    info: SpmdInfo  # held, so that its id stays unique
    schema: OpSchema
    n_in: int
    ins: tuple[DistAttr, ...]
    outs: tuple[DistAttr, ...]


# Flattened rule answers by the answer's identity: the rules' memo hands back the same SpmdInfo
# for every layer, so each is flattened once.
FLAT_CACHE: dict[int, Flattened] = {}
FLAT_CACHE_MAX: Final = 1 << 14


# One object per distinct annotation, so that the layers of a stack share theirs; by the identity
# of each annotation seen (held, so its id stays unique), to skip comparing it on the next run.
CANON: dict[int, tuple[Annotation, Annotation]] = {}
CANON_BY_VALUE: dict[Annotation, Annotation] = {}
CANON_MAX: Final = 1 << 16


def canonical_annotation(ann: Annotation) -> Annotation:
    hit = CANON.get(id(ann))
    if hit is not None and hit[0] is ann:
        return hit[1]
    if len(CANON) >= CANON_MAX:
        CANON.clear()
        CANON_BY_VALUE.clear()
    canon = CANON_BY_VALUE.setdefault(ann, ann)
    CANON[id(ann)] = (ann, canon)
    return canon
