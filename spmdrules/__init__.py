"""spmdrules: sharding propagation rules, graph completion and an MPI partition runtime."""

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
from spmdrules.mesh import ProcessMesh
from spmdrules.placements import REDUCE_TYPES, Partial, Placement, Replicate, Shard
from spmdrules.registry import Rule, get_rule, list_rules, register_rule
from spmdrules.spec import SpmdInfo, TensorSpec

__all__ = [
    "REDUCE_TYPES",
    "CoShardedDimError",
    "DistAttr",
    "InvalidDistAttrError",
    "InvalidMeshError",
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
    "TensorSpec",
    "UnknownOpError",
    "UnsupportedError",
    "get_rule",
    "list_rules",
    "register_rule",
]

__version__ = "0.1.0"
