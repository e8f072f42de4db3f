"""Auto plans of CNNs (issue 27): the U-Net's plan completes into the layouts its solver priced
(a transposed conv fed a split it refuses, a conv given H and C_out on one mesh dim), so its
prediction is the solver's and at most every hand plan's; on a small batch of large images the
plan splits the images spatially."""

from __future__ import annotations

from typing import Any

import pytest
from cnn_models import unet

import spmdrules as sr
from spmdrules import auto
from spmdrules import plan as hand
from spmdrules.auto import cost as cm
from spmdrules.auto import solver

torch = pytest.importorskip("torch")


def _unet(batch: int, image: int) -> Any:
    from spmdrules.importers import torch as torch_import

    x = torch.randn(batch, 3, image, image, generator=torch.Generator().manual_seed(0))
    return torch_import.export(unet(), (x,), spatial_sharding=True).graph


def test_the_unet_s_auto_plan_completes_to_its_solver_s_price_and_beats_each_hand_plan() -> None:
    g = _unet(8, 32)
    opts = cm.Options()
    one = sr.ProcessMesh([0, 1, 2, 3], dim_names=["dp"])
    two = sr.ProcessMesh([[0, 1], [2, 3]], dim_names=["dp", "h"])
    hands = {
        "dp": auto.evaluate(g, one, {"x": hand.DataParallel(dim="dp")}, opts),
        "dp+spatial": auto.evaluate(g, two, {"x": hand.Spec(("dp", None, "h", None))}, opts),
    }
    p = auto.plan(g, 4, memory_per_rank="64GiB", options=opts)
    priced = solver.solve(g, p.mesh, float("inf"), opts).time
    # what completion runs is what the solver priced: no op gathered and sliced back
    assert p.predicted.time == pytest.approx(priced, rel=1e-9)
    for name, e in hands.items():
        assert p.predicted.time <= e.time, (name, p.predicted.time, e.time)
    for alt in p.alternatives:  # every mesh's plan, not only the winner's
        assert alt.estimate.time == pytest.approx(
            solver.solve(g, alt.mesh, float("inf"), opts).time, rel=1e-9)


def test_a_small_batch_of_large_images_is_split_spatially() -> None:
    g = _unet(2, 64)  # 2 images over 4 processes: the batch alone cannot divide the work
    p = auto.plan(g, 4, memory_per_rank="64GiB")
    # the batch divides only 2 of the processes: H or W is split too (with the halos priced,
    # the plan splits the 2 images over one mesh dim and H or W over the other, not H and W)
    _, c, h, w = p["x"].style.spec
    assert c is None and (h, w) != (None, None), p["x"].style.spec
    split = [name for name, tr in p.items()
             if len(tr.style.spec) == 4 and tr.style.spec[2:] != (None, None)]
    assert len(split) > len(p) // 4  # the activations of every level, not the input alone
    dp = auto.evaluate(g, sr.ProcessMesh([0, 1], dim_names=["dp"]),
                       {"x": hand.DataParallel(dim="dp")}, cm.Options())
    assert p.predicted.time < dp.time  # two processes of data parallelism do less
