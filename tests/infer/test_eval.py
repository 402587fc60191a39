"""``honing eval`` runs lm-evaluation-harness on a local task over local data and writes what it scored."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from honing.cli import main
from tests.infer.reference import transformers_greedy

pytest.importorskip("lm_eval", reason="lm-eval is not installed (pip install 'honing[eval]')")
pytestmark = pytest.mark.slow

GSM8K = Path(__file__).resolve().parents[3] / "shared" / "data" / "gsm8k" / "test.jsonl"
REPO = Path(__file__).resolve().parents[2]

TASK = """task: tiny_continue
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
output_type: generate_until
test_split: test
doc_to_text: "{{{{question}}}}"
doc_to_target: "{{{{answer}}}}"
target_delimiter: ""
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
generation_kwargs:
  until: ["\\n"]
  do_sample: false
  max_gen_toks: 6
metadata:
  version: 1.0
"""


def local_task(tmp_path: Path, rows: list[dict[str, str]]) -> Path:
    data = tmp_path / "tasks" / "data.jsonl"
    data.parent.mkdir()
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    task = tmp_path / "tasks" / "tiny_continue.yaml"
    task.write_text(TASK.format(data=data))
    return task


def test_eval_on_a_local_task_scores_what_the_model_answers(quickstart_run, tmp_path, capsys):
    questions = ["def ", "import ", "class ", "return ", "# ", "for i in "]
    # greedy 6-token continuations, cut at the first newline as the task's `until` does: half the rows expect
    # exactly that, half something else, so the harness's mean exact match must be 0.5
    answers = [text.split("\n")[0] for text in transformers_greedy(quickstart_run / "hf", questions, 6, chat=False)]
    rows = [
        {"question": q, "answer": a if i % 2 == 0 else a + "\u2603"} for i, (q, a) in enumerate(zip(questions, answers))
    ]
    task = local_task(tmp_path, rows)
    (quickstart_run / "tensorboard").mkdir(exist_ok=True)  # as callbacks.tensorboard leaves it
    assert main(["eval", str(quickstart_run), "--tasks", str(task), "--batch-size", "4"]) == 0
    out = capsys.readouterr().out
    written = json.loads((quickstart_run / "eval" / "harness" / "tiny_continue.json").read_text())
    assert written["metrics"] == {"exact_match": 0.5}
    assert written["samples"] == 6 and written["step"] == 3 and written["config"]["task"] == "tiny_continue"
    assert "| tiny_continue | exact_match | 0.5000" in out
    *earlier, last = [json.loads(line) for line in (quickstart_run / "metrics.jsonl").read_text().splitlines()]
    step_3 = [row for row in earlier if row["step"] == 3][-1]
    assert "train/loss" in step_3
    assert last == {**step_3, "eval/harness/tiny_continue/exact_match": 0.5}  # the step's losses stay in its last line
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(quickstart_run / "tensorboard")).Reload()
    [scalar] = events.Scalars("eval/harness/tiny_continue/exact_match")
    assert (scalar.step, scalar.value) == (3, 0.5)


def test_unknown_task_and_missing_file_are_one_line_errors(quickstart_run, tmp_path, capsys):
    assert main(["eval", str(quickstart_run), "--tasks", str(tmp_path / "none.yaml")]) == 2
    assert capsys.readouterr().err == f"honing: error: --tasks: the task file {tmp_path / 'none.yaml'} does not exist\n"


@pytest.mark.skipif(not GSM8K.exists(), reason=f"{GSM8K} is absent (the shared data sets)")
def test_gsm8k_task_over_the_shared_file(quickstart_run, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(REPO)  # the task file names its data relative to the repository: ../shared/data/...
    task = REPO / "configs" / "eval" / "gsm8k_local.yaml"
    args = ["eval", str(quickstart_run / "hf"), "--tasks", str(task), "--limit", "2", "-o", str(tmp_path)]
    assert main([*args, "--batch-size", "2", "--num-fewshot", "0", "--max-new-tokens", "8"]) == 0
    written = json.loads((tmp_path / "eval" / "harness" / "gsm8k_local.json").read_text())
    assert written["samples"] == 2
    assert set(written["metrics"]) == {"exact_match/strict-match", "exact_match/flexible-extract"}
