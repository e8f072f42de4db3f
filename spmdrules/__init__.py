"""spmdrules: sharding propagation rules, graph completion and an MPI partition runtime."""

from spmdrules import examples, ops
from spmdrules.annotate import OPEN, Annotation, shard
from spmdrules.attr import DistAttr
from spmdrules.errors import (
    CoShardedDimError,
    InvalidDistAttrError,
    InvalidMeshError,
    RuleArgumentError,
    ShardingConflictError,
    SpmdError,
    UnknownOpError,
    UnsupportedError,
)
from spmdrules.graph import Graph, Op, Tensor
from spmdrules.mesh import ProcessMesh
from spmdrules.placements import REDUCE_TYPES, Partial, Placement, Replicate, Shard
from spmdrules.registry import Rule, get_rule, list_rules, register_rule
from spmdrules.spec import SpmdInfo, TensorSpec

__all__ = [
    "OPEN",
    "REDUCE_TYPES",
    "Annotation",
    "CoShardedDimError",
    "DistAttr",
    "Graph",
    "InvalidDistAttrError",
    "InvalidMeshError",
    "Op",
    "Partial",
    "Placement",
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
    "ops",
    "register_rule",
    "shard",
]

__version__ = "0.1.0"
