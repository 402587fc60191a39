"""Rows of the task honing generates (``generated:reverse``) as a data set for lm-eval's ``custom_dataset``."""

import datasets

from honing.data.generated.tasks import generate_rows


def load(samples=200, seed=1, **_):
    """The held-out split of the SFT example: ``generated:reverse?samples=200&seed=1``, as question / answer."""
    rows = generate_rows("reverse", samples=int(samples), seed=int(seed))
    return {
        "test": datasets.Dataset.from_list(
            [{"question": r["messages"][0]["content"], "answer": r["messages"][1]["content"]} for r in rows]
        )
    }
