"""The counts of Oumi's published configs that the pages give (docs/coming-from.md's row, docs/foreign-configs.md's
"now" row) are the survey's (``python -m honing.interop.configs.survey``) over ``../shared/foreign-configs/oumi`` (not
part of the repository: skipped where absent): a page's number is never typed apart from what the survey counts."""

import re
from pathlib import Path

import pytest

from honing.interop.configs.survey import survey

ROOT = Path(__file__).resolve().parents[3]
FOREIGN = ROOT.parent / "shared" / "foreign-configs" / "oumi"


@pytest.fixture(scope="module")
def counts() -> tuple[int, int, int, int]:
    """(configs, translated, refused, tracebacks) of the survey of Oumi's published configs."""
    if not FOREIGN.is_dir():
        pytest.skip(f"{FOREIGN} is absent (the source systems' configs)")
    found = survey(FOREIGN)
    return found.total, len(found.translated), len(found.refused), len(found.tracebacks)


def test_the_coming_from_row_gives_the_surveys_counts(counts):
    page = (ROOT / "docs" / "coming-from.md").read_text(encoding="utf-8")
    row = re.search(
        r"Oumi's own published configs \((\d+) under `configs/recipes`\) \| (\d+) translate, (\d+) are refused by "
        r"name, (\d+) tracebacks",
        page,
    )
    assert row is not None, "docs/coming-from.md lost its row of Oumi's published configs"
    assert tuple(int(number) for number in row.groups()) == counts


def test_the_foreign_configs_pages_now_row_gives_the_surveys_counts(counts):
    page = (ROOT / "docs" / "foreign-configs.md").read_text(encoding="utf-8")
    row = re.search(r"\| Oumi `configs/recipes`, now \| (\d+) \| (\d+) \([\d.]+%\) \| (\d+) \| (\d+) \|", page)
    assert row is not None, "docs/foreign-configs.md lost its 'now' row"
    assert tuple(int(number) for number in row.groups()) == counts
