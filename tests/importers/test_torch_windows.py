"""ATen's CNN layers (spmdrules/importers/aten_windows.py): each torch layer, with every
attribute it has, imports and runs serially equal to torch, forward and gradients (the input's and
every parameter's, by reverse mode on the graph); what a registered op cannot honour is refused
naming the node."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs the torch extra (make test installs it)")
from sharded_runs import assert_simulated_equals_serial, serial_cotangents  # noqa: E402
from torch import nn  # noqa: E402

from spmdrules import plan  # noqa: E402
from spmdrules.completion import complete  # noqa: E402
from spmdrules.core.mesh import ProcessMesh  # noqa: E402
from spmdrules.execution.executor import run_serial  # noqa: E402
from spmdrules.execution.lowering import lower  # noqa: E402
from spmdrules.importers import torch as torch_import  # noqa: E402
from spmdrules.importers.errors import InPlaceMutationError, UnmappedOpError  # noqa: E402


class Seq(nn.Sequential):
    """A Sequential whose forward ends in a nonlinearity, so a norm's gradient is not zero."""

    def forward(self, x: Any) -> Any:
        return torch.tanh(super().forward(x))


LAYERS: dict[str, tuple[Any, tuple[int, ...]]] = {
    "conv_groups_dilation_stride": (nn.Conv2d(4, 6, 3, stride=2, padding=2, dilation=2, groups=2),
                                    (2, 4, 9, 8)),
    "conv_depthwise_same": (nn.Conv2d(4, 4, 3, padding="same", dilation=2, groups=4, bias=False),
                            (2, 4, 7, 7)),
    "conv_asymmetric": (nn.Conv2d(3, 5, (3, 1), stride=(1, 2), padding=(1, 0)), (2, 3, 6, 7)),
    "conv3d": (nn.Conv3d(2, 3, 3, padding=1, stride=(1, 2, 1)), (1, 2, 4, 5, 4)),
    "conv_transpose_output_padding": (nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1,
                                                         output_padding=1, groups=2),
                                      (2, 4, 5, 4)),
    "conv_transpose_dilation": (nn.ConvTranspose2d(3, 2, 2, stride=(2, 1), dilation=2,
                                                   bias=False), (1, 3, 4, 5)),
    "conv1d_groups_dilation_stride": (nn.Conv1d(4, 6, 3, stride=2, padding=2, dilation=2,
                                                groups=2), (2, 4, 11)),
    "conv1d_depthwise_causal": (nn.Conv1d(4, 4, 4, padding=3, groups=4), (2, 4, 9)),
    "conv1d_same_no_bias": (nn.Conv1d(3, 5, 5, padding="same", bias=False), (3, 3, 8)),
    "conv1d_unbatched": (nn.Conv1d(2, 3, 3), (2, 8)),
    "conv_transpose1d_output_padding": (nn.ConvTranspose1d(4, 6, 3, stride=2, padding=1,
                                                           output_padding=1, groups=2),
                                        (2, 4, 7)),
    "max_pool_padding_ceil": (nn.MaxPool2d(3, 2, 1, ceil_mode=True), (2, 3, 8, 9)),
    "max_pool_ceil_drops_last_window": (nn.MaxPool2d(2, 2, 1, ceil_mode=True), (1, 2, 5, 5)),
    "max_pool3d": (nn.MaxPool3d(2), (1, 2, 4, 4, 6)),
    "avg_pool_count_include_pad": (nn.AvgPool2d(3, 2, 1, count_include_pad=True), (2, 3, 7, 8)),
    "avg_pool_exclusive_ceil": (nn.AvgPool2d(3, 2, 1, ceil_mode=True, count_include_pad=False),
                                (2, 3, 8, 7)),
    "adaptive_avg_uneven_bins": (nn.AdaptiveAvgPool2d((3, 4)), (2, 3, 7, 10)),
    "adaptive_avg_1x1": (nn.AdaptiveAvgPool2d(1), (2, 3, 5, 5)),
    "adaptive_max": (nn.AdaptiveMaxPool2d((2, 3)), (2, 3, 5, 7)),
    "batch_norm_eval": (Seq(nn.BatchNorm2d(3)).eval(), (2, 3, 4, 5)),
    "batch_norm_eval_not_affine": (Seq(nn.BatchNorm2d(3, affine=False)).eval(), (2, 3, 4, 5)),
    "batch_norm_train": (Seq(nn.BatchNorm2d(3, momentum=0.3)).train(), (2, 3, 4, 5)),
    "batch_norm_train_no_running_stats": (Seq(nn.BatchNorm2d(3, track_running_stats=False)),
                                          (2, 3, 4, 5)),
    "batch_norm3d_train_not_affine": (Seq(nn.BatchNorm3d(2, affine=False)), (2, 2, 3, 2, 3)),
}


def _randomised(module: Any) -> Any:
    """Running statistics that are not the identity's, so eval mode is tested for them."""
    gen = torch.Generator().manual_seed(3)
    for m in module.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.running_mean is not None:
            m.running_mean.copy_(torch.randn(m.num_features, generator=gen))
            m.running_var.copy_(torch.rand(m.num_features, generator=gen) + 0.5)
        if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.affine:
            with torch.no_grad():
                m.weight.copy_(torch.randn(m.num_features, generator=gen))
                m.bias.copy_(torch.randn(m.num_features, generator=gen))
    return module


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_layer_runs_equal_to_torch_forward_and_gradients(name: str) -> None:
    layer, shape = LAYERS[name]
    torch.manual_seed(0)
    module = _randomised(layer)
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(1), dtype=torch.float32)
    im = torch_import.export(module, (x,))
    g = im.graph
    out = im.outputs[0]
    feeds = im.feeds(x)
    values = run_serial(g, feeds)
    reference = _double_copy(module)
    xt = x.double().requires_grad_(True)
    y = reference(xt)
    np.testing.assert_allclose(values[out], y.detach().numpy(), rtol=1e-5, atol=1e-5)
    seed = np.random.default_rng(0).standard_normal(y.shape)
    y.backward(torch.from_numpy(seed))
    cts = serial_cotangents(g, feeds, {out: seed})
    np.testing.assert_allclose(cts[im.inputs[0]], xt.grad.numpy(), rtol=1e-5, atol=1e-5)
    for n, p in reference.named_parameters():
        np.testing.assert_allclose(cts[n], p.grad.numpy(), rtol=1e-5, atol=1e-5, err_msg=n)
    buffers = dict(reference.named_buffers())
    for n, t in im.updates.items():  # a training step's running statistics
        np.testing.assert_allclose(values[t], buffers[n].numpy(), rtol=1e-6, atol=1e-6,
                                   err_msg=n)
    assert len(im.updates) == (len(buffers) if module.training else 0)


def _double_copy(module: Any) -> Any:
    import copy

    return copy.deepcopy(module).double()


def test_a_training_batch_norm_reports_its_buffers_as_updates() -> None:
    module = Seq(nn.BatchNorm2d(3)).train()
    im = torch_import.export(module, (torch.randn(2, 3, 4, 4),))
    assert im.updates == {f"0.{b}": f"0.{b}.updated"
                          for b in ("running_mean", "running_var", "num_batches_tracked")}
    assert im.outputs == ["output"]


@pytest.mark.parametrize("option", [False, True])
def test_spatial_sharding_is_every_convolutions_opt_in(option: bool) -> None:
    """As the ONNX importer's option: with it a split H stays split through the convolutions
    (with halos), without it each convolution reads H whole."""
    module = nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.ReLU(),
                           nn.ConvTranspose2d(4, 2, 2, stride=2))
    im = torch_import.export(module, (torch.randn(2, 2, 8, 8),), spatial_sharding=option)
    convs = [op for op in im.graph.ops if op.type in ("conv2d", "conv2d_transpose")]
    assert len(convs) == 2
    assert all(op.attr_dict["spatial_sharding"] is option for op in convs)
    plan.apply(im.graph, ProcessMesh([2], ["mp"]), {im.inputs[0]: plan.Spec((None, None, "mp", None))})
    res = complete(im.graph)
    kept = [res.attr(op.results[0].name).dims_mapping[2] == 0 for op in convs]
    assert kept == [option, option]


class AudioStem(nn.Module):
    """Whisper's encoder stem: two 1-D convolutions (the second of stride 2) with GELUs, then
    the channels last, as the transformer layers read them."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv1d(4, 8, 3, padding=1)
        self.conv2 = nn.Conv1d(8, 8, 3, stride=2, padding=1)

    def forward(self, x: Any) -> Any:
        y = nn.functional.gelu(self.conv2(nn.functional.gelu(self.conv1(x))))
        return y.permute(0, 2, 1)


@pytest.mark.parametrize("split", [(0, -1, -1), (0, -1, 1)], ids=["batch", "batch_and_length"])
def test_conv1d_runs_data_parallel_on_the_simulated_mesh(split: tuple[int, ...]) -> None:
    """The batch on dp (and the length on mp, with halos): the unit H dim the 1-D convolution
    runs on keeps both splits, nothing is resharded, and the run equals serial forward and
    reverse, and torch."""
    torch.manual_seed(0)
    module = AudioStem().eval()
    x = torch.randn(4, 4, 16, generator=torch.Generator().manual_seed(1))
    im = torch_import.export(module, (x,), spatial_sharding=True)
    g = im.graph
    mesh = ProcessMesh([[0, 1], [2, 3]], ["dp", "mp"])
    names = [mesh.dim_names[d] if d >= 0 else None for d in split]
    plan.apply(g, mesh, {im.inputs[0]: plan.Spec(tuple(names))})
    res = complete(g)
    convs = [op for op in g.ops if op.type == "conv2d"]
    assert len(convs) == 2
    assert all(res.attr(op.results[0].name).dims_mapping == (split[0], -1, -1, split[2])
               for op in convs)
    assert not res.reshards
    out = im.outputs[0]
    feeds = im.feeds(x)
    assert_simulated_equals_serial(g, feeds, prog=lower(res), loss=out, tol=1e-5)
    np.testing.assert_allclose(run_serial(g, feeds)[out], module(x).detach().numpy(),
                               rtol=1e-5, atol=1e-5)


REFUSED: dict[str, tuple[Any, tuple[int, ...], str]] = {
    "conv_transpose3d": (nn.ConvTranspose3d(2, 3, 2), (1, 2, 3, 3, 3),
                         "input rank 5: only 1-D \\(rank 3\\) and 2-D \\(rank 4\\) "
                         "transposed convolutions are registered"),
    "avg_pool_divisor_override": (nn.AvgPool2d(2, divisor_override=3), (1, 2, 4, 4),
                                  "divisor_override=3"),
    "max_pool_dilation": (nn.MaxPool2d(2, dilation=2), (1, 2, 6, 6), "no dilation"),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_what_a_registered_op_cannot_honour_is_refused_naming_the_node(name: str) -> None:
    module, shape, why = REFUSED[name]
    try:
        ep = torch.export.export(module, (torch.randn(*shape),))
    except Exception as e:  # torch itself refuses the input: nothing for the importer to do
        pytest.fail(f"torch.export refused the case, fix the test: {e}")
    with pytest.raises(UnmappedOpError, match=why) as err:
        torch_import.from_exported(torch_import.decompose_program(ep))
    assert "node '" in str(err.value)


def test_reading_a_max_pools_indices_is_refused_naming_the_reader() -> None:
    class Indices(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.pool = nn.MaxPool2d(2, return_indices=True)

        def forward(self, x: Any) -> Any:
            y, idx = self.pool(x)
            return y * idx.to(y.dtype)

    with pytest.raises(UnmappedOpError, match="result 'indices' of node 'max_pool2d_with_ind"):
        torch_import.load(Indices(), (torch.randn(1, 2, 4, 4),))


def _cnn_layers() -> Any:
    torch.manual_seed(0)
    return Seq(nn.Conv2d(3, 4, 3, stride=2, padding=1, groups=1), nn.BatchNorm2d(4),
               nn.BatchNorm2d(4, track_running_stats=False), nn.ReLU(), nn.MaxPool2d(2, 1),
               nn.AvgPool2d(2, ceil_mode=True), nn.AdaptiveAvgPool2d((2, 3)),
               nn.ConvTranspose2d(4, 2, 3, stride=2, output_padding=1, dilation=2))


def test_the_training_ir_of_cnn_layers_imports_in_eval_mode() -> None:
    """``decompose=False``: ``conv2d``, ``batch_norm``, ``max_pool2d``, ``avg_pool2d``,
    ``adaptive_avg_pool2d`` and ``conv_transpose2d`` as torch.export leaves them."""
    module = _randomised(_cnn_layers()).eval()
    x = torch.randn(2, 3, 16, 14, generator=torch.Generator().manual_seed(1))
    im = torch_import.export(module, (x,), decompose=False)
    values = run_serial(im.graph, im.feeds(x))
    np.testing.assert_allclose(values[im.outputs[0]], module(x).detach().numpy(), rtol=1e-5,
                               atol=1e-5)


def test_the_training_ir_of_a_training_batch_norm_is_refused_naming_the_fix() -> None:
    """There torch writes the running statistics in place (``batch_norm`` and ``add_``); the
    decomposed program, the default, returns them."""
    module = nn.Sequential(nn.BatchNorm2d(3)).train()
    with pytest.raises(InPlaceMutationError, match="add_"):
        torch_import.load(module, (torch.randn(2, 3, 4, 4),), decompose=False)
    class Functional(nn.Module):  # F.batch_norm on buffers: no counter's add_ first
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("mean", torch.zeros(3))
            self.register_buffer("var", torch.ones(3))

        def forward(self, x: Any) -> Any:
            return nn.functional.batch_norm(x, self.mean, self.var, training=True)

    with pytest.raises(UnmappedOpError, match="decompose=True"):
        torch_import.load(Functional(), (torch.randn(2, 3, 4, 4),), decompose=False)
    im = torch_import.export(Functional(), (x := torch.randn(2, 3, 4, 4),))
    reference = Functional()
    y = reference(x)
    values = run_serial(im.graph, im.feeds(x))
    np.testing.assert_allclose(values[im.outputs[0]], y.numpy(), rtol=1e-5, atol=1e-5)
    for b in ("mean", "var"):
        np.testing.assert_allclose(values[im.updates[b]], getattr(reference, b).numpy(),
                                   rtol=1e-6, atol=1e-6)
