"""JSON exchange for compilers: the graph, its annotations and the completed attributes.

The file is plain data validated by pydantic models (strict types, unknown keys refused); its
JSON Schema is published as ``docs/model.schema.json``. Loading reads JSON and builds the graph
through the ordinary, validating ``Graph`` API, so an untrusted file can only fail with a precise
``ExchangeError`` (or the ``GraphError`` the builder raises, which names the node); nothing in it
is ever imported, evaluated or executed.

Layout (version 1)::

    {"format": "spmdrules.model/1", "name": "mlp",
     "meshes": {"mesh0": {"shape": [2, 4], "process_ids": [0, ..., 7], "dim_names": ["dp", "mp"]}},
     "tensors": [{"name": "x", "shape": [8, 16], "dtype": "float32", "role": "input",
                  "annotation": {"mesh": "mesh0", "dims": [[0], null], "closed": [true, false],
                                 "partial": {}, "priority": 0},
                  "attr": {"mesh": "mesh0", "dims": [[0], [1]], "partial": {}}}],
     "ops": [{"name": "mm", "type": "matmul", "operands": ["x", "w"], "results": ["y"],
              "attrs": {"trans_x": false, "trans_y": false}}]}

``dims`` lists the mesh dims that split each tensor dim (major first; ``[]`` replicated; in an
annotation ``null`` is an open dim with no preference); ``partial`` maps a mesh dim (as a string)
to its reduce type. An operand is a tensor name, a list of names (a list parameter) or null (an
absent optional). A tensor a chunk-aware plan holds interleaved (``Tensor.storage``: a fused
weight, its bias and the values computed from them before the cuts) has
``"storage": {"dim": 0, "sizes": [256, 128, 128], "ways": 2}``: the executors convert it from
and to the user's order.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Final, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictStr,
    ValidationError,
)
from pydantic.dataclasses import dataclass

from spmdrules.core import output
from spmdrules.core.attr import DistAttr
from spmdrules.core.bulk import release_scratch, without_gc
from spmdrules.core.errors import SpmdError
from spmdrules.core.mesh import ProcessMesh
from spmdrules.core.spec import flat_slots
from spmdrules.graph.annotate import shard
from spmdrules.graph.annotation import OPEN
from spmdrules.graph.binding import check_declared, check_dtype
from spmdrules.graph.graph import Graph
from spmdrules.graph.nodes import Tensor
from spmdrules.graph.storage import Interleaved

V = TypeVar("V")

FORMAT: Final = "spmdrules.model/1"
#: the largest file ``load`` reads (a 960-layer GPT is about 15 MB)
MAX_BYTES: Final = 256 * 1024 * 1024
#: the most processes one mesh may hold, and the largest tensor dim (an int64 index)
MAX_PROCESSES: Final = 1 << 20
MAX_DIM: Final = (1 << 62) - 1

#: a name: no control characters, which would reach the terminal raw
Name = Annotated[str, Field(strict=True, min_length=1, max_length=512,
                            pattern=r"^[^\x00-\x1f\x7f-\x9f]+$")]
Dims = list[Annotated[int, Field(strict=True, ge=0, le=64)]]
ReduceType = Literal["sum", "avg", "max", "min", "product", "any", "all"]
Int64 = Annotated[int, Field(strict=True, ge=-(1 << 63), le=(1 << 63) - 1)]
AttrValue = (StrictBool | Int64 | StrictFloat | StrictStr | list[Int64] | list[StrictFloat]
             | list[StrictBool] | None)


class ExchangeError(SpmdError, ValueError):
    """A model file that is not valid JSON, does not match the schema, or does not make a graph."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


#: the per-tensor and per-op records: slotted dataclasses, a quarter of a model's memory (200k
#: ops: 490 MB as models). A strict dataclass takes only ready-made instances, not the dicts that
#: the diagnosing path validates, so these are strict by their fields' types (``Strict*``).
_RECORD: Final = ConfigDict(extra="forbid")


class MeshModel(_Model):
    shape: list[Annotated[int, Field(ge=1, le=MAX_PROCESSES)]]
    process_ids: list[Annotated[int, Field(ge=0, lt=MAX_PROCESSES)]]
    dim_names: list[Name]


@dataclass(frozen=True, slots=True, config=_RECORD)
class AnnotationModel:
    mesh: Name
    dims: Annotated[list[Dims | None], Field(description="mesh dims per tensor dim; null = open")]
    closed: list[StrictBool]
    partial: dict[str, ReduceType] = Field(default_factory=dict)
    priority: Annotated[int, Field(strict=True)] = 0


@dataclass(frozen=True, slots=True, config=_RECORD)
class AttrModel:
    mesh: Name
    dims: list[Dims]
    partial: dict[str, ReduceType] = Field(default_factory=dict)
    #: mesh dim (as a string) -> the tensor dim that masks its pending sum (DistAttr.masks)
    masks: dict[str, Annotated[int, Field(strict=True, ge=0, le=64)]] = Field(
        default_factory=dict)


@dataclass(frozen=True, slots=True, config=_RECORD)
class StorageModel:
    """A tensor held interleaved by chunks (``spmdrules.graph.storage.Interleaved``)."""

    dim: Annotated[int, Field(strict=True, ge=0, le=64)]
    sizes: list[Annotated[int, Field(strict=True, ge=1, le=MAX_DIM)]]
    ways: Annotated[int, Field(strict=True, ge=1, le=MAX_PROCESSES)]


@dataclass(frozen=True, slots=True, config=_RECORD)
class TensorModel:
    name: Name
    shape: list[Annotated[int, Field(strict=True, ge=0, le=MAX_DIM)]]
    dtype: Name
    role: Literal["input", "param", "value"]
    annotation: AnnotationModel | None = None
    attr: AttrModel | None = None
    storage: StorageModel | None = None


@dataclass(frozen=True, slots=True, config=_RECORD)
class OpModel:
    name: Name
    type: Name
    operands: list[Name | list[Name] | None]
    results: list[Name]
    attrs: dict[str, AttrValue] = Field(default_factory=dict)


class ModelFile(BaseModel):
    """A whole model: meshes, tensors (with annotations and attributes) and ops."""

    # strict by its fields' types: a strict model takes only ready-made record instances, not
    # the dicts that the diagnosing path validates
    model_config = ConfigDict(extra="forbid", frozen=True)

    format: Literal["spmdrules.model/1"] = FORMAT
    name: Name
    meshes: dict[Name, MeshModel]
    tensors: list[TensorModel]
    ops: list[OpModel]


# ---- dump ------------------------------------------------------------------------------------
def _mesh_id(meshes: dict[ProcessMesh, str], mesh: ProcessMesh) -> str:
    if mesh not in meshes:
        meshes[mesh] = f"mesh{len(meshes)}"
    return meshes[mesh]


def _partial(items: tuple[tuple[int, str], ...]) -> dict[str, Any]:
    return {str(m): rt for m, rt in items}


def _jsonable(v: Any) -> AttrValue:
    if isinstance(v, tuple | list):
        return [_jsonable(x) for x in v]  # type: ignore[return-value]
    return v  # type: ignore[no-any-return]


def to_model(graph: Graph) -> ModelFile:
    """The graph as a validated ``ModelFile`` (with the current ``tensor.attr`` values)."""
    meshes: dict[ProcessMesh, str] = {}
    tensors = []
    for t in graph.tensors:
        ann = None
        if t.annotation is not None:
            a = t.annotation
            ann = AnnotationModel(
                mesh=_mesh_id(meshes, a.mesh),
                dims=[None if d is None else list(d) for d in a.dims],
                closed=list(a.closed), partial=_partial(a.partial), priority=a.priority,
            )
        attr = None
        if t.attr is not None:
            attr = AttrModel(mesh=_mesh_id(meshes, t.attr.mesh),
                             dims=[list(d) for d in t.attr.multi_dims_mapping],
                             partial=_partial(t.attr.partial_items),
                             masks={str(m): d for m, d in t.attr.mask_items})
        lay = t.storage
        stored = None if lay is None else StorageModel(dim=lay.dim, sizes=list(lay.sizes),
                                                       ways=lay.ways)
        tensors.append(TensorModel(name=t.name, shape=list(t.shape), dtype=t.dtype, role=t.role,
                                   annotation=ann, attr=attr, storage=stored))

    def operand(v: Tensor | tuple[Tensor, ...] | None) -> str | list[str] | None:
        if v is None or isinstance(v, Tensor):
            return None if v is None else v.name
        return [x.name for x in v]

    op_models = [
        OpModel(name=op.name, type=op.type, operands=[operand(v) for v in op.operands],
                results=[t.name for t in op.outputs],
                attrs={k: _jsonable(v) for k, v in op.attr_dict.items()})
        for op in graph.ops
    ]
    mesh_models = {
        mid: MeshModel(shape=list(m.shape), process_ids=list(m.process_ids),
                       dim_names=list(m.dim_names))
        for m, mid in meshes.items()
    }
    return ModelFile(name=graph.name, meshes=mesh_models, tensors=tensors, ops=op_models)


def dumps(graph: Graph, *, indent: int | None = 1) -> str:
    """The graph as JSON text."""
    return to_model(graph).model_dump_json(indent=indent)


def dump(graph: Graph, path: str | Path) -> None:
    """Write the graph to ``path`` atomically, over a regular file (keeping its mode) or a new
    name; any other target (a link, a folder, a FIFO, a device) is an ``OutputPathError``
    (``spmdrules.core.output``)."""
    output.write_text(path, dumps(graph))


# ---- load ------------------------------------------------------------------------------------
#: the records (dataclasses) word these as a call's arguments; say them as for the other objects
_RECORD_MESSAGES: Final = {
    "unexpected_keyword_argument": "Extra inputs are not permitted",
    "missing_argument": "Field required",
}


def _validation_message(source: str, e: ValidationError) -> str:
    parts = []
    for err in e.errors()[:10]:
        loc = "".join(f"[{x}]" if isinstance(x, int) else f".{x}" for x in err["loc"])
        msg = _RECORD_MESSAGES.get(err["type"], err["msg"])
        parts.append(f"{loc.lstrip('.') or '(top)'}: {msg}")
    more = f" (and {e.error_count() - 10} more)" if e.error_count() > 10 else ""
    return f"{source}: does not match the {FORMAT} schema: " + "; ".join(parts) + more


def parse(text: str | bytes, source: str = "<model>") -> ModelFile:
    """Validate JSON text against the schema; an ``ExchangeError`` names the first bad fields."""
    if len(text) > MAX_BYTES:
        raise ExchangeError(f"{source}: {len(text)} bytes is more than the {MAX_BYTES} allowed")
    try:  # the common case in one pass, JSON parsed by pydantic-core (no dict of the whole file)
        return without_gc(lambda: ModelFile.model_validate_json(text))
    except ValidationError:
        pass  # diagnose it step by step below, for a message that names the problem
    finally:
        release_scratch()
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ExchangeError(f"{source}: not valid JSON: {e}") from None
    except RecursionError:
        raise ExchangeError(f"{source}: JSON nested too deep; a model file nests at most 6 "
                            "levels") from None
    except ValueError as e:  # an integer of over 4,300 digits
        raise ExchangeError(f"{source}: not a model file: {e}") from None
    if not isinstance(data, dict):
        raise ExchangeError(f"{source}: the top level must be a JSON object, got "
                            f"{type(data).__name__}")
    if data.get("format") != FORMAT:
        raise ExchangeError(f"{source}: format is {data.get('format')!r}; this version reads "
                            f"{FORMAT!r}")
    try:
        return ModelFile.model_validate(data)
    except ValidationError as e:
        raise ExchangeError(_validation_message(source, e)) from None


def from_model(m: ModelFile, source: str = "<model>") -> Graph:
    """Build (and validate) the graph a ``ModelFile`` describes."""
    return without_gc(lambda: _build(m, source))


def _meshes(m: ModelFile, source: str) -> dict[str, ProcessMesh]:
    """The model file's meshes by id, each checked to hold as many processes as its shape."""
    meshes: dict[str, ProcessMesh] = {}
    for mid, mm in m.meshes.items():
        n = math.prod(mm.shape)
        if n != len(mm.process_ids):
            raise ExchangeError(f"{source}: meshes.{mid}: shape {mm.shape} holds {n} "
                                f"processes but {len(mm.process_ids)} ids are given")
        try:
            meshes[mid] = ProcessMesh.from_shape(mm.shape, mm.process_ids, mm.dim_names)
        except SpmdError as e:
            raise ExchangeError(f"{source}: meshes.{mid}: {e}") from None
    return meshes


def _build(m: ModelFile, source: str) -> Graph:
    meshes = _meshes(m, source)

    def mesh(where: str, mid: str) -> ProcessMesh:
        if mid not in meshes:
            raise ExchangeError(f"{source}: {where}: mesh {mid!r} is not defined in meshes "
                                f"({sorted(meshes)})")
        return meshes[mid]

    def by_mesh_dim(where: str, p: Mapping[str, V]) -> dict[int, V]:
        out = {}
        for k, v in p.items():
            if not (k.isascii() and k.isdigit()):  # not "¹" nor "١"
                raise ExchangeError(f"{source}: {where}: key {k!r} is not a mesh dim "
                                    "index; write it as a decimal string such as \"1\"")
            out[int(k)] = v
        return out

    def partial(where: str, p: Mapping[str, str]) -> dict[int, str]:
        return by_mesh_dim(f"{where}.partial", p)

    g = Graph(m.name)
    try:
        _add_tensors_and_ops(g, m)
        g.validate()
        for i, tm in enumerate(m.tensors):
            if tm.annotation is None and tm.attr is None and tm.storage is None:
                continue
            where = f"tensors[{i}] ({tm.name!r})"
            tensor = g.tensor(tm.name)
            if tm.storage is not None:
                tensor.storage = _storage(where, tensor, tm.storage)
            if tm.annotation is not None:
                a = tm.annotation
                if len(a.closed) != len(a.dims):
                    raise ExchangeError(f"{source}: {where}.annotation: {len(a.dims)} dims but "
                                        f"{len(a.closed)} closed flags; give one per tensor dim")
                spec = [OPEN if d is None else tuple(d) for d in a.dims]
                shard(tensor, mesh(where, a.mesh), spec, partial=partial(where, a.partial),
                      priority=a.priority, closed=[k for k, c in enumerate(a.closed) if c])
            if tm.attr is not None:
                at = tm.attr
                attr = DistAttr(mesh(where, at.mesh), multi_dims_mapping=at.dims,
                                partial=partial(where, at.partial),
                                masks=by_mesh_dim(f"{where}.masks", at.masks))
                if attr.ndim != tensor.ndim:
                    raise ExchangeError(f"{source}: {where}.attr: {attr.ndim} dims for a tensor "
                                        f"of rank {tensor.ndim}")
                tensor.attr = attr
    except ExchangeError:
        raise
    except SpmdError as e:
        # the builder's typed error (naming the node) stays available as the cause
        raise ExchangeError(f"{source}: {e}") from e
    return g


def _storage(where: str, t: Tensor, m: StorageModel) -> Interleaved:
    lay = Interleaved(m.dim, tuple(m.sizes), m.ways)
    if m.dim >= t.ndim or t.shape[m.dim] != lay.extent:
        raise ExchangeError(f"{where}.storage: {lay} does not fit the {t.role} {list(t.shape)}; "
                            "a tensor is stored interleaved along a dim its chunks fill")
    return lay


def _add_tensors_and_ops(g: Graph, m: ModelFile) -> None:
    """The file's tensors and ops, in the file's order. A value tensor is declared only where an
    op reads it before the op that produces it (a file in any order loads); the others come from
    their producers, checked against the file's shape and dtype: declaring 200k tensors first,
    then adopting each, was a third of a long chain's load."""
    listed = {t.name: t for t in m.tensors}
    if len(listed) != len(m.tensors):  # a name given twice: declaring all says which
        for t in m.tensors:
            _DECLARE[t.role](g, t.name, t.shape, t.dtype)
    for t in m.tensors:
        if t.role != "value":
            _DECLARE[t.role](g, t.name, t.shape, t.dtype)
    known = g.tensors_by_name
    for op in m.ops:
        for v in op.operands:
            if type(v) is str:
                if v not in known and v in listed:
                    g.declare(v, listed[v].shape, listed[v].dtype)
            elif v is not None:
                for n in v:
                    if n not in known and n in listed:
                        g.declare(n, listed[n].shape, listed[n].dtype)
        # the record's lists and dict as they are: add_op reads them and keeps none of them
        made = g.add_op(op.type, op.operands, op.attrs, name=op.name, results=op.results)
        for r in flat_slots(made.results, Tensor):
            d = listed.get(r.name)
            if d is not None:
                if d.dtype != r.dtype:
                    check_dtype(r.name, d.dtype)  # a bad dtype fails as when declared first
                check_declared(op.name, r.name, d.shape, d.dtype, r.shape, r.dtype)
    for t in m.tensors:  # listed, never produced: validate() names it
        if t.name not in known:
            g.declare(t.name, t.shape, t.dtype)


_DECLARE: Final = {"input": Graph.input, "param": Graph.param, "value": Graph.declare}


def loads(text: str | bytes, source: str = "<model>") -> Graph:
    """Parse, validate and build a graph from JSON text."""
    return from_model(parse(text, source), source)


def load(path: str | Path) -> Graph:
    p = Path(path)
    try:
        size = p.stat().st_size
        if size > MAX_BYTES:
            raise ExchangeError(f"{p}: {size} bytes is more than the {MAX_BYTES} allowed")
        text = p.read_bytes()
    except OSError as e:
        raise ExchangeError(f"{p}: cannot read the model file: {e.strerror or e}") from None
    model = parse(text, str(p))
    del text  # the bytes are not needed while the graph is built
    return from_model(model, str(p))


def json_schema() -> dict[str, Any]:
    """The published JSON Schema of the model file (``docs/model.schema.json``)."""
    schema = ModelFile.model_json_schema()
    schema["$id"] = "https://spmdrules.invalid/model.schema.json"
    schema["title"] = "spmdrules model file (graph, annotations, completed attributes)"
    return schema
