"""Parallelization styles as practitioners know them (DTensor's ``parallelize_module`` names).

A style says what to do with a *module* (the dotted prefix of its parameters' names:
``model.layers.0.self_attn.q_proj`` owns ``...q_proj.weight`` and ``...q_proj.bias``) or with a
*tensor* (``input_ids``). Styles only annotate: the layouts of the activations between them are
left to completion, which derives what DTensor's ``input_layouts``/``output_layouts`` would ask.

* ``ColwiseParallel``: a linear's output features split on ``dim`` (torch's ``Shard(0)`` of an
  ``nn.Linear`` weight [out, in]; the last dim of a [in, out] weight); its bias split alike. On
  an embedding, the embedding dim (DTensor's ``Shard(1)``). ``ColwiseParallel(chunks=...)``
  is for a fused projection whose output the model cuts into chunks by position (GPT-2's
  ``c_attn``: q | k | v; Phi-3's ``gate_up_proj``: gate | up): ``chunks`` is their number
  (equal chunks) or their sizes, absolute or relative (``(2, 1, 1)`` for 8 query heads and 4
  key-value heads). Each chunk is split on ``dim``, not the fused output: the weight and bias
  are stored interleaved (``spmdrules.graph.storage``, Megatron's interleaved QKV), so process
  r holds the r-th block of every chunk, and the cuts of the output into its chunks are
  rewritten to read the process's own blocks (``spmdrules.plan.chunks``).
* ``RowwiseParallel``: a linear's input features split (the pending sum it leaves is reduced
  where the next op needs it); its bias replicated. On an embedding, the vocabulary dim.
* ``VocabParallel``: the vocabulary dim of an embedding table or of an LM head (its output
  features).
* ``SequenceParallel``: the sequence dim (``sequence_dim``, default 1) of a module's output (the
  result of the op reading its weight, as a norm) or of a tensor split; the module's parameters
  replicated.
* ``DataParallel``: a tensor's batch dim (``batch_dim``) split on ``dim`` (default ``"dp"``), its
  other dims replicated; a module's parameters replicated.
* ``Replicated``: a tensor, or a module's parameters, whole on every process (Hugging Face's
  ``replicate``).
* ``Spatial``: named dims of a tensor split (``Spatial(dims={"H": "mp"})`` on an NCHW tensor);
  the other dims replicated.
* ``Spec``: anything else, as ``shard`` takes it: placements, a dims_mapping, mesh-dim names per
  dim (PartitionSpec) or a DistAttr. A bare list, tuple or DistAttr in a plan is a ``Spec``.

Which dim of a weight holds the output features is read from the op that uses it (through any
transposes), so one style fits torch's [out, in] linears, GPT-2's [in, out] Conv1D and the
hand-built graphs alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

MeshDim = str | int


@dataclass(frozen=True)
class ColwiseParallel:
    dim: MeshDim = "mp"
    chunks: int | tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if isinstance(self.chunks, list):  # a list of sizes, kept hashable
            object.__setattr__(self, "chunks", tuple(self.chunks))

    def __repr__(self) -> str:
        more = "" if self.chunks is None else f", chunks={self.chunks!r}"
        return f"ColwiseParallel(dim={self.dim!r}{more})"


@dataclass(frozen=True)
class RowwiseParallel:
    dim: MeshDim = "mp"


@dataclass(frozen=True)
class VocabParallel:
    dim: MeshDim = "mp"


@dataclass(frozen=True)
class SequenceParallel:
    dim: MeshDim = "mp"
    sequence_dim: int = 1


@dataclass(frozen=True)
class DataParallel:
    dim: MeshDim = "dp"
    batch_dim: int = 0


@dataclass(frozen=True)
class Replicated:
    pass


@dataclass(frozen=True)
class Spatial:
    dims: Mapping[str, MeshDim] = field(default_factory=dict)
    layout: str = "NCHW"

    def __hash__(self) -> int:
        return hash((tuple(sorted(self.dims.items(), key=repr)), self.layout))


@dataclass(frozen=True)
class Spec:
    """A raw spec for ``shard``: ``Spec([Shard(0), Replicate()])``, ``Spec((None, "mp"))``."""

    spec: Any
    partial: Any = None
    closed: bool = True

    def __hash__(self) -> int:
        return id(self)


Style = (ColwiseParallel | RowwiseParallel | VocabParallel | SequenceParallel | DataParallel
         | Replicated | Spatial | Spec)
#: the styles that act on a module's weight as a linear or an embedding uses it
WEIGHT_STYLES = (ColwiseParallel, RowwiseParallel, VocabParallel)
STYLES = (ColwiseParallel, RowwiseParallel, VocabParallel, SequenceParallel, DataParallel,
          Replicated, Spatial, Spec)


@dataclass(frozen=True)
class Translated:
    """A style translated from another library's plan entry (``origin``, as ``plan.from_hf``
    writes it: ``from base_model_tp_plan: 'layers.*.mlp.up_proj': 'colwise'``), which
    ``explain`` names beside the style."""

    style: Style
    origin: str


def describe(pattern: str, style: Style, origin: str = "") -> str:
    """How ``explain`` names a plan entry: ``plan entry '*.q_proj': ColwiseParallel(dim='mp')``,
    and, for a translated one, the entry it was translated from."""
    return f"plan entry {pattern!r}: {style!r}" + (f" ({origin})" if origin else "")
