"""A plan as a JSON file: ``spmdrules import MODEL --plan PLAN.json`` (``docs/plan.schema.json``).

The file is plain data validated by pydantic models at the boundary (strict types, unknown keys
refused), and becomes the mesh and the ``{pattern: style}`` dict that ``plan.apply`` takes::

    {"format": "spmdrules.plan/1",
     "mesh": {"shape": [2, 2], "process_ids": [0, 1, 2, 3], "dim_names": ["dp", "mp"]},
     "plan": {"input_ids": {"style": "DataParallel", "dim": "dp"},
              "*.q_proj": {"style": "ColwiseParallel"},
              "*.qkv": {"style": "ColwiseParallel", "chunks": [2, 1, 1]},
              "*.o_proj": {"style": "RowwiseParallel"},
              "x": {"style": "Spec", "dims": ["dp", null, "?"]}}}

Each style takes its options by their Python names (``spmdrules.plan.styles``). A ``Spec`` gives
a mesh-dim name or index per tensor dim (a list of them for several mesh dims, ``null`` for
replicated, ``"?"`` for open), with ``partial`` ({mesh dim: reduce type}) and ``closed``. A file
that is not JSON or breaks the schema is a ``PlanFileError`` naming the field; a pattern that
matches nothing, a style that does not fit, or a mesh dim the mesh lacks is the error
``plan.apply`` raises for it. Nothing in the file is evaluated.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError

from spmdrules.core.errors import SpmdError
from spmdrules.core.mesh import ProcessMesh
from spmdrules.graph.annotation import OPEN
from spmdrules.graph.exchange import MeshModel, Name
from spmdrules.plan import styles as st
from spmdrules.plan.errors import PlanError
from spmdrules.plan.styles import Style

FORMAT: Final = "spmdrules.plan/1"
#: the largest plan file read (a plan is a few kB)
MAX_BYTES: Final = 16 * 1024 * 1024

MeshDim = Name | Annotated[int, Field(strict=True, ge=0, le=64)]
ReduceType = Literal["sum", "avg", "max", "min", "product", "any", "all"]
Size = Annotated[int, Field(strict=True, ge=1)]


class PlanFileError(PlanError):
    """A plan file that is not valid JSON or does not match ``docs/plan.schema.json``."""


class _Style(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class ColwiseModel(_Style):
    style: Literal["ColwiseParallel"]
    dim: MeshDim = "mp"
    chunks: Size | list[Size] | None = Field(
        None, description="a fused projection's chunks: their number or their sizes")


class RowwiseModel(_Style):
    style: Literal["RowwiseParallel"]
    dim: MeshDim = "mp"


class VocabModel(_Style):
    style: Literal["VocabParallel"]
    dim: MeshDim = "mp"


class SequenceModel(_Style):
    style: Literal["SequenceParallel"]
    dim: MeshDim = "mp"
    sequence_dim: StrictInt = 1


class DataModel(_Style):
    style: Literal["DataParallel"]
    dim: MeshDim = "dp"
    batch_dim: StrictInt = 0


class SpatialModel(_Style):
    style: Literal["Spatial"]
    dims: dict[Name, MeshDim] = Field(description="a layout letter -> the mesh dim splitting it")
    layout: Name = "NCHW"


class SpecModel(_Style):
    style: Literal["Spec"]
    dims: list[MeshDim | list[MeshDim] | None] = Field(
        description='per tensor dim: mesh dim(s) splitting it, null replicated, "?" open')
    partial: dict[Name, ReduceType] | None = None
    closed: bool = True


StyleModel = Annotated[ColwiseModel | RowwiseModel | VocabModel | SequenceModel | DataModel
                       | SpatialModel | SpecModel, Field(discriminator="style")]


class PlanFile(BaseModel):
    """The plan file: the mesh and ``{pattern: style}``."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True,
                              title="spmdrules plan file (a mesh and {pattern: style})")
    format: Literal["spmdrules.plan/1"]
    mesh: MeshModel
    plan: dict[Name, StyleModel]


def _style(m: Any) -> Style:
    if isinstance(m, ColwiseModel):
        return st.ColwiseParallel(m.dim, tuple(m.chunks) if isinstance(m.chunks, list) else m.chunks)
    if isinstance(m, RowwiseModel):
        return st.RowwiseParallel(m.dim)
    if isinstance(m, VocabModel):
        return st.VocabParallel(m.dim)
    if isinstance(m, SequenceModel):
        return st.SequenceParallel(m.dim, m.sequence_dim)
    if isinstance(m, DataModel):
        return st.DataParallel(m.dim, m.batch_dim)
    if isinstance(m, SpatialModel):
        return st.Spatial(dict(m.dims), m.layout)
    dims = [OPEN if d == "?" else tuple(d) if isinstance(d, list) else d for d in m.dims]
    return st.Spec(tuple(dims), m.partial, m.closed)


def parse(text: str | bytes, where: str = "plan") -> tuple[ProcessMesh, dict[str, Style]]:
    """The mesh and the plan of a plan file's text."""
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise PlanFileError(f"{where}: not valid JSON ({e})") from None
    if isinstance(doc, dict) and doc.get("format") != FORMAT:
        raise PlanFileError(f"{where}: format is {doc.get('format')!r}; a plan file says "
                            f"\"format\": {FORMAT!r}")
    try:
        model = PlanFile.model_validate(doc)
    except ValidationError as e:
        first = e.errors()[0]
        loc = "".join(f"[{p!r}]" if isinstance(p, int) else f".{p}" for p in first["loc"])
        raise PlanFileError(f"{where}: {loc.lstrip('.') or 'the file'}: {first['msg']} "
                            f"({e.error_count()} error(s); see docs/plan.schema.json)") from None
    m = model.mesh
    try:
        mesh = ProcessMesh.from_shape(m.shape, m.process_ids, m.dim_names)
    except SpmdError as e:
        raise PlanFileError(f"{where}: mesh: {e}") from None
    return mesh, {pattern: _style(s) for pattern, s in model.plan.items()}


def load(path: str | Path) -> tuple[ProcessMesh, dict[str, Style]]:
    """The mesh and the plan of the plan file ``path``."""
    p = Path(path)
    try:
        if p.stat().st_size > MAX_BYTES:
            raise PlanFileError(f"{p}: more than the {MAX_BYTES} bytes a plan file may have")
        text = p.read_bytes()
    except OSError as e:
        raise PlanFileError(f"{p}: cannot read the plan file: {e.strerror or e}") from None
    return parse(text, str(p))


def json_schema() -> dict[str, Any]:
    """The published JSON Schema of the plan file (``docs/plan.schema.json``)."""
    schema = PlanFile.model_json_schema()
    schema["$id"] = "https://spmdrules.invalid/plan.schema.json"
    return schema


__all__ = ["FORMAT", "PlanFile", "PlanFileError", "json_schema", "load", "parse"]
