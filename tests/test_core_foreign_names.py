"""The core names no other system in its code (issue 46): the folders that have been moved to the edge stay clean, so
a new import of an interop module or an identifier naming VeOmni, OLMo-core, Oumi, olmOCR or verl fails here, and the
counter itself tells a name from an English word that holds its letters."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import core_foreign_names  # noqa: E402

#: the core folders that name no other system today (config/ since PDF-page data became data.pdf_pages)
CLEAN = (
    "train",
    "methods",
    "data",
    "models",
    "rl",
    "optim",
    "run",
    "evaluate",
    "export",
    "infer",
    "plan",
    "recipes",
    "config",
)


def test_the_clean_core_folders_name_no_other_system_in_their_code():
    found = core_foreign_names.foreign_names(str(REPO))
    assert [path for path in found if path.split("/")[1] in CLEAN] == []


def test_a_name_counts_at_a_word_part_start_and_not_inside_a_word(tmp_path):
    package = tmp_path / "honing" / "data"
    package.mkdir(parents=True)
    (package / "named.py").write_text("from x import is_verl_signature\nclass VeOmniStep: ...\n")
    word = 'overlong = "verl"  # verl in a comment and a string\n"""olmOCR in a docstring"""\n'
    (package / "word.py").write_text(word)
    (tmp_path / "honing" / "interop").mkdir()
    (tmp_path / "honing" / "interop" / "verl.py").write_text("import verl\n")  # the edge may name it
    (tmp_path / "honing" / "cli.py").write_text("import verl\n")  # the CLI dispatches to every surface
    assert core_foreign_names.foreign_names(str(tmp_path)) == {"honing/data/named.py": ["VeOmni", "verl"]}
    assert list(core_foreign_names.foreign_strings(str(tmp_path))) == ["honing/data/word.py"]
