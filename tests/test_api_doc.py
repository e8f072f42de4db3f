"""docs/api.md, the public contract inside the repository: it says what the project's contract
says, and every name its outlines use exists.

Its code blocks are outlines (``x``, ``module``, ``P_y`` stand for the reader's objects), so they
are not run; instead each is read with ``ast``: every import must import, and every attribute
(``sr.ProcessMesh``, ``mesh.process_ids``, ``rule.infer_reverse``, ``lin.weight_grad``) must
exist on what it is read from. What a variable holds is taken from the class it was built from,
or from the return annotation of the function that made it."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import os
import typing
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "api.md"
#: where the contract lives beside a checkout: the workspace's spec/API.md
CONTRACTS = [Path(p) for p in [os.environ.get("SPMDRULES_CONTRACT", "")] if p] + [
    ROOT.parent / "shared" / "spec" / "API.md", ROOT.parents[1] / "shared" / "spec" / "API.md"]
#: the page's words where the contract points outside the repository: (contract, page)
LINKS = [
    ("`../conformance/README.md` has the table.", "`sr.get_rule(name).signature()` shows a rule's."),
    ("Reads case files in the format of `../conformance/README.md`.",
     "Reads case files in the format of Paddle's recorded cases ([conformance.md](conformance.md))."),
    ("The examples in `../seeds/000_*.txt` and `../seeds/001_*.txt` run as written, with numpy "
     "arrays in place of torch tensors.",
     "The examples of seeds 000 and 001 (DistDL's reduction and linear layer) run as written, "
     "with numpy arrays in place of torch tensors (`examples/seed000_sum_reduce.py`, "
     "`examples/seed001_linear.py`)."),
]
NOTE = "This page is the repository's copy of the project's contract"
#: the page's last section: the repository's own public names, which the contract does not list
OWN = "\n\n## Beyond the contract\n"


def test_the_page_says_what_the_contract_says() -> None:
    contract = next((p for p in CONTRACTS if p.is_file()), None)
    if contract is None:
        pytest.skip("the workspace's spec/API.md is not beside this checkout (a clone elsewhere); "
                    "set SPMDRULES_CONTRACT to its path")
    page = PAGE.read_text()
    assert page.count(OWN) == 1
    page = page.split(OWN)[0] + "\n"
    for theirs, ours in LINKS:
        assert page.count(ours) == 1, ours
        page = page.replace(ours, theirs)
    paragraphs = page.split("\n\n")
    [note] = [p for p in paragraphs if p.startswith(NOTE)]
    paragraphs.remove(note)
    assert "\n\n".join(paragraphs) == contract.read_text()


def _blocks() -> list[str]:
    text = PAGE.read_text()
    return [b.split("```", 1)[0] for b in text.split("```python\n")[1:]]


def _module(name: str) -> ModuleType | None:
    """The module ``name`` of spmdrules or numpy, imported; another is only looked for (importing
    ``mpi4py.MPI`` would start MPI in the test process)."""
    if name.split(".")[0] in ("spmdrules", "numpy"):
        return importlib.import_module(name)
    assert importlib.util.find_spec(name) is not None, f"no module {name}"
    return None


def _return_type(fn: Any) -> Any:
    try:
        hint = typing.get_type_hints(fn).get("return")
    except Exception:
        return None
    return hint if inspect.isclass(hint) else None


def _has(owner: Any, attr: str) -> bool:
    """Whether ``attr`` is a member of the module or class ``owner``, or an attribute its
    instances get (a dataclass field, a slot, or set as ``self.attr`` in a method)."""
    if hasattr(owner, attr):
        return True
    if not inspect.isclass(owner):
        return False
    for cls in owner.__mro__:
        if attr in getattr(cls, "__dataclass_fields__", {}) or attr in getattr(
                cls, "__slots__", ()) or attr in getattr(cls, "__annotations__", {}):
            return True
        try:
            source = inspect.getsource(cls)
        except (OSError, TypeError):
            continue
        if f"self.{attr} =" in source or f"self.{attr}: " in source:
            return True
    return False


#: what an expression stands for: ("object", a module, class or function itself),
#: ("instance", a class) or ("method", a function read from an instance)
Kind = tuple[str, Any] | None


class _Reader(ast.NodeVisitor):
    """Follows the names of a block: what each variable holds, and every attribute read."""

    def __init__(self) -> None:
        self.env: dict[str, Kind] = {}
        self.checked: list[str] = []
        self.missing: list[str] = []

    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            self.env[a.asname or a.name] = ("object", _module(a.name))
            self.checked.append(a.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        assert node.module is not None
        module = _module(node.module)
        if module is None:
            return
        for a in node.names:
            if not hasattr(module, a.name):
                importlib.import_module(f"{node.module}.{a.name}")  # a submodule
            self.env[a.asname or a.name] = ("object", getattr(module, a.name))
            self.checked.append(f"{node.module}.{a.name}")

    def visit_Assign(self, node: ast.Assign) -> None:
        self.visit(node.value)
        for target in node.targets:
            if isinstance(target, ast.Name):
                self.env[target.id] = self.kind(node.value)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self.visit(node.value)
        owner = self.kind(node.value)
        if owner is None or owner[1] is None or owner[0] == "method":
            return
        what, obj = owner
        found = hasattr(obj, node.attr) if what == "object" else _has(obj, node.attr)
        name = f"{getattr(obj, '__name__', obj)}.{node.attr}"
        (self.checked if found else self.missing).append(name)

    def kind(self, node: ast.expr) -> Kind:
        if isinstance(node, ast.Name):
            return self.env.get(node.id)
        if isinstance(node, ast.Attribute):
            owner = self.kind(node.value)
            if owner is None or owner[1] is None or owner[0] == "method":
                return None
            what, obj = owner
            if what == "object":
                return ("object", getattr(obj, node.attr, None))
            member = inspect.getattr_static(obj, node.attr, None)
            if isinstance(member, property):
                return ("instance", _return_type(member.fget))
            return ("method", member) if callable(member) else None
        if isinstance(node, ast.Call):
            made = self.kind(node.func)
            if made is None or made[1] is None:
                return None
            what, obj = made
            if what == "instance":
                return ("instance", _return_type(obj.__call__))
            if inspect.isclass(obj):
                return ("instance", obj)
            return ("instance", _return_type(obj)) if callable(obj) else None
        return None


def test_every_name_on_the_page_exists() -> None:
    """The blocks are read in order, as one program (the second uses the first's ``sr``)."""
    reader = _Reader()
    for i, block in enumerate(_blocks()):
        before = len(reader.checked)
        reader.visit(ast.parse(block))
        assert reader.missing == [], f"docs/api.md block {i} names what does not exist"
        assert len(reader.checked) - before >= 5, reader.checked[before:]  # followed, not skipped
