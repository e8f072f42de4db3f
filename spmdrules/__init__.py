"""spmdrules: sharding propagation rules, graph completion and an MPI partition runtime.

The layers, each a subpackage (``docs/architecture.md``): ``core`` (attributes), ``engine`` (the rule
engine), ``rules`` (the op rules), ``graph``, ``completion``, ``execution``, ``verify`` and
``conformance``; ``runtime`` is the MPI partition runtime. This module is the public face; it also
imports every rule family, so every rule is registered whatever module of spmdrules is used first.
"""

import importlib
from typing import TYPE_CHECKING

from spmdrules.core.attr import DistAttr
from spmdrules.core.errors import (
    CoShardedDimError,
    DuplicateRegistrationError,
    InvalidDistAttrError,
    InvalidMeshError,
    RuleArgumentError,
    ShardingConflictError,
    SpmdError,
    UnknownOpError,
    UnsupportedError,
)

# before any layer that reads the rules: a source tree that shadows the install is refused here
from spmdrules.core.installed import RULES_PACKAGE
from spmdrules.core.mesh import ProcessMesh
from spmdrules.core.placements import REDUCE_TYPES, Partial, Placement, Replicate, Shard
from spmdrules.core.plugins import PluginError, load_plugins
from spmdrules.core.spec import SpmdInfo, TensorSpec
from spmdrules.engine.registry import Rule, get_rule, list_rules, register_rule
from spmdrules.graph import examples, ops
from spmdrules.graph.annotate import shard
from spmdrules.graph.annotation import OPEN, Annotation
from spmdrules.graph.graph import Graph
from spmdrules.graph.nodes import Op, Tensor

if TYPE_CHECKING:
    from spmdrules.completion.result import DroppedSplitWarning
    from spmdrules.registration import OpSpec, OpSpecError, register_op

__all__ = [
    "OPEN",
    "REDUCE_TYPES",
    "Annotation",
    "CoShardedDimError",
    "DistAttr",
    "DroppedSplitWarning",
    "DuplicateRegistrationError",
    "Graph",
    "InvalidDistAttrError",
    "InvalidMeshError",
    "Op",
    "OpSpec",
    "OpSpecError",
    "Partial",
    "Placement",
    "PluginError",
    "ProcessMesh",
    "Replicate",
    "Rule",
    "RuleArgumentError",
    "Shard",
    "ShardingConflictError",
    "SpmdError",
    "SpmdInfo",
    "Tensor",
    "TensorSpec",
    "UnknownOpError",
    "UnsupportedError",
    "examples",
    "get_rule",
    "list_rules",
    "load_plugins",
    "ops",
    "register_op",
    "register_rule",
    "shard",
]

__version__ = "0.1.0"

# Every rule family registers its rules as it is imported. By name, because the families live in
# the repository's ``rules/`` folder, which only the installed package maps to ``spmdrules.rules``:
# mypy, which reads the source tree, cannot follow a static import of it.
importlib.import_module(RULES_PACKAGE)


def __getattr__(name: str) -> object:
    # Completion's warning loads on first use: importing it here would make every process that
    # imports any spmdrules module, each rank of every MPI job included, load the completion layer.
    if name == "DroppedSplitWarning":
        from spmdrules.completion.result import DroppedSplitWarning

        return DroppedSplitWarning
    if name in ("OpSpec", "OpSpecError", "register_op"):
        # the registration of a whole op reaches every layer's table, lowering and verify's
        # included: loaded when a plugin first registers, not by every import of spmdrules
        from spmdrules import registration

        return getattr(registration, name)
    raise AttributeError(f"module 'spmdrules' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
