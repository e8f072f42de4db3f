"""DTensor's side: our plan translated into torch's tensor-parallel styles on a fake process
group, the forward's collectives recorded under ``CommDebugMode`` with their local tensor and
group size and converted to our convention (the translation is documented in
bench/plan_quality.py)."""

from __future__ import annotations

from typing import Any

from quality.figures import DP, MP, SEQ, Figure, collective_bytes, reason_of


def mesh() -> Any:
    """The 2x2 (dp, mp) DeviceMesh over a fake process group of dp x mp ranks."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if not dist.is_initialized():
        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=DP * MP)
    return init_device_mesh("cpu", (DP, MP), mesh_dim_names=("dp", "mp"))


def recording_mode() -> Any:
    """A CommDebugMode that also records each collective's op, input bytes and group size."""
    import torch
    from torch.distributed.distributed_c10d import _resolve_process_group
    from torch.distributed.tensor.debug import CommDebugMode

    class Recording(CommDebugMode):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.seen: list[tuple[str, int, int]] = []

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                               kwargs: Any = None) -> Any:
            out = super().__torch_dispatch__(func, types, args, kwargs)
            hop = torch._ops.HigherOrderOperator  # noqa: SLF001 -- torch exports it only there
            if out is NotImplemented or isinstance(func, hop):
                return out
            # SLF001 below: an OpOverload's packet and schema, as CommDebugMode reads them itself
            if func._overloadpacket in self.comm_registry:  # noqa: SLF001
                names = [a.name for a in func._schema.arguments]  # noqa: SLF001
                g = names.index("group_name")
                group = args[g] if g < len(args) else (kwargs or {})["group_name"]
                self.seen.append((func._overloadpacket.__name__.rstrip("_"),  # noqa: SLF001
                                  args[0].numel() * args[0].element_size(),
                                  _resolve_process_group(group).size()))
            return out

    return Recording()


def recorded(mode: Any, processes: int) -> Figure:
    """The collectives ``mode`` recorded, in our convention, times the processes (every process
    runs the same collectives on blocks of the same size)."""
    return Figure(sum(collective_bytes(op, b, n) for op, b, n in mode.seen) * processes,
                  len(mode.seen))


def run_dtensor(module: Any, inputs: tuple[Any, ...]) -> Figure:
    import torch
    from torch.distributed.tensor.experimental import implicit_replication
    from torch.nn.attention import SDPBackend, sdpa_kernel

    mode = recording_mode()
    # sdpa's math backend: DTensor has no sharding strategy for the fused CPU flash kernel
    # (GPT-2's and Phi-3's unmasked attention pick it); the math one is what the importer maps
    with torch.no_grad(), mode, implicit_replication(), sdpa_kernel(SDPBackend.MATH):
        module(*inputs)
    return recorded(mode, DP * MP)


def linear_conv1d(module: Any) -> None:
    """GPT-2's Conv1D layers ([in, out] weights) as the equal nn.Linear."""
    import torch
    from transformers.pytorch_utils import Conv1D

    for name, sub in list(module.named_modules()):
        if isinstance(sub, Conv1D):
            lin = torch.nn.Linear(sub.weight.shape[0], sub.weight.shape[1])
            lin.weight.data = sub.weight.data.t().contiguous()
            lin.bias.data = sub.bias.data
            parent, _, leaf = name.rpartition(".")
            setattr(module.get_submodule(parent), leaf, lin)


def dtensor_plan(module: Any, spec: dict[str, Any], fused: tuple[str, ...], mesh: Any) -> Any:
    """Our plan as DTensor's; Spec entries distribute their parameters in place."""
    import torch
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    from torch.distributed.tensor import parallel as tp

    from spmdrules import plan
    from spmdrules.plan.patterns import Names

    modules = Names(n for n, _ in module.named_modules() if n)
    params = Names(n for n, _ in module.named_parameters())
    chunked = {n for f in fused for n in modules.globbed(f)}
    out: dict[str, Any] = {}
    for key, style in spec.items():
        if isinstance(style, plan.DataParallel):
            continue  # the batch's dp shard is what the model is fed
        if isinstance(style, plan.Spec):
            for name in params.named(key) if params.has(key) else params.globbed(key):
                placements = [Shard(d) for d, m in enumerate(style.spec) if m == "mp"]
                parent, _, leaf = name.rpartition(".")
                owner = module.get_submodule(parent)
                owner.register_parameter(leaf, torch.nn.Parameter(distribute_tensor(
                    getattr(owner, leaf).detach(), mesh["mp"], placements or [Replicate()])))
            continue
        for name in modules.named(key) if modules.has(key) else modules.globbed(key):
            embedding = isinstance(module.get_submodule(name), torch.nn.Embedding)
            if isinstance(style, plan.VocabParallel):
                out[name] = (tp.RowwiseParallel(input_layouts=Replicate()) if embedding
                             else tp.ColwiseParallel())
            elif isinstance(style, plan.ColwiseParallel):
                out[name] = (tp.ColwiseParallel(output_layouts=Replicate(), use_local_output=False)
                             if name in chunked else tp.ColwiseParallel())
            elif isinstance(style, plan.RowwiseParallel):
                out[name] = tp.RowwiseParallel()
            else:
                raise ValueError(f"plan entry {key!r}: {style!r} has no DTensor translation here")
    return out


def dtensor_decoder(kind: str, batch: int, experts: str | None = None) -> Figure:
    import torch
    from hf_models import DECODERS, SIZES, decoder
    from torch.distributed.tensor.parallel import parallelize_module

    _, spec, fused = DECODERS[kind]
    dm = mesh()
    module = decoder(kind, experts)
    linear_conv1d(module)
    parallelize_module(module, dm["mp"], dtensor_plan(module, spec, fused, dm))
    ids = torch.randint(0, SIZES["vocab"], (batch // DP, SEQ))
    try:
        return run_dtensor(module, (ids,))
    except RuntimeError as e:
        if "_grouped_mm" not in traceback_text(e):
            raise
        # transformers' default experts path calls aten._grouped_mm in eager mode on CPU (its
        # fallback only under torch.compile/export); DTensor propagates shardings through the
        # op's meta function, which takes only bfloat16
        raise RuntimeError(f"DTensor on the default experts path (aten._grouped_mm, whose meta "
                           f"function takes only bfloat16): {reason_of(e)}") from e


def traceback_text(e: BaseException) -> str:
    import traceback

    return "".join(traceback.format_exception(e))


def dtensor_cnn(module: Any, x: Any) -> Figure:
    """The CNN's input a DTensor (Shard(0) on dp, Shard(2) on mp), its parameters replicated."""
    from torch.distributed.tensor import Shard, distribute_module, distribute_tensor

    dm = mesh()
    try:
        return run_dtensor(distribute_module(module, dm),
                           (distribute_tensor(x, dm, [Shard(0), Shard(2)]),))
    except RuntimeError as e:  # DTensor's own error, said where it came from
        raise RuntimeError(f"DTensor on the input split (Shard(0), Shard(2)): "
                           f"{reason_of(e)}") from e


def dtensor_routed_experts() -> Figure:
    """The routed-experts layer on one mesh dim ep, its output split on T as its input."""
    import routed_experts as re_
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    mesh()
    ep = init_device_mesh("cpu", (re_.EP,), mesh_dim_names=("ep",))
    gen = torch.Generator().manual_seed(0)
    v = {n: distribute_tensor(torch.randn(*shape, generator=gen), ep, [Shard(dim)])
         for n, (shape, dim) in re_.TENSORS.items()}
    mode = recording_mode()
    with torch.no_grad(), mode:
        re_.torch_forward(v).redistribute(ep, [Shard(0)])
    return recorded(mode, re_.EP)
