"""docs/architecture.md's generated blocks (the folder table and the numbers table) are what
``benchmarks/architecture_numbers.py --write`` writes for the code as it is: a change that moves a number, adds a folder
or drops a file fails here until the page is rewritten. The repeated-pairs row is the page's own (the tool takes
minutes): the script writes it with the day it counted."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import architecture_numbers  # noqa: E402
import architecture_page  # noqa: E402
from class_chains import chain_methods  # noqa: E402

PAGE = REPO / "docs" / "architecture.md"


def test_the_pages_generated_blocks_are_the_scripts_output():
    page = PAGE.read_text(encoding="utf-8")
    numbers = architecture_numbers.current()
    expected = architecture_numbers.generated_page(page, numbers, architecture_page.page_duplicates_row(page))
    for name in (architecture_page.FOLDERS, architecture_page.NUMBERS):
        assert architecture_page.block(page, name) == architecture_page.block(expected, name), (
            f"docs/architecture.md's {name} block is stale: run python benchmarks/architecture_numbers.py --write"
        )
    assert architecture_page.NO_LINE not in page, "a folder of honing/ has no line in docs/architecture.md's table"
    assert set(numbers["folders"]) == {path.name for path in (REPO / "honing").iterdir() if path.is_dir()} - {
        "__pycache__"
    }


def test_class_chains_follow_re_exports_and_leave_outside_bases_out(tmp_path):
    sources = {
        "honing/__init__.py": "",
        "honing/a/__init__.py": "from honing.a.base import Base\n",
        "honing/a/base.py": "import torch\nclass Base(torch.nn.Module):\n    def f(self): ...\n    def g(self): ...\n",
        "honing/b.py": "from honing.a import Base\nclass Child(Base):\n    def g(self): ...\n    def h(self): ...\n"
        "class Grand(Child):\n    async def k(self): ...\n",
    }
    modules = {}
    for relative, text in sources.items():
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text(text)
        modules[str(tmp_path / relative)] = ast.parse(text)
    chains = chain_methods(str(tmp_path), modules)
    assert chains == {"honing.a.base.Base": 2, "honing.b.Child": 3, "honing.b.Grand": 4}


def test_bare_any_counts_annotations_that_are_any_alone():
    module = ast.parse(
        "from typing import Any\n"
        "def f(a: Any, *b: Any, c: list[Any], **d: 'Any') -> Any:\n    e: Any = 1\n    g: Any | None = None\n"
    )
    assert architecture_numbers.bare_any_annotations({"m.py": module}) == 5  # a, b, d, the return, e
