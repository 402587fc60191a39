"""The shared JSON Lines reader: line numbers, blank lines, and a line cut short."""

import json

from honing.json_lines import json_lines


def test_values_come_with_their_line_numbers_and_a_bad_line_gives_its_error(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\n\n"text"\n{"step": 2, "train/lo\n', encoding="utf-8")
    read = list(json_lines(str(path)))
    assert [number for number, _ in read] == [1, 3, 4]
    assert read[0][1] == {"step": 1} and read[1][1] == "text"
    assert isinstance(read[2][1], json.JSONDecodeError)
