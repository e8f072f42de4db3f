"""A .pt2 whose outputs are a pytree class this process has not registered (a Hugging Face
``ModelOutput`` when transformers is not imported) loads, read by the names of its fields; a
class that cannot be read so is named with the fix (issue 26, item 6)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="needs the torch extra (make test installs it)")
from torch.utils import _pytree as pytree  # noqa: E402

from spmdrules.importers import sources  # noqa: E402
from spmdrules.importers.errors import ImporterError, UnsafeArchiveError  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


class Out(dict[str, Any]):
    """A library's output class: a dict of named tensors, a pytree node while registered."""


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> Out:
        y = self.fc(x)
        return Out(logits=y, hidden=torch.relu(y))


def _save(tmp_path: Path, name: str, to_context: Any = json.dumps) -> Path:
    """Export ``Net`` with ``Out`` registered under ``name``, save it, and unregister ``Out``:
    the loading process knows no such class, as a process that has not imported its library."""
    pytree.register_pytree_node(
        Out, lambda d: (list(d.values()), list(d)), lambda vs, ks: Out(zip(ks, vs, strict=True)),
        serialized_type_name=name, to_dumpable_context=to_context,
        from_dumpable_context=json.loads)
    try:
        path = tmp_path / "net.pt2"
        torch.export.save(torch.export.export(Net(), (torch.randn(2, 4),)), str(path))
    finally:
        pytree._deregister_pytree_node(Out)
    return path


@pytest.fixture
def unregistered() -> Iterator[None]:
    yield
    assert Out not in pytree.SUPPORTED_NODES


def test_outputs_of_an_unregistered_class_are_read_by_their_fields(tmp_path: Path,
                                                                   unregistered: None) -> None:
    """torch.export.load failed: "Deserializing mylib.outputs.Out in pytree is not
    registered"."""
    g = sources.read(_save(tmp_path, "mylib.outputs.Out"))
    assert sorted(op.name for op in g.ops if op.type == "assign") == ["hidden", "logits"]
    assert "mylib.outputs.Out" not in pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE  # nothing is left


def test_a_context_that_names_no_fields_is_refused_naming_the_class_and_the_fix(
        tmp_path: Path, unregistered: None) -> None:
    path = _save(tmp_path, "mylib.outputs.Odd", lambda keys: json.dumps({"k": keys}))
    with pytest.raises(ImporterError, match=r"output class mylib\.outputs\.Odd is not registered"
                                            r".*import the library that defines it"):
        sources.read(path)


def test_a_spec_context_that_would_import_a_module_is_refused(tmp_path: Path,
                                                              unregistered: None) -> None:
    """torch's reader imports the module an ``__enum__`` context names, whatever it is."""
    path = _save(tmp_path, "mylib.outputs.Enum", lambda keys: json.dumps(
        [{"__enum__": True, "fqn": "antigravity:Fly", "name": "x"}]))
    with pytest.raises(UnsafeArchiveError, match="context names an enum"):
        sources.read(path)
    assert "antigravity" not in sys.modules


def test_a_hugging_face_export_imports_from_the_command_line(tmp_path: Path) -> None:
    """The issue's case: ``spmdrules import`` in a fresh process (transformers not imported, so
    its output classes are not registered) of a LLaMA saved by torch.export.save."""
    from hf_models import small

    m = small("llama", layers=1).eval()
    src, out = tmp_path / "llama.pt2", tmp_path / "llama.json"
    torch.export.save(torch.export.export(m, (torch.randint(0, 64, (2, 8)),)), str(src))
    run = subprocess.run([sys.executable, "-m", "spmdrules.cli", "import", str(src), "-o",
                          str(out)], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "wrote" in run.stdout
    doc = json.loads(out.read_text())
    assert [o["name"] for o in doc["ops"] if o["type"] == "assign"] == ["logits"]
