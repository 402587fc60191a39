"""A user's own scorer, loaded by import path ``tests.export.scorers:first_letter_right`` in the tests."""


def first_letter_right(prompts, completions, answer, **_):
    """1 when the answer starts with the expected answer's first letter, 0 when not, None for an empty answer."""
    return [None if not c else float(c[:1] == a[:1]) for c, a in zip(completions, answer)]
