import json

import pytest

from honing.data.generated.tasks import generate_rows, is_generated, materialize, parse_generated
from honing.errors import DataError


def test_rows_are_correct_conversations_and_seeded():
    rows = generate_rows("addition", samples=50, seed=0)
    assert len(rows) == 50 and rows == generate_rows("addition", samples=50, seed=0)
    assert rows != generate_rows("addition", samples=50, seed=1)
    for row in rows:
        roles = [m["role"] for m in row["messages"]]
        assert roles == ["user", "assistant"]
        question, answer = row["messages"][0]["content"], row["messages"][1]["content"]
        a, b = question.removeprefix("What is ").removesuffix("?").split(" + ")
        assert int(answer) == int(a) + int(b)
    for row in generate_rows("reverse", samples=20, seed=3):
        word = row["messages"][0]["content"].split(": ")[1]
        assert row["messages"][1]["content"] == word[::-1]
    for row in generate_rows("sort_digits", samples=20, seed=3):
        digits = row["messages"][0]["content"].split(": ")[1]
        assert row["messages"][1]["content"] == "".join(sorted(digits))


def test_paths_parse_and_materialize_once(tmp_path):
    assert is_generated("generated:reverse") and not is_generated("data/generated.jsonl")
    assert parse_generated("generated:reverse") == ("reverse", 2000, 0)
    assert parse_generated("generated:addition?samples=10&seed=4") == ("addition", 10, 4)
    path = materialize("generated:reverse?samples=7&seed=2", str(tmp_path))
    lines = open(path).read().splitlines()
    assert [json.loads(line) for line in lines] == generate_rows("reverse", samples=7, seed=2)
    mtime = (tmp_path / "generated" / "reverse-7-2-v2.jsonl").stat().st_mtime_ns
    assert materialize("generated:reverse?samples=7&seed=2", str(tmp_path)) == path
    assert (tmp_path / "generated" / "reverse-7-2-v2.jsonl").stat().st_mtime_ns == mtime


@pytest.mark.parametrize(
    "path, message",
    [
        ("generated:nope", "unknown generated task 'nope'; expected one of: addition, ocr, reverse, sort_digits"),
        ("generated:reverse?size=3", "unknown option"),
        ("generated:reverse?samples=x", "must be integers"),
        ("generated:reverse?samples=0", "samples must be >= 1"),
        ("generated:reverse?letters=9-3", "letters must satisfy 1 <= MIN <= MAX"),
        ("generated:reverse?letters=long", "letters must read MIN-MAX"),
        ("generated:addition?letters=3", "unknown option"),
    ],
)
def test_bad_paths_are_data_errors(path, message):
    with pytest.raises(DataError, match=message.replace("?", r"\?")):
        parse_generated(path)


def test_reverse_words_take_the_asked_lengths(tmp_path):
    path = materialize("generated:reverse?samples=50&seed=2&letters=8-10", str(tmp_path))
    assert path.endswith("reverse-50-2-letters8-10-v2.jsonl")
    rows = [json.loads(line) for line in open(path)]
    lengths = {len(row["messages"][1]["content"]) for row in rows}
    assert lengths == {8, 9, 10}
    for row in rows:
        assert row["messages"][0]["content"] == f"Reverse the letters: {row['messages'][1]['content'][::-1]}"
    assert generate_rows("reverse", samples=5, seed=2, letters=(3, 8)) == generate_rows("reverse", samples=5, seed=2)
