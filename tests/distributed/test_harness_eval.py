"""``callbacks.harness_eval`` on 2 processes (gloo, FSDP2): rank 0 runs lm-eval for longer than the process group's
timeout while rank 1 waits without a collective, and the results are recorded and written."""

from __future__ import annotations

import json

import pytest

from tests.distributed.runs import failure_excerpt, honing_train, metrics

pytest.importorskip("lm_eval", reason="lm-eval is not installed (pip install 'honing[eval]')")
pytestmark = pytest.mark.slow

TASK = """task: slow_echo
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
output_type: generate_until
test_split: test
doc_to_text: "{{{{question}}}}"
doc_to_target: "{{{{answer}}}}"
process_results: !function slow_scoring.process_results
metric_list:
  - metric: answered
    aggregation: mean
    higher_is_better: true
generation_kwargs:
  until: ["\\n"]
  do_sample: false
  max_gen_toks: 4
metadata:
  version: 1.0
"""

# each document takes 2.5 seconds to score: an evaluation (10 s) lasts longer than the 5-second process-group
# timeout, which is itself long enough for a rank that a loaded 2-core machine holds back at start or in a step
SCORING = """import time


def process_results(doc, results):
    time.sleep(2.5)
    return {"answered": 1.0}
"""

CONFIG = """method: pretrain
trainer:
  save_folder: {save_folder}
  max_duration: 4steps
  num_threads: 1
  metrics_collect_interval: 1
data:
  train:
    sources: [{{path: "{{stdlib}}/json/*.py"}}]
  seq_len: 32
  global_batch_size: 4
tokenizer: {{kind: byte}}
model:
  config: {{model_type: llama, hidden_size: 32, num_hidden_layers: 2, num_attention_heads: 2,
           num_key_value_heads: 2, intermediate_size: 64}}
parallel:
  timeout_seconds: 5
callbacks:
  checkpointer: {{save_interval: 1000}}
  evaluator: {{enabled: false}}
  sample: {{enabled: false}}
  console: {{plain: true}}
  harness_eval:
    enabled: true
    tasks: [{task}]
    interval: 2
    batch_size: 2
"""


def test_harness_eval_on_two_processes_outlasts_the_timeout(tmp_path):
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    data = tasks / "data.jsonl"
    data.write_text("".join(json.dumps({"question": f"x = {i}", "answer": "1"}) + "\n" for i in range(4)))
    (tasks / "slow_scoring.py").write_text(SCORING)
    (tasks / "slow_echo.yaml").write_text(TASK.format(data=data))
    save_folder = tmp_path / "run"
    config = tmp_path / "run.yaml"
    config.write_text(CONFIG.format(save_folder=save_folder, task=tasks / "slow_echo.yaml"))
    result = honing_train(str(config), nproc=2, timeout=300)
    assert result.returncode == 0, failure_excerpt(result.stderr)
    logged = metrics(save_folder)
    assert logged[2]["eval/harness/slow_echo/answered"] == 1.0
    assert logged[4]["eval/harness/slow_echo/answered"] == 1.0
    assert "eval/harness/slow_echo/answered" not in logged[3]
    written = json.loads((save_folder / "eval" / "harness" / "slow_echo.json").read_text())
    assert written["step"] == 4 and written["samples"] == 4 and written["metrics"] == {"answered": 1.0}
    assert result.stdout.count("lm-eval at step") == 2  # printed by rank 0 only
