"""The ONNX importer's walk: sources, nodes in order, the shape cross-check, outputs.

Values are either graph tensors or constants known at import time (integer initializers, Constant
nodes read as shapes): a converter asks ``Ctx.tensor(i)`` for a tensor (a constant becomes a named
parameter source the first time) or ``Ctx.static(i)`` for a constant's value.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from spmdrules.core.errors import SpmdError
from spmdrules.core.progress import progress
from spmdrules.graph.graph import Graph
from spmdrules.graph.nodes import Tensor
from spmdrules.importers import (  # noqa: F401  (each registers its converters)
    converters,
    onnx_index,
    onnx_math,
    onnx_resize,
    onnx_windows,
)
from spmdrules.importers.errors import (
    ControlFlowError,
    DynamicShapeError,
    ImporterError,
    UnmappedOpError,
)
from spmdrules.importers.onnx_fold import fold, foldable
from spmdrules.importers.onnx_ops import OPS, Ctx
from spmdrules.importers.onnx_read import DEFAULT_DOMAINS, node_label
from spmdrules.importers.onnx_values import Empty, Static, array, check_dims, graph_dtype, safe_name
from spmdrules.importers.torch import Imported
from spmdrules.importers.unmapped import Blocked, UnmappedReport, Untried

CONTROL_FLOW = ("If", "Loop", "Scan", "SequenceMap")


def check_graph(model: Any) -> None:
    """Refuse control flow and subgraphs before anything is mapped."""
    for node in model.graph.node:
        if node.op_type in CONTROL_FLOW or any(a.type in (5, 10) for a in node.attribute):
            raise ControlFlowError(
                f"node {node_label(node)!r}: {node.op_type} is control flow (it holds "
                "subgraphs); spmdrules plans straight-line programs. Export the model with the "
                "branch fixed (or the loop unrolled) instead")


def static_shape(value_info: Any, name: str, override: Sequence[int] | None) -> list[int]:
    """An input's shape: its static dims, or the override; symbolic dims are refused."""
    dims = value_info.type.tensor_type.shape.dim
    declared = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in dims]
    if override is not None:
        shape = [int(d) for d in override]
        if len(shape) != len(declared):
            raise ImporterError(f"input {name!r}: input_shapes gives rank {len(shape)} "
                                f"{shape} but the model declares rank {len(declared)} {declared}")
        return check_dims(shape, f"input {name!r}: input_shapes")
    if not value_info.type.tensor_type.HasField("shape") or not all(
            isinstance(d, int) for d in declared):
        raise DynamicShapeError(
            f"input {name!r}: shape {declared} is not static; give it with "
            f"input_shapes={{{name!r}: [...]}}")
    return check_dims([int(d) for d in declared], f"input {name!r}: shape",
                      f"give another with input_shapes={{{name!r}: [...]}}")


class Importer:
    def __init__(self, onnx: Any, model: Any, name: str, input_shapes: dict[str, Sequence[int]],
                 *, follow_batch: bool, spatial_sharding: bool) -> None:
        self.onnx = onnx
        self.model = model
        self.graph = Graph(safe_name(name))
        self.imported = Imported(self.graph)
        self.input_shapes = input_shapes
        self.follow_batch = follow_batch
        self.spatial_sharding = spatial_sharding
        self.env: dict[str, Tensor | Static | Empty | Blocked] = {}
        self.report = UnmappedReport(self.graph.name)
        #: the batch of the model as declared, and as widened (for follow_batch)
        self.batch: tuple[int, int] | None = None
        #: whether a Reshape's target followed the widened batch (follow_batch)
        self.followed = False

    def run(self) -> Imported:
        model = self.model
        converters.load()
        check_graph(model)
        self.opset = max((o.version for o in model.opset_import if o.domain in DEFAULT_DOMAINS),
                         default=1)
        inits = {i.name for i in model.graph.initializer}
        real = [i.name for i in model.graph.input if i.name not in inits]
        unknown = set(self.input_shapes) - set(real)
        if unknown:
            raise ImporterError(f"input_shapes names {sorted(unknown)}, which are not inputs of "
                                f"the model; its inputs are {real}")
        expected = self._onnx_shapes()
        with self.graph:
            self._sources(inits)
            for node in progress(model.graph.node, "import", total=len(model.graph.node)):
                self._node(node, expected)
            if self.report:
                raise self.report.error()
            for vo in model.graph.output:
                got = self.env.get(vo.name)
                if got is None or isinstance(got, Blocked):  # (no Blocked: the report raised)
                    raise ImporterError(f"output {vo.name!r} is produced by no node")
                t = got if isinstance(got, Tensor) else got.tensor(self)
                self.imported.outputs.append(t.name)
        self.graph.validate()
        return self.imported

    def _sources(self, inits: set[str]) -> None:
        """The initializers (static values, parameters once an op reads them) and the inputs."""
        onnx, model = self.onnx, self.model
        for init in model.graph.initializer:
            value = array(onnx, init, f"initializer {init.name!r}")
            self.env[init.name] = Static(init.name, value, param=True)
        for vi in model.graph.input:
            if vi.name in inits:
                continue
            shape = static_shape(vi, vi.name, self.input_shapes.get(vi.name))
            declared = [d.dim_value for d in vi.type.tensor_type.shape.dim]
            if self.batch is None and shape and declared and declared[0] > 0:
                self.batch = (declared[0], shape[0])
            t = self.graph.input(safe_name(vi.name), shape, graph_dtype(
                onnx, vi.type.tensor_type.elem_type, f"input {vi.name!r}"))
            self.imported.inputs.append(t.name)
            self.env[vi.name] = t

    def _node(self, node: Any, expected: Mapping[str, tuple[int, ...]]) -> None:
        where = node_label(node)
        op = node.op_type if node.domain in DEFAULT_DOMAINS else f"{node.domain}.{node.op_type}"
        try:
            outs = self._convert(node, where, op)
        except Untried:
            self.report.untried.append(where)
            self._block(node)
            return
        except UnmappedOpError as e:
            self.report.add(e)
            self._block(node)
            return
        except ImporterError:
            raise
        except SpmdError as e:
            hint = ""
            if node.op_type == "Reshape" and self.batch and self.batch[0] != self.batch[1]:
                hint = (" (the batch was widened: load(..., follow_batch=True) lets a Reshape "
                        "target's leading batch follow it)")
            raise ImporterError(f"node {where!r} ({node.op_type}): the model cannot take these "
                                f"shapes: {e}{hint}") from e
        except Exception as e:
            self.report.add(UnmappedOpError(where, op, None,
                                            f"mapping failed: {type(e).__name__}: {e}",
                                            base=node.op_type))
            self._block(node)
            return
        self._bind(node, where, outs, expected)

    def _convert(self, node: Any, where: str, op: str) -> Sequence[Any]:
        """The node's values: folded where its inputs are static, else its converter's."""
        default = node.domain in DEFAULT_DOMAINS
        conv = OPS.get(op)
        outs: Sequence[Any] | None = fold(self, node, where, conv is not None) if (
            default and foldable(self, node)) else None
        if outs is not None:
            return outs
        if conv is None:
            raise UnmappedOpError(where, op, None, "" if default else (
                f"no converter is registered for domain {node.domain!r}"), base=node.op_type)
        return conv(Ctx(self, node, where))

    def _bind(self, node: Any, where: str, outs: Sequence[Any],
              expected: Mapping[str, tuple[int, ...]]) -> None:
        """Name the node's values, each tensor's shape cross-checked against ONNX's inference."""
        for name, v in zip(node.output, outs, strict=False):
            if not name:
                continue
            if isinstance(v, Tensor):
                check_dims(v.shape, f"node {where!r} ({node.op_type}): output {name!r}")
            if isinstance(v, Tensor) and name in expected and not self._agrees(
                    tuple(v.shape), expected[name]):
                raise ImporterError(
                    f"node {where!r} ({node.op_type}): output {name!r} has shape "
                    f"{list(v.shape)} here but onnx.shape_inference gives "
                    f"{list(expected[name])}; this is a bug of the mapping: please report it")
            self.env[name] = v

    def _block(self, node: Any) -> None:
        """An unmapped node's outputs: the nodes that read them are looked up, not tried."""
        for name in node.output:
            if name:
                self.env[name] = Blocked(node_label(node))

    def _agrees(self, ours: tuple[int, ...], theirs: tuple[int, ...]) -> bool:
        """Our shape is ONNX's, but for the batch once a Reshape let it follow a widening."""
        if ours == theirs:
            return True
        return (self.followed and self.batch is not None and len(ours) == len(theirs) > 0
                and ours[1:] == theirs[1:] and (ours[0], theirs[0]) == self.batch[::-1])

    def _onnx_shapes(self) -> dict[str, tuple[int, ...]]:
        """onnx.shape_inference on the model with the overridden input shapes: the cross-check.

        Where ONNX's inference fails or gives no static shape, our own inference stands alone."""
        onnx = self.onnx
        m = onnx.ModelProto()
        m.CopyFrom(self.model)
        for vi in m.graph.input:
            if vi.name in self.input_shapes:
                dims = vi.type.tensor_type.shape.dim
                for d, v in zip(dims, self.input_shapes[vi.name], strict=False):
                    d.Clear()
                    d.dim_value = int(v)
        del m.graph.value_info[:]
        if self.input_shapes:  # the declared output shapes are those of the declared inputs
            for vo in m.graph.output:
                vo.type.tensor_type.ClearField("shape")
        try:
            m = onnx.shape_inference.infer_shapes(m, strict_mode=False)
        except Exception:
            return {}
        out: dict[str, tuple[int, ...]] = {}
        for vi in [*m.graph.value_info, *m.graph.output]:
            tt = vi.type.tensor_type
            if tt.HasField("shape") and all(d.HasField("dim_value") for d in tt.shape.dim):
                out[vi.name] = tuple(int(d.dim_value) for d in tt.shape.dim)
        return out


__all__ = ["CONTROL_FLOW", "Importer", "check_graph", "static_shape"]
