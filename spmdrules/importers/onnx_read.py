"""An ONNX model as the importer reads it: its external data loaded from one folder only, and the
whole model checked by ``onnx.checker`` (the full check: shape inference included) before any of
it is mapped.

* A file's external data is read from the file's own folder; an in-memory ``ModelProto`` with
  external data needs ``external_data_dir``, or it is refused (the process's working directory is
  never a default). onnx's loader (>= 1.21) reads only regular files inside that folder: an
  absolute location, a ``..`` that leaves it, a symbolic or hard link are refused, each as an
  ``ExternalDataError`` naming the tensor.
* A model the checker refuses is an ``InvalidModelError`` naming the node (a node without a name
  is named after its first output, as the importer names it), or a ``GraphCycleError`` naming the
  nodes of the cycle. An opset newer than the installed onnx defines is refused: the converters
  could not know its meaning.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import networkx as nx

from spmdrules.importers.errors import (
    ExternalDataError,
    GraphCycleError,
    ImporterError,
    InvalidModelError,
)

#: the domains of the standard ONNX operators (the only ones the converters map)
DEFAULT_DOMAINS = ("", "ai.onnx")


def node_label(node: Any) -> str:
    """How errors name a node: its name, else its first output, else its op type."""
    return str(node.name or (node.output[0] if node.output and node.output[0] else node.op_type))


def one_line(text: str) -> str:
    """A library's message on one line (an error is printed as one line)."""
    return " ".join(str(text).split())


def read(onnx: Any, source: Any, external_data_dir: str | Path | None) -> tuple[Any, str]:
    """The checked ModelProto of ``source`` (a path or a ModelProto) with its external data
    loaded, and the model's default name (the file's stem)."""
    path: Path | None = None
    base: Path | None = None
    if isinstance(source, str | Path):
        path = Path(source)
        if external_data_dir is not None:
            raise ImporterError(f"{path.name}: external_data_dir is for an in-memory ModelProto; "
                                "a file's external data is read from the file's own folder")
        model, base, label = _load(onnx, path), path.parent, path.name
    elif isinstance(source, onnx.ModelProto):
        model, label = source, "the model"
        if external_data_dir is not None:
            base = Path(external_data_dir)
            if not base.is_dir():
                raise ImporterError(f"external_data_dir {str(base)!r} is not a folder")
    else:
        raise ImporterError(f"onnx importer: expected a path or an onnx.ModelProto, got "
                            f"{type(source).__name__}")
    if model.graph.sparse_initializer:
        sparse = model.graph.sparse_initializer[0].values.name
        raise ImporterError(f"initializer {sparse!r} is sparse: spmdrules maps dense tensors; "
                            "store it dense in the model")
    external = _external(onnx, model)
    if external:
        if base is None:
            raise ExternalDataError(
                f"tensor {external[0].name!r} keeps its data in the file "
                f"{_location(external[0])!r}, outside the in-memory model: pass "
                "external_data_dir= (the folder the model was saved in), or import the model's "
                "file; nothing is read from the working directory")
        if model is source:  # the caller's model is not changed
            model = onnx.ModelProto()
            model.CopyFrom(source)
        _load_external(onnx, model, base)
    _check_opset(onnx, model, label)
    _check(onnx, model, path, label)
    return model, path.stem if path is not None else ""


def _load(onnx: Any, path: Path) -> Any:
    """The ModelProto of a file, its external data not yet loaded."""
    if not path.is_file():
        raise ImporterError(f"{path}: " + ("not a regular file" if path.exists() else
                                           "no such ONNX file"))
    if path.stat().st_size == 0:
        raise InvalidModelError(f"{path.name}: the file is empty, not an ONNX model")
    try:
        return onnx.load(str(path), load_external_data=False)
    except Exception as e:
        raise InvalidModelError(f"{path.name}: not an ONNX model: onnx.load failed: "
                                f"{type(e).__name__}: {one_line(str(e))}") from e


def _external(onnx: Any, model: Any) -> list[Any]:
    helper = onnx.external_data_helper
    return [t for t in helper._get_all_tensors(model) if helper.uses_external_data(t)]  # noqa: SLF001 -- onnx: no public


def _location(tensor: Any) -> str:
    return next((e.value for e in tensor.external_data if e.key == "location"), "")


def _load_external(onnx: Any, model: Any, base: Path) -> None:
    for t in _external(onnx, model):
        try:
            onnx.external_data_helper.load_external_data_for_tensor(t, str(base))
        except Exception as e:
            raise ExternalDataError(
                f"tensor {t.name!r}: its external data {_location(t)!r} is not read: it must be "
                f"a regular file inside {str(base)!r} (no absolute path, no '..' out of it, no "
                f"link); onnx says: {type(e).__name__}: {one_line(str(e))}") from e


def _check_opset(onnx: Any, model: Any, label: str) -> None:
    newest = int(onnx.defs.onnx_opset_version())
    for o in model.opset_import:
        if o.domain in DEFAULT_DOMAINS and not 1 <= o.version <= newest:
            raise InvalidModelError(
                f"{label}: opset {o.version} of the ONNX domain is not one onnx "
                f"{onnx.__version__} defines (1..{newest}); export the model at an opset in "
                "that range, or update onnx")


def _check(onnx: Any, model: Any, path: Path | None, label: str) -> None:
    """onnx.checker's full check; its refusal becomes a typed error naming the node."""
    # a protobuf over 2 GiB cannot be serialised: the checker reads such a model from its file
    too_big = model.ByteSize() > onnx.checker.MAXIMUM_PROTOBUF
    if too_big and path is None:
        raise InvalidModelError(
            f"{label} is over 2 GiB in memory: save it with its weights as external data "
            "(onnx.save_model(..., save_as_external_data=True)) and import the file")
    try:
        onnx.checker.check_model(str(path) if too_big else model, full_check=True)
    except Exception as e:
        msg = one_line(str(e))
        if "topologically sorted" in msg:
            _refuse_cycle(model)
        who = _node_of(msg)
        if not who and not too_big and any(not n.name for n in model.graph.node):
            msg = _named_message(onnx, model) or msg
            who = _node_of(msg)
        raise InvalidModelError(f"{who or _value_of(onnx, model)}onnx.checker refuses {label}: "
                                f"{msg}") from e


def _refuse_cycle(model: Any) -> None:
    producers = {out: i for i, n in enumerate(model.graph.node) for out in n.output if out}
    g = nx.DiGraph()
    for i, n in enumerate(model.graph.node):
        g.add_edges_from((producers[v], i) for v in n.input if v in producers)
    try:
        cycle = nx.find_cycle(g)
    except nx.NetworkXNoCycle:
        return
    nodes = [model.graph.node[a] for a, _ in cycle]
    path = " -> ".join(f"{node_label(n)!r} ({n.op_type})" for n in [*nodes, nodes[0]])
    raise GraphCycleError(f"nodes {path} form a cycle: each reads a value the next computes, so "
                          "none can run first; an ONNX graph is acyclic (fix the exporter)")


def _named_message(onnx: Any, model: Any) -> str:
    """The checker's message for a copy whose unnamed nodes are named as the importer names
    them (so the message names the node)."""
    named = onnx.ModelProto()
    named.CopyFrom(model)
    for n in named.graph.node:
        n.name = node_label(n)
    try:
        onnx.checker.check_model(named, full_check=True)
    except Exception as e:
        return one_line(str(e))
    return ""


def _value_of(onnx: Any, model: Any) -> str:
    """``input 'x': `` for the first graph input, output or initializer the checker refuses on
    its own (where its message names none)."""
    def check_tensor(t: Any) -> None:
        onnx.checker.check_tensor(t)
        onnx.helper.tensor_dtype_to_np_dtype(t.data_type)  # a type no release defines

    checks = (("input", model.graph.input, onnx.checker.check_value_info),
              ("output", model.graph.output, onnx.checker.check_value_info),
              ("initializer", model.graph.initializer, check_tensor))
    for kind, values, check in checks:
        for v in values:
            try:
                check(v)
            except Exception:
                return f"{kind} {v.name!r}: "
    return ""


_NODE = re.compile(r"node name: ([^)]*)\)|name: (\S+) OpType: (\S+)")
_OP = re.compile(r"\(op_type:(\w+)")
_TENSOR = re.compile(r"\(tensor name: ([^)]*)\)")


def _node_of(msg: str) -> str:
    """``node 'n' (Op): `` or ``tensor 't': `` when the checker's message names one."""
    m = _NODE.search(msg)
    if m is None:
        t = _TENSOR.search(msg)
        return f"tensor {t.group(1)!r}: " if t else ""
    name = m.group(1) or m.group(2)
    op = m.group(3) or next(iter(_OP.findall(msg)), "")
    return f"node {name!r} ({op}): " if op else f"node {name!r}: "


__all__ = ["DEFAULT_DOMAINS", "node_label", "one_line", "read"]
