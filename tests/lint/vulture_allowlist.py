"""Names vulture (``make lint``) must not report as dead code, each for a reason it cannot see.

vulture scans the package alone (spmdrules/, rules/), so a name used only by the tests, by users or
by Python itself is listed here, by group. A name that is dead is deleted instead; a new entry needs
the reason of its group.
"""

# ruff: noqa
# mypy: ignore-errors
from types import SimpleNamespace

_ = SimpleNamespace()

# Paddle's rule arguments that a rule binds (its signature is Paddle's) but does not read
numeric_stable_mode  # rules/cross_entropy.py
start_index  # rules/embedding.py
vocab_size  # rules/embedding.py
multi_precision  # rules/fused_linear.py
reduce_all  # rules/reduction.py
infer_flags  # rules/slice.py
stable  # rules/sort.py

# read by Python itself (module __getattr__/__dir__, function metadata)
__getattr__  # spmdrules/__init__.py
__dir__  # spmdrules/__init__.py
_.__wrapped__  # spmdrules/engine/description.py
_.__qualname__  # spmdrules/graph/ops.py
_.__signature__  # spmdrules/graph/ops.py


# pydantic's model configuration
model_config  # spmdrules/conformance/runner.py

# public API (spec/API.md, docs) and result fields, exercised by the tests, not by the package
GPU_CLUSTER  # spmdrules/completion/cost.py
machine  # spmdrules/completion/cost.py
date  # spmdrules/completion/cost.py
_.origins  # spmdrules/completion/driver.py
_.unplannable  # spmdrules/completion/driver.py
_.bytes_moved  # spmdrules/completion/driver.py
op_order  # spmdrules/completion/result.py
reverse_kind  # spmdrules/conformance/runner.py
_.from_placements  # spmdrules/core/attr.py
_.is_replicated  # spmdrules/core/attr.py
_.of  # spmdrules/engine/description.py
_.internal_bytes  # spmdrules/execution/executor.py
analytic  # spmdrules/execution/gradcheck.py
numerical  # spmdrules/execution/gradcheck.py
removed_segments  # spmdrules/execution/launch.py
seen_segments  # spmdrules/execution/launch.py
_.local_nbytes  # spmdrules/execution/program.py
_.primitive  # spmdrules/execution/program.py
_.is_open  # spmdrules/graph/annotation.py
GPT_OPS_PER_LAYER  # spmdrules/graph/examples.py
GPT_OPS_OUTSIDE  # spmdrules/graph/examples.py
GPT_ANNOTATED_PER_LAYER  # spmdrules/graph/examples.py
GPT_ANNOTATED_OUTSIDE  # spmdrules/graph/examples.py
LLAMA_OPS_PER_LAYER  # spmdrules/graph/examples.py
LLAMA_OPS_OUTSIDE  # spmdrules/graph/examples.py
LLAMA_ANNOTATED_PER_LAYER  # spmdrules/graph/examples.py
LLAMA_ANNOTATED_OUTSIDE  # spmdrules/graph/examples.py
RESNET_OPS  # spmdrules/graph/examples.py
_.reset_attrs  # spmdrules/graph/graph.py
_.clear_derived  # spmdrules/graph/graph.py
_.is_source  # spmdrules/graph/nodes.py
_.weight_grad  # spmdrules/runtime/conv.py
_.bias_grad  # spmdrules/runtime/conv.py
halo_widths  # spmdrules/runtime/halo.py
global_out_shape  # spmdrules/runtime/halo.py
_.root_rank_of  # spmdrules/runtime/partition.py
_.create_cartesian_subtopology_partition  # spmdrules/runtime/partition.py
_.create_partition_union  # spmdrules/runtime/partition.py
_.jacobian  # spmdrules/runtime/pooling.py
full_geometry  # spmdrules/runtime/windows.py
nondeterministic  # spmdrules/verify/runner.py
_.nondeterministic  # spmdrules/verify/runner.py
halo_bytes  # spmdrules/auto/cost.py
