"""The layering of the package: imports go one way only, and no modules import each other.

The import graph is read with ``ast`` from the installed package's files (the ``rules/`` folder as
``spmdrules.rules``). Every import counts: at module level, inside functions, under
``TYPE_CHECKING``, and ``importlib.import_module("...")`` with a literal name. A package's
``__init__`` running before its modules is not an edge (Python does that for every import).

The layers, lowest first (``docs/architecture.md``): core, runtime (which may import only core),
engine, rules, graph, then plan, importers and completion (which do not import each other),
auto (auto-sharding: it plans, and reads the rules and the reshard planner), execution, then
verify and conformance (which do not import each other), then the top package's own modules
(the public face, cli, demo). A module may import its own layer and the layers below it.

The second half checks the other axis of the layout: one op family, one name in every layer. An
op's shape rule, kernel, VJP, case generator and deviations live in modules named after the
``rules/`` module that registers its rule.
"""

from __future__ import annotations

import ast
import functools
import pkgutil
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import networkx as nx
import pytest
import spmdrules.rules

import spmdrules
from spmdrules.conformance import deviations as deviation_modules
from spmdrules.conformance.deviation import deviations
from spmdrules.execution import kernels, vjp
from spmdrules.execution.local import get_kernel, get_vjp, list_kernels, list_vjps
from spmdrules.graph import shapes
from spmdrules.graph.shapes.shape_rule import SHAPE_RULES
from spmdrules.verify import cases
from spmdrules.verify.cases.drawing import FAMILIES

#: layer -> rank; a module may import modules of a lower rank, or of its own layer
RANKS: dict[str, int] = {
    "core": 0,
    "runtime": 1,
    "engine": 2,
    "rules": 3,
    "graph": 4,
    # plans annotate graphs, importers build them: beside completion, and none imports another
    "plan": 5,
    "importers": 5,
    "completion": 5,
    # auto-sharding reads the rules' strategies and the planner's prices, and plans
    "auto": 6,
    "execution": 7,
    "verify": 8,
    "conformance": 8,
    "top": 9,
}
#: the longest module files may be
MAX_LINES = 500


@dataclass(frozen=True)
class Tree:
    """The package's modules: dotted name -> file."""

    modules: dict[str, Path]

    @classmethod
    def of(cls, package_dir: Path, rules_dir: Path) -> Tree:
        modules: dict[str, Path] = {}
        for root, name in ((package_dir, "spmdrules"), (rules_dir, "spmdrules.rules")):
            for path in sorted(root.rglob("*.py")):
                parts = [name, *path.relative_to(root).with_suffix("").parts]
                if parts[-1] == "__init__":
                    parts.pop()
                dotted = ".".join(parts)
                if name == "spmdrules" and dotted.startswith("spmdrules.rules"):
                    continue  # an installed copy of rules/: read from rules_dir
                modules[dotted] = path
        return cls(modules)

    @classmethod
    def installed(cls) -> Tree:
        return cls.of(Path(spmdrules.__file__).parent, Path(spmdrules.rules.__file__).parent)

    def is_package(self, module: str) -> bool:
        return self.modules[module].name == "__init__.py"

    def resolve(self, name: str) -> str | None:
        """The module ``name`` names, or its nearest enclosing module of the package."""
        while name and name not in self.modules:
            name = name.rpartition(".")[0]
        return name or None


@functools.cache
def _import_statements(source: str, package: str) -> tuple[tuple[str, str | None, int], ...]:
    """(origin, imported name or None, line) of every import in ``source``, relative imports made
    absolute from ``package``. Cached by source text: parsing is the check's whole cost, and the
    planted copies repeat the installed package's sources but for one file."""
    found: list[tuple[str, str | None, int]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(alias.name, None, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                origin = ".".join([*base, *([node.module] if node.module else [])])
            else:
                origin = node.module or ""
            found += [(origin, alias.name, node.lineno) for alias in node.names]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.append((node.args[0].value, None, node.lineno))
    return tuple(found)


def _imported_names(tree: Tree, module: str) -> Iterator[tuple[str, int]]:
    """(absolute dotted name, line) of everything ``module`` imports."""
    source = tree.modules[module].read_text()
    package = module if tree.is_package(module) else module.rpartition(".")[0]
    for origin, name, line in _import_statements(source, package):
        if name is None:
            yield origin, line
        else:
            # `from pkg import name`: the submodule pkg.name if there is one, else pkg
            sub = f"{origin}.{name}"
            yield (sub if sub in tree.modules else origin), line


def import_graph(tree: Tree) -> nx.DiGraph:
    """Module -> module edges inside the package, each with the line of its first import."""
    g = nx.DiGraph()
    g.add_nodes_from(tree.modules)
    for module in tree.modules:
        for name, line in _imported_names(tree, module):
            if not (name == "spmdrules" or name.startswith("spmdrules.")):
                continue
            target = tree.resolve(name)
            if target is not None and target != module and not g.has_edge(module, target):
                g.add_edge(module, target, line=line)
    return g


def layer_of(module: str) -> str | None:
    parts = module.split(".")
    if len(parts) == 1 or parts[1] in ("cli", "demo", "phases", "registration"):
        return "top"
    return parts[1] if parts[1] in RANKS else None


def violations(tree: Tree) -> list[str]:
    """Every upward or sideways import, every module outside the layers, and every cycle."""
    g = import_graph(tree)
    out = [f"{m}: in no layer; put it in one of {sorted(RANKS)}" for m in tree.modules
           if layer_of(m) is None]
    for a, b, data in g.edges(data=True):
        la, lb = layer_of(a), layer_of(b)
        if la is None or lb is None or la == lb:
            continue
        upward = RANKS[lb] >= RANKS[la]
        if la == "runtime" and lb != "core":
            upward = True
        if upward:
            out.append(f"{tree.modules[a].name}:{data['line']}: {a} ({la}) imports {b} ({lb})")
    for cycle in sorted(sorted(c) for c in nx.strongly_connected_components(g) if len(c) > 1):
        out.append("import cycle: " + " <-> ".join(cycle))
    return out


def longest_chain(tree: Tree) -> list[str]:
    """The longest path of the import graph (modules a call can cross, lowest last)."""
    return list(nx.dag_longest_path(import_graph(tree)))


# ---- the package -------------------------------------------------------------------------------
def test_imports_go_one_way_without_cycles() -> None:
    assert violations(Tree.installed()) == []


def test_no_module_is_too_long() -> None:
    tree = Tree.installed()
    lines = {m: len(p.read_text().splitlines()) for m, p in tree.modules.items()}
    long = {m: n for m, n in lines.items() if n > MAX_LINES}
    assert long == {}, f"modules over {MAX_LINES} lines; split them along their jobs"


def test_the_rules_know_nothing_of_the_conformance_data() -> None:
    g = import_graph(Tree.installed())
    reached = nx.descendants(g, "spmdrules.rules")
    assert not [m for m in reached if m.startswith("spmdrules.conformance")]


@pytest.mark.parametrize("entry", ["spmdrules.execution.rank_script",
                                   "spmdrules.execution.mpi_worker"])
def test_an_mpi_rank_loads_no_completion_layer(entry: str, tmp_path: Path) -> None:
    # every rank of every mpiexec job imports its entry module, and with it the top package: the
    # top package names completion's warning lazily, so a rank does not pay for that layer
    code = f"import sys, {entry}; print(sorted(m for m in sys.modules if 'completion' in m))"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=tmp_path)
    assert run.stdout.strip() == "[]", run.stdout
    assert issubclass(spmdrules.DroppedSplitWarning, UserWarning)
    assert "DroppedSplitWarning" in dir(spmdrules)



def test_an_mpi_rank_s_work_loads_no_networkx(tmp_path: Path) -> None:
    # what a rank of run_mpi imports to run its program (mpi_worker.main): networkx, about a
    # third of a rank's start-up CPU, is for sorting and planning graphs, which a rank does not
    code = ("import sys\n"
            "from spmdrules.execution.mpi import MPIExecutor\n"
            "from spmdrules.execution.mpi_faults import watched\n"
            "print(sorted(m for m in sys.modules if m.partition('.')[0] == 'networkx'))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=tmp_path)
    assert run.stdout.strip() == "[]", run.stdout

# ---- the check itself can fail ------------------------------------------------------------------
@pytest.fixture
def copy(tmp_path: Path) -> Tree:
    """A copy of the installed package, to plant violations in."""
    tree = Tree.installed()
    pkg, rules = tmp_path / "spmdrules", tmp_path / "rules"
    shutil.copytree(Path(spmdrules.__file__).parent, pkg,
                    ignore=shutil.ignore_patterns("__pycache__", "*.gz"))
    shutil.copytree(Path(spmdrules.rules.__file__).parent, rules,
                    ignore=shutil.ignore_patterns("__pycache__"))
    assert len(Tree.of(pkg, rules).modules) == len(tree.modules)
    return Tree.of(pkg, rules)


def _plant(tree: Tree, *plants: tuple[str, str]) -> set[str]:
    """Append each (module, code) and return the violations that appear."""
    before = set(violations(tree))
    for module, code in plants:
        path = tree.modules[module]
        path.write_text(path.read_text() + "\n" + code + "\n")
    return set(violations(tree)) - before


def _without_lines(found: set[str]) -> set[str]:
    return {v.split(": ", 1)[-1] for v in found}


def test_a_planted_upward_import_is_caught(copy: Tree) -> None:
    found = _plant(copy, ("spmdrules.core.mesh", "from spmdrules.graph.graph import Graph"))
    line = len(copy.modules["spmdrules.core.mesh"].read_text().splitlines())
    # (with the cycle it closes: graph imports core)
    assert f"mesh.py:{line}: spmdrules.core.mesh (core) imports spmdrules.graph.graph (graph)" in (
        found)


def test_an_upward_import_hidden_in_a_function_or_type_check_is_caught(copy: Tree) -> None:
    found = _plant(
        copy,
        ("spmdrules.engine.registry", "def _late() -> None:\n    import spmdrules.completion.cost"),
        ("spmdrules.graph.graph", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                  "    from spmdrules.execution.lowering import Program"),
    )
    assert any("spmdrules.engine.registry (engine) imports spmdrules.completion.cost" in v
               for v in found)
    assert any("spmdrules.graph.graph (graph) imports spmdrules.execution" in v for v in found)


def test_an_import_by_name_is_caught(copy: Tree) -> None:
    found = _plant(copy, ("spmdrules.core.attr",
                          'import importlib\nimportlib.import_module("spmdrules.conformance.runner")'))
    edge = "spmdrules.core.attr (core) imports spmdrules.conformance.runner (conformance)"
    assert edge in _without_lines(found)


def test_the_runtime_may_import_only_core(copy: Tree) -> None:
    found = _plant(copy, ("spmdrules.runtime.partition", "from spmdrules.engine import einsum"))
    edge = "spmdrules.runtime.partition (runtime) imports spmdrules.engine.einsum (engine)"
    assert edge in _without_lines(found)


def test_verify_and_conformance_do_not_import_each_other(copy: Tree) -> None:
    found = _plant(copy, ("spmdrules.conformance.runner", "from spmdrules.verify import cases"))
    edge = "spmdrules.conformance.runner (conformance) imports spmdrules.verify.cases (verify)"
    assert edge in _without_lines(found)


def test_a_planted_cycle_inside_a_layer_is_caught(copy: Tree) -> None:
    found = _plant(copy, ("spmdrules.core.mesh", "from spmdrules.core import attr"))
    assert found == {"import cycle: spmdrules.core.attr <-> spmdrules.core.mesh"}


def test_a_planted_copy_is_checked_by_parsing_only_the_planted_file(copy: Tree) -> None:
    # the planted-violation tests each check a whole copy of the package twice: its sources are
    # the installed ones but for the planted file, whose parse alone is new
    violations(copy)
    misses = _import_statements.cache_info().misses
    found = _plant(copy, ("spmdrules.engine.registry", "from spmdrules.plan import styles"))
    assert found and _import_statements.cache_info().misses == misses + 1


def test_a_module_outside_the_layers_is_caught(copy: Tree, tmp_path: Path) -> None:
    before = set(violations(copy))
    (tmp_path / "spmdrules" / "helpers.py").write_text("X = 1\n")
    tree = Tree.of(tmp_path / "spmdrules", tmp_path / "rules")
    assert set(violations(tree)) - before == {
        f"spmdrules.helpers: in no layer; put it in one of {sorted(RANKS)}"}


# ---- one op family, one name in every layer -------------------------------------------------------
RULE_FAMILIES = {m.name for m in pkgutil.iter_modules(spmdrules.rules.__path__)}
#: what each per-family package holds besides its families: the contract, or the case drawing
CONTRACTS = {"shape_rule", "case", "drawing"}


def _family_of(fn: Callable[..., object]) -> str:
    return fn.__module__.rsplit(".", 1)[-1]


def test_a_rule_s_family_is_the_module_that_registers_it() -> None:
    for op in spmdrules.list_rules():
        rule = spmdrules.get_rule(op)
        assert rule.family in RULE_FAMILIES, (op, rule.family)
        assert _module_of_rule(op) == f"spmdrules.rules.{rule.family}", op


def _module_of_rule(op: str) -> str:
    fn = spmdrules.get_rule(op)._fwd.fn
    while hasattr(fn, "func") or hasattr(fn, "__wrapped__"):  # a partial, or a described rule
        fn = getattr(fn, "func", None) or fn.__wrapped__
    return fn.__module__


@pytest.mark.parametrize(
    ("what", "table", "lookup"),
    [
        ("shape rule", SHAPE_RULES, lambda op: SHAPE_RULES[op].shape),
        ("kernel", list_kernels(), get_kernel),
        ("vjp", list_vjps(), get_vjp),
    ],
)
def test_every_piece_of_an_op_is_in_its_family_s_module(
    what: str, table: Iterable[str], lookup: Callable[[str], Callable[..., object]]
) -> None:
    registered = set(spmdrules.list_rules())
    ops = [op for op in table if op in registered]
    assert ops, what
    wrong = {op: (_family_of(lookup(op)), spmdrules.get_rule(op).family) for op in ops
             if _family_of(lookup(op)) != spmdrules.get_rule(op).family}
    assert not wrong, f"{what} outside its family's module: {wrong}"


def test_shape_rows_name_their_family() -> None:
    assert all(row.family == _family_of(row.shape) for row in SHAPE_RULES.values())


def test_case_generators_are_keyed_and_placed_by_family() -> None:
    assert set(FAMILIES) <= RULE_FAMILIES
    for family, generator in FAMILIES.items():
        assert _family_of(generator) == family, (family, generator)
    covered = {spmdrules.get_rule(op).family for op in spmdrules.list_rules()} - {"generic"}
    assert covered <= set(FAMILIES)


def test_deviations_live_in_their_family_s_module() -> None:
    for dev in deviations():
        family = _family_of(dev.predicate)
        assert family in RULE_FAMILIES, (dev.name, family)
        registered = set(spmdrules.list_rules())
        families = {spmdrules.get_rule(op).family for op in dev.ops if op in registered}
        assert families == {family}, dev


@pytest.mark.parametrize("package", [shapes, kernels, vjp, cases, deviation_modules])
def test_per_family_packages_have_no_stray_module(package: ModuleType) -> None:
    names = {m.name for m in pkgutil.iter_modules(package.__path__)}
    assert names - CONTRACTS <= RULE_FAMILIES, names - CONTRACTS - RULE_FAMILIES
