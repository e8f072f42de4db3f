"""No module reads another's private names (issue 25 item 4: ruff's SLF001, 86 findings before).

Beside the layering test: the layers say which modules may import which, this says that what they
read of each other is public. ruff's own config selects SLF001 for the package; the first test
pins that the config keeps selecting it (and keeps the exemption to the tests), the second runs it.
The values the rule loop reads of a DistAttr are public read-only slots, not properties.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from spmdrules import DistAttr, ProcessMesh
from spmdrules.graph.graph import Graph

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_config_selects_private_member_access_outside_the_tests() -> None:
    lint = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]["lint"]
    assert "SLF001" in lint["select"] or "SLF" in lint["select"]
    assert "SLF001" not in lint.get("ignore", [])
    exempt = {glob for glob, codes in lint.get("per-file-ignores", {}).items()
              if "SLF001" in codes or "SLF" in codes}
    assert exempt == {"tests/**"}


def test_no_private_member_access_in_the_package() -> None:
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed (it is in the test extra)")
    run = subprocess.run(
        [ruff, "check", "--select", "SLF001", "--output-format", "concise", "--no-cache",
         "spmdrules", "rules", "bench", "examples"],
        cwd=ROOT, capture_output=True, text=True, check=False)
    assert run.returncode == 0, "read a public name, or say why not with a noqa:\n" + run.stdout


def test_dist_attr_fields_are_public_read_only_slots() -> None:
    mesh = ProcessMesh([[0, 1], [2, 3]], dim_names=["dp", "mp"])
    a = DistAttr(mesh, [0, -1], {1: "sum"})
    assert (a.multi_dims_mapping, a.partial_items, a.mask_items) == (((0,), ()), ((1, "sum"),), ())
    for name in ("multi_dims_mapping", "partial_items", "mask_items"):
        # slots (member descriptors), not properties: the rule loop reads them per call
        assert type(vars(DistAttr)[name]).__name__ == "member_descriptor"
        with pytest.raises(AttributeError, match="immutable"):
            setattr(a, name, ())
    masked = DistAttr(mesh, [-1, -1], {1: "sum"}, masks={1: 0})
    assert masked.mask_items == ((1, 0),) and masked.without_masks().mask_items == ()


def test_graph_gives_its_tensors_by_name_read_only() -> None:
    with Graph("g") as g:
        x = g.input("x", [4, 8])
        y = x + x
    names = g.tensors_by_name
    assert names["x"] is x and names[y.name] is y and list(names) == ["x", y.name]
    with pytest.raises(TypeError):
        names["z"] = x  # type: ignore[index]
    assert x.readers == [y.producer] and g.consumers(x) == (y.producer,)
