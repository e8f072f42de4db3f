"""What README.md and the docs say about the project itself stays true (issue 23, "Also"):
install commands that work from a clone, no pointer outside the repository, the demo as it runs,
and the conformance case format as the shipped cases are."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import spmdrules
from spmdrules import demo

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SOURCES = sorted(Path(spmdrules.__file__).parent.rglob("*.py"))


def test_every_install_command_works_from_a_clone() -> None:
    """spmdrules is on no package index: an extra is installed from the checkout."""
    wrong = [f"{p.relative_to(ROOT.parent)}: {m.group(0)}"
             for p in [*PAGES, *SOURCES]
             for m in re.finditer(r"pip install[^`\n]*spmdrules\[|install spmdrules\[", p.read_text())]
    assert wrong == []


def test_no_page_points_outside_the_repository() -> None:
    """Every relative path a page names, as a link or in backticks, stays inside the checkout,
    and every link leads to a file that exists."""
    outside, broken = [], []
    for page in PAGES:
        text = page.read_text()
        for path in re.findall(r"`(\.\./[^`\s]+)`", text) + re.findall(r"\]\(([^)#\s]+)\)", text):
            if re.match(r"[a-z]+:", path):
                continue  # a URL
            target = (page.parent / path).resolve()
            if not target.is_relative_to(ROOT):
                outside.append(f"{page.name}: {path}")
            elif not target.exists():
                broken.append(f"{page.name}: {path}")
    assert outside == [] and broken == []
    assert "[docs/api.md](docs/api.md)" in (ROOT / "README.md").read_text()


def test_the_demo_section_names_every_model_the_demo_runs() -> None:
    text = (ROOT / "docs" / "execution.md").read_text()
    section = text.split("## The demo\n", 1)[1].split("\n## ", 1)[0]
    for label, _, _ in demo.models(demo.demo_mesh()):
        model = re.split(r",| \(", label)[0]  # "LLaMA decoder (GQA, ...), 2 layers" -> "LLaMA decoder"
        assert model in section, f"docs/execution.md 'The demo' does not mention the {model}"


def test_the_case_format_example_is_a_shipped_case() -> None:
    text = (ROOT / "docs" / "conformance.md").read_text()
    [block] = re.findall(r"^```json\n(.*?)^```", text, re.S | re.M)
    shown = json.loads(block)
    op = shown["op"]
    with gzip.open(ROOT / "spmdrules" / "conformance" / "data" / f"{op}.jsonl.gz", "rt") as f:
        shipped = [json.loads(line) for line in f]
    assert shown in shipped


def test_every_test_the_security_page_names_exists() -> None:
    """docs/security.md's table of hostile inputs names the tests that try them: a row whose test
    is renamed or removed must not go on claiming a defence."""
    text = (ROOT / "docs" / "security.md").read_text()
    named: list[tuple[str, str]] = []
    for row in text.splitlines():
        file = None
        for m in re.finditer(r"`(tests/[\w/]+\.py)?::(test_\w+)`", row):
            file = m.group(1) or file
            assert file is not None, row
            named.append((file, m.group(2)))
    assert len(named) >= 30
    missing = [f"{f}::{t}" for f, t in named
               if not re.search(rf"^def {t}\(", (ROOT / f).read_text(), re.MULTILINE)]
    assert missing == []
