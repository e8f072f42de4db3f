"""``load(path_or_model)``: an ONNX model as a Graph (extra ``[onnx]``: the ``onnx`` package).

* The graph's inputs that are not initializers are inputs, with their static shapes;
  ``input_shapes={name: shape}`` overrides them (widen a batch of 1 to 4). Every shape is then
  re-inferred by our own shape inference, op by op (each mapped op infers its results), and
  cross-checked against ``onnx.shape_inference`` run on the same input shapes: a shape the model
  cannot take (a Reshape whose target no longer holds the elements) is an ``ImporterError``
  naming the node.
* Initializers keep their names: a float initializer read as data is a parameter (its value in
  ``Imported.values``); an integer one read as a shape (Reshape's target, ConstantOfShape's
  shape, Unsqueeze's axes) is folded into the op's attributes. ``Constant`` and
  ``ConstantOfShape`` are constant sources (``full`` for a fill, a named parameter for a tensor).
* ``Shape`` and ``Size`` are constants (shapes are static), and a node whose inputs are all
  constants is computed at import by ``onnx.reference`` (``onnx_fold``): the shape arithmetic
  ``torch.onnx.export`` writes leaves no op.
* Every tensor of the graph keeps its ONNX value name; an op named after its node's first output
  writes it (ops a mapping adds on the way are named ``<output>.<part>``).
* The model is read and checked first (``onnx_read``): external data from the file's own folder
  or ``external_data_dir`` only (``ExternalDataError``), then ``onnx.checker``'s full check
  (``InvalidModelError``, ``GraphCycleError``).
* Refused with a typed error (``spmdrules.importers.errors``) naming the node: symbolic dims
  without an override (``DynamicShapeError``), a dim below 1 or of 2**62 and more
  (``InvalidDimError``), a type with no graph dtype (``UnsupportedDtypeError``), If/Loop/Scan
  (``ControlFlowError``), any op with no mapping (``UnmappedOpsError``: every one at once, with
  the rule family that serves it), and any attribute a mapping cannot honour (a training-mode
  BatchNormalization, MaxPool's indices, a dilated pool).

``follow_batch=True`` lets a Reshape whose constant target fixes the model's batch (a leading
``1`` where the input had its batch) follow a widened batch: the ONNX files of the model zoo
write ``Reshape(x, [1, 9216])``, which no batch but 1 can take. Without it such a model with a
widened batch is refused at that Reshape, naming the option.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from spmdrules.graph.graph import Graph
from spmdrules.importers.errors import MissingExtraError
from spmdrules.importers.onnx_graph import Importer
from spmdrules.importers.onnx_read import read
from spmdrules.importers.onnx_values import DTYPES, safe_name
from spmdrules.importers.torch import Imported


def _onnx() -> Any:
    try:
        import onnx
    except ImportError as e:
        raise MissingExtraError("spmdrules.importers.onnx needs the onnx package; install the "
                                "extra in a clone of spmdrules: pip install -e '.[onnx]'") from e
    return onnx


def load(path_or_model: Any, *, input_shapes: Mapping[str, Sequence[int]] | None = None,
         follow_batch: bool = False, spatial_sharding: bool = False,
         name: str | None = None, external_data_dir: str | Path | None = None) -> Graph:
    """The Graph of an ONNX model (a path or a ``ModelProto``); see the module docs."""
    return import_model(path_or_model, input_shapes=input_shapes, follow_batch=follow_batch,
                        spatial_sharding=spatial_sharding, name=name,
                        external_data_dir=external_data_dir).graph


def import_model(path_or_model: Any, *, input_shapes: Mapping[str, Sequence[int]] | None = None,
                 follow_batch: bool = False, spatial_sharding: bool = False,
                 name: str | None = None,
                 external_data_dir: str | Path | None = None) -> Imported:
    """Import an ONNX model with the values of its parameters (``Imported.feeds``).

    ``spatial_sharding`` sets the conv opt-in (docs/rules.md) on every Conv, so a spatially
    sharded input stays sharded through them, with halos. ``external_data_dir`` is the folder
    an in-memory ``ModelProto``'s external data is read from (a file's is its own folder)."""
    onnx = _onnx()
    model, stem = read(onnx, path_or_model, external_data_dir)
    return Importer(onnx, model, name or stem or model.graph.name or "onnx",
                    dict(input_shapes or {}), follow_batch=follow_batch,
                    spatial_sharding=spatial_sharding).run()


__all__ = ["DTYPES", "Imported", "import_model", "load", "safe_name"]

