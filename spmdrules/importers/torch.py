"""``load(module, example_args)``: a torch ``nn.Module`` as a Graph, through ``torch.export``.

The module is exported with the example arguments (static shapes), its decompositions run to
core ATen but for the ops of ``KEPT_WHOLE`` (``decompose_program``; ``decompose=False`` keeps
the training IR, whose ``linear``, ``matmul`` and ``softmax`` are mapped too), and every node
becomes registered ops (``spmdrules.importers.aten``, ``aten_sort``, ``aten_upsample`` and
``aten_windows``):

* parameters and buffers are sources named by their dotted module paths
  (``model.layers.0.self_attn.q_proj.weight``); lifted constant tensors are sources named
  ``constant.<name>``; creation ops (``full``, ``arange``, ``scalar_tensor``) are constant ops;
* ops are named ``<module path>.<node>`` (``model.layers.0.mlp.down_proj.mm``), and each user
  output gets an ``assign`` named by its output key (``logits``);
* a buffer the program writes (a training batch norm's running statistics) keeps its value as a
  source, and its new value is an output ``<buffer>.updated`` (``Imported.updates``);
* ``spatial_sharding=True`` sets the conv opt-in on every convolution (as the ONNX importer);
* a sort whose permutation the program undoes row by row (Hugging Face's default experts path)
  is imported as the identity, so the rows keep their order and their split
  (``spmdrules.importers.aten_order``);
* refused with a typed error naming the node: symbolic shapes, control flow (``cond``,
  ``while_loop``, ``map``), writes into an input, parameter or buffer, in-place ops, and any
  op with no mapping (every one at once, ``UnmappedOpsError``, with the rule family that
  serves it).

``export`` gives the graph with the values the module holds (``Imported.feeds``); ``load`` only
the graph. torch is imported when called, so spmdrules imports without the ``torch`` extra.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from spmdrules.core.errors import SpmdError
from spmdrules.core.progress import progress, stage
from spmdrules.graph.graph import Graph
from spmdrules.graph.nodes import Tensor
from spmdrules.importers import converters
from spmdrules.importers.errors import (
    ControlFlowError,
    DynamicShapeError,
    ImporterError,
    InPlaceMutationError,
    MissingExtraError,
    UnmappedOpError,
)
from spmdrules.importers.unmapped import Blocked, UnmappedReport, Untried

Array = NDArray[Any]
TORCH_VERSION = "2.13.0"


def _torch() -> Any:
    try:
        import torch
    except ImportError as e:
        raise MissingExtraError(
            "spmdrules.importers.torch needs torch; install the extra in a clone of spmdrules: "
            f"pip install -e '.[torch]' (torch=={TORCH_VERSION}, the CPU build)") from e
    return torch


@dataclass
class Imported:
    """An imported model: its graph, the values of its sources, and the names of its ends."""

    graph: Graph
    #: parameter, buffer and constant source name -> value
    values: dict[str, Array] = field(default_factory=dict)
    #: the user inputs' tensor names, in the module's argument order
    inputs: list[str] = field(default_factory=list)
    #: the user outputs' tensor names, in order
    outputs: list[str] = field(default_factory=list)
    #: buffer source name -> the tensor of its value after the call (``<buffer>.updated``): the
    #: writes the functional program returns, such as a training batch norm's running statistics
    updates: dict[str, str] = field(default_factory=dict)

    def feeds(self, *args: Any) -> dict[str, Array]:
        """Every source's value: the module's own, and ``args`` for the user inputs."""
        if len(args) != len(self.inputs):
            raise ImporterError(f"feeds: {len(args)} arguments for the {len(self.inputs)} inputs "
                                f"{self.inputs}; give one per input")
        out = dict(self.values)
        for name, v in zip(self.inputs, args, strict=True):
            out[name] = _numpy(v)
        return out


def _numpy(v: Any) -> Array:
    if hasattr(v, "detach"):
        v = v.detach().cpu().numpy()
    return np.asarray(v)


def load(module: Any, example_args: Sequence[Any], example_kwargs: Mapping[str, Any] | None = None,
         *, decompose: bool = True, spatial_sharding: bool = False,
         name: str | None = None) -> Graph:
    """The Graph of ``module`` called on ``example_args`` (see the module docs)."""
    return export(module, example_args, example_kwargs, decompose=decompose,
                  spatial_sharding=spatial_sharding, name=name).graph


def export(module: Any, example_args: Sequence[Any],
           example_kwargs: Mapping[str, Any] | None = None, *, decompose: bool = True,
           spatial_sharding: bool = False, name: str | None = None) -> Imported:
    """Export ``module`` with torch.export and import it, with the values it holds.

    ``spatial_sharding`` sets the conv opt-in (docs/rules.md) on every convolution, so a
    spatially sharded input stays sharded through them, with halos."""
    torch = _torch()
    if not isinstance(module, torch.nn.Module):
        raise ImporterError(f"torch importer: expected a torch.nn.Module, got "
                            f"{type(module).__name__}")
    args = tuple(example_args) if isinstance(example_args, list | tuple) else (example_args,)
    try:
        ep = torch.export.export(module, args, kwargs=dict(example_kwargs or {}))
    except Exception as e:
        raise ImporterError(f"torch.export could not export {type(module).__name__}: "
                            f"{type(e).__name__}: {str(e)[:2000]}") from e
    if decompose:
        ep = decompose_program(ep)
    return from_exported(ep, spatial_sharding=spatial_sharding, name=name or type(module).__name__)


#: ops kept whole by ``decompose_program``: each maps onto our ``matmul`` with its batch dims,
#: where core ATen would view a 4-D attention matmul as ``[batch * heads, s, d]`` for ``bmm`` and
#: a 3-D ``linear`` as ``[batch * seq, hidden]`` for ``mm``; a reshard cannot keep a split of a
#: merged dim on any factor but the outermost, so those views cost a gather of dp- or
#: mp-split activations where the whole op keeps both splits. 1-D and 3-D nearest upsampling
#: too (core ATen keeps the 2-D one): whole, it keeps a spatial split through a halo, where its
#: decomposition is an ``index`` the importer cannot map. ``silu`` stays whole where core ATen
#: writes ``x * sigmoid(x)``: silu(0) = 0, so a masked pending sum (an expert's lookup,
#: spmdrules.engine.masks) stays one through it, where sigmoid (0.5 at 0) would need the sum
#: reduced first.
KEPT_WHOLE: tuple[str, ...] = ("matmul.default", "linear.default", "silu.default",
                               "scaled_dot_product_attention.default",
                               "upsample_nearest1d.vec", "upsample_nearest3d.vec")


def decompose_program(ep: Any) -> Any:
    """``ep`` decomposed to core ATen, except the ops of ``KEPT_WHOLE``."""
    torch = _torch()
    if not isinstance(ep, torch.export.ExportedProgram):
        raise ImporterError(f"decompose_program: expected a torch.export.ExportedProgram, got "
                            f"{type(ep).__name__}; export the module with torch.export.export")
    table = torch.export.default_decompositions()
    for name in KEPT_WHOLE:
        packet, overload = name.split(".")
        del table[getattr(getattr(torch.ops.aten, packet), overload)]
    with stage("decompose", total=len(ep.graph.nodes), unit="node"):
        return ep.run_decompositions(table)


def from_exported(ep: Any, *, spatial_sharding: bool = False,
                  name: str = "exported") -> Imported:
    """Import a ``torch.export.ExportedProgram`` (as ``torch.export.load`` gives a .pt2)."""
    torch = _torch()
    return _Importer(torch, ep, name, spatial_sharding=spatial_sharding).run()


_SAFE = re.compile(r"[^A-Za-z0-9_.\-/:\[\]]")


class _Importer:
    def __init__(self, torch: Any, ep: Any, name: str, *, spatial_sharding: bool) -> None:
        self.torch = torch
        self.spatial_sharding = spatial_sharding
        self.ep = ep
        self.graph = Graph(_SAFE.sub("_", name) or "exported")
        self.env: dict[str, Any] = {}
        self.imported = Imported(self.graph)

    def run(self) -> Imported:
        from spmdrules.importers.aten import ATEN, dtype_name
        from spmdrules.importers.aten_order import unobservable_sorts

        converters.load()
        ep, g = self.ep, self.graph
        sig = ep.graph_signature
        self._check_mutations(sig)
        self._check_control_flow(ep.graph)
        kinds = {s.arg.name: s for s in sig.input_specs}
        state = {**ep.state_dict, **getattr(ep, "constants", {})}
        report = UnmappedReport(g.name)
        rewrites = unobservable_sorts(ep.graph)
        with g:
            for node in progress(ep.graph.nodes, "import", total=len(ep.graph.nodes)):
                if node.op == "placeholder":
                    self._source(node, kinds.get(node.name), state, dtype_name)
                elif node.op == "call_function":
                    self._check_static(node)
                    target = node.target
                    if target is operator.getitem:
                        seq, i = node.args
                        v = self.env[seq.name]
                        v = v if isinstance(v, Blocked) else v[i]
                        self.env[node.name] = v
                        continue
                    tname = getattr(target, "__name__", str(target))
                    if tname.startswith("_assert") or tname in ("sym_constrain_range_for_size",):
                        continue  # a runtime check on metadata export already proved
                    if tname.split(".")[0].endswith("_") and not tname.startswith("_"):
                        raise InPlaceMutationError(
                            f"node {node.name!r}: aten.{tname} writes in place; export the "
                            "functional form (torch.export does, unless the model mutates "
                            "an input)")
                    if node.name in rewrites:
                        self._rewrite(node, rewrites[node.name], report, dtype_name)
                        continue
                    self._call(node, ATEN.get(converters.key(target)), report, dtype_name)
                elif node.op == "output":
                    self._outputs(node, sig)
                else:
                    raise ImporterError(f"node {node.name!r}: {node.op} nodes are not "
                                        "supported; export a flat program")
        if report:
            raise report.error()
        g.validate()
        return self.imported

    def _call(self, node: Any, conv: Any, report: UnmappedReport, dtype_name: Any,
              rewritten: bool = False) -> None:
        """Map one op node; an op that cannot be mapped goes into ``report`` and its results
        become stand-ins of torch's shape and dtype, so the rest of the model is tried too. A
        ``rewritten`` node's arguments that are not imported are bound as ``Blocked``."""
        from spmdrules.importers.aten import Ctx, _Unmapped, tags

        op = f"{getattr(node.target, 'namespace', 'aten')}.{node.target.__name__}"
        try:
            if conv is None:
                raise UnmappedOpError(node.name, op, None)
            bound = self._bind(node, _Unmapped, rewritten)
            out = conv(Ctx(self.graph, self.torch, node, self._op_name(node),
                           spatial_sharding=self.spatial_sharding), bound)
        except Untried:
            report.untried.append(self._op_name(node))
            self.env[node.name] = self._stand_in(node, dtype_name)
            return
        except ImporterError as e:
            if not isinstance(e, UnmappedOpError):
                raise
            report.add(UnmappedOpError(self._op_name(node), e.op, None, e.why, base=e.base,
                                       categories=tags(node), like=self._like(node)))
            self.env[node.name] = self._stand_in(node, dtype_name)
            return
        except Exception as e:
            report.add(UnmappedOpError(self._op_name(node), op, None, f"mapping failed: {e}",
                                       categories=tags(node), like=self._like(node)))
            self.env[node.name] = self._stand_in(node, dtype_name)
            return
        self._check_result(node, out, dtype_name)
        self.env[node.name] = out

    def _rewrite(self, node: Any, rewrite: Any, report: UnmappedReport, dtype_name: Any
                 ) -> None:
        """Import ``node`` by its rewrite (``aten_order``); no rewrite: no reader needs it."""
        if rewrite is None:
            self.env[node.name] = Blocked(node.name)
            return
        self._call(node, lambda c, a: rewrite(c, a, self.env), report, dtype_name,
                   rewritten=True)

    def _like(self, node: Any) -> list[str]:
        """The mapped ATen ops that take the same arguments as ``node``'s op (by name and type:
        ``cumsum`` for ``cumprod``), for the suggestions."""
        from spmdrules.importers.aten import ATEN

        if not hasattr(self, "_by_args"):
            self._by_args: dict[tuple[tuple[str, str], ...], list[str]] = {}
            for k in ATEN:
                name, _, overload = k.partition(".")
                op = getattr(getattr(self.torch.ops.aten, name, None), overload, None)
                if "." not in overload and op is not None:
                    self._by_args.setdefault(_args(op), []).append(name)
        return self._by_args.get(_args(node.target), []) if hasattr(node.target, "_schema") else []

    def _stand_in(self, node: Any, dtype_name: Any) -> Any:
        """A source of torch's shape and dtype for each result of an unmapped node (``Blocked``
        where the result is no tensor)."""
        val = node.meta.get("val")
        vals = list(val) if isinstance(val, list | tuple) else [val]
        outs: list[Any] = []
        for i, v in enumerate(vals):
            try:
                outs.append(self.graph.input(f"{node.name}.unmapped.{i}",
                                             [int(d) for d in v.shape],
                                             dtype_name(v.dtype, node.name)))
            except (AttributeError, TypeError, SpmdError):
                outs.append(Blocked(node.name))
        return tuple(outs) if isinstance(val, list | tuple) else outs[0]

    # ---- sources ------------------------------------------------------------------------------
    def _source(self, node: Any, spec: Any, state: Mapping[str, Any], dtype_name: Any) -> None:
        val = node.meta.get("val")
        if val is None or not hasattr(val, "shape"):
            raise ImporterError(f"input {node.name!r} is not a tensor ({val!r}); pass tensors, "
                                "or fix other arguments when exporting")
        self._check_static(node)
        kind = spec.kind.name if spec is not None else "USER_INPUT"
        shape, dt = [int(d) for d in val.shape], dtype_name(val.dtype, node.name)
        if kind == "USER_INPUT":
            t = self.graph.input(node.name, shape, dt)
            self.imported.inputs.append(t.name)
        else:
            target = spec.target
            src = target if kind in ("PARAMETER", "BUFFER") else f"constant.{target}"
            t = self.graph.param(_SAFE.sub("_", src), shape, dt)
            self.imported.values[t.name] = _numpy(state[target])
        self.env[node.name] = t

    def _check_static(self, node: Any) -> None:
        val = node.meta.get("val")
        vals = val if isinstance(val, list | tuple) else [val]
        for v in vals:
            if hasattr(v, "shape") and not all(isinstance(d, int) for d in v.shape):
                raise DynamicShapeError(
                    f"node {node.name!r}: shape {list(v.shape)} is symbolic; export with static "
                    "shapes (no dynamic_shapes), one graph per shape")

    def _check_control_flow(self, graph: Any) -> None:
        """Before anything is mapped: a higher-order op (cond, while_loop, map, scan) anywhere."""
        hop = self.torch._ops.HigherOrderOperator  # noqa: SLF001 -- torch exports it only there
        for node in graph.nodes:
            if node.op == "call_function" and isinstance(node.target, hop):
                raise ControlFlowError(
                    f"node {node.name!r}: {node.target.__name__} is control flow; spmdrules plans "
                    "straight-line programs. Export a branch-free model (fix the branch by the "
                    "example inputs) instead")

    def _check_mutations(self, sig: Any) -> None:
        for s in sig.output_specs:
            kind = s.kind.name
            if kind in ("USER_INPUT_MUTATION", "PARAMETER_MUTATION"):
                raise InPlaceMutationError(
                    f"node {s.arg.name!r} writes into {kind.split('_')[0].lower()} "
                    f"{s.target!r} in place; spmdrules imports functional programs, so return "
                    "the new value instead of mutating it")

    def _bind(self, node: Any, unmapped: type, blocked: bool = False) -> dict[str, Any]:
        schema = node.target._schema  # noqa: SLF001 -- an OpOverload's schema (torch's own idiom)
        out: dict[str, Any] = {}
        for i, arg in enumerate(schema.arguments):
            if i < len(node.args):
                v = node.args[i]
            elif arg.name in node.kwargs:
                v = node.kwargs[arg.name]
            else:
                v = arg.default_value if arg.has_default_value() else None
            out[arg.name] = self._value(v, node, unmapped, blocked)
        return out

    def _value(self, v: Any, node: Any, unmapped: type, blocked: bool = False) -> Any:
        if isinstance(v, list | tuple):
            return type(v)(self._value(x, node, unmapped, blocked) for x in v)
        if hasattr(v, "op") and hasattr(v, "name") and v.__class__.__name__ == "Node":
            got = self.env[v.name]
            if isinstance(got, Blocked) and not blocked:
                raise Untried(got.node)
            if isinstance(got, unmapped):
                raise got.use(node.name)  # type: ignore[attr-defined]
            return got
        return v

    def _op_name(self, node: Any) -> str:
        stack = node.meta.get("nn_module_stack") or {}
        path = ""
        if stack:
            path = list(stack.values())[-1][0]
        base = f"{path}.{node.name}" if path else node.name
        return _SAFE.sub("_", base)

    def _check_result(self, node: Any, out: Any, dtype_name: Any) -> None:
        """The mapped result has torch's shape and dtype: a mapping never changes either."""
        val = node.meta.get("val")
        pairs = list(zip(out, val, strict=False)) if isinstance(out, tuple) else [(out, val)]
        for t, v in pairs:
            if not isinstance(t, Tensor) or not hasattr(v, "shape"):
                continue
            shape, dt = tuple(int(d) for d in v.shape), dtype_name(v.dtype, node.name)
            if t.shape != shape or t.dtype != dt:
                raise ImporterError(
                    f"node {node.name!r} ({node.target}): mapped to {t.name!r} "
                    f"{list(t.shape)} {t.dtype} but torch gives {list(shape)} {dt}; this is a "
                    "bug of the mapping: please report it")

    def _outputs(self, node: Any, sig: Any) -> None:
        from spmdrules.graph import ops

        user = [s for s in sig.output_specs if s.kind.name == "USER_OUTPUT"]
        keys = _output_keys(self.ep, len(user))
        results = node.args[0]
        by_name = {getattr(r, "name", None): r for r in results}
        for s in sig.output_specs:
            if s.kind.name == "BUFFER_MUTATION":
                got = self.env.get(s.arg.name)
                if not isinstance(got, Tensor):
                    raise ImporterError(f"the new value of buffer {s.target!r} ({s.arg.name!r}) "
                                        "is not a tensor of the graph")
                buf = _SAFE.sub("_", s.target)
                out = ops.call("assign", got, name=f"{buf}.updated")
                self.imported.updates[buf] = out.outputs[0].name
        for s, key in zip(user, keys, strict=True):
            got = self.env.get(s.arg.name) if s.arg.name in by_name else None
            if not isinstance(got, Tensor):
                raise ImporterError(f"output {s.arg.name!r} is not a tensor of the graph")
            out = ops.call("assign", got, name=_SAFE.sub("_", key))
            self.imported.outputs.append(out.outputs[0].name)


def _args(op: Any) -> tuple[tuple[str, str], ...]:
    return tuple((a.name, str(a.type)) for a in op._schema.arguments)  # noqa: SLF001 -- as above


def _output_keys(ep: Any, n: int) -> list[str]:
    try:
        spec = ep.call_spec.out_spec
        ctx = spec.context
        if isinstance(ctx, list) and len(ctx) == n and all(isinstance(k, str) for k in ctx):
            return ctx
    except AttributeError:
        pass
    return ["output"] if n == 1 else [f"output.{i}" for i in range(n)]


__all__ = ["KEPT_WHOLE", "Imported", "decompose_program", "export", "from_exported", "load"]
