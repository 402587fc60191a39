"""Two ranks on one node tokenize a fine-tuning data set once: local rank 0 prepares it into the cache while the other
waits for the published index (polling the file system, not inside a collective); a second launch reads it."""

import json

import pytest

from tests.distributed.runs import failure_excerpt, honing_train, metrics

pytestmark = pytest.mark.slow

CONFIG = """
method: sft
trainer: {{save_folder: {save_folder}, max_duration: 3steps, num_threads: 1, metrics_collect_interval: 1}}
data:
  train: {{sources: [{{path: "generated:reverse?samples=3000&seed=0"}}]}}
  validation: {{sources: [{{path: "generated:reverse?samples=16&seed=1"}}]}}
  chat_template: chatml
  seq_len: 64
  global_batch_size: 4
  cache_dir: {cache}
model:
  config: {{model_type: llama, hidden_size: 32, num_hidden_layers: 1, num_attention_heads: 2,
           num_key_value_heads: 2, intermediate_size: 64}}
callbacks:
  checkpointer: {{save_interval: 100}}
  evaluator: {{enabled: false}}
  sample: {{enabled: false}}
  console: {{plain: true}}
"""


def prepare_logs(cache):
    """Each cache entry's prepare.log lines (one per process that tokenized rows into it)."""
    return {
        log.parent.name: [json.loads(line) for line in log.read_text().splitlines()]
        for log in sorted((cache / "prepared").glob("*/prepare.log"))
    }


def test_two_ranks_on_one_node_tokenize_once(tmp_path):
    config = tmp_path / "sft.yaml"
    config.write_text(CONFIG.format(save_folder=tmp_path / "run", cache=tmp_path / "cache"))
    first = honing_train(str(config), nproc=2, timeout=300)
    assert first.returncode == 0, failure_excerpt(first.stderr)
    logs = prepare_logs(tmp_path / "cache")
    assert len(logs) == 2  # the training and the validation sources
    for lines in logs.values():
        assert [(line["rank"], line["reused"]) for line in lines] == [(0, 0)]
    assert sorted(metrics(tmp_path / "run")) == [1, 2, 3]
    second = honing_train(str(config), "trainer.save_folder=" + str(tmp_path / "again"), nproc=2, timeout=300)
    assert second.returncode == 0, failure_excerpt(second.stderr)
    assert prepare_logs(tmp_path / "cache") == logs  # read, not prepared again
    assert metrics(tmp_path / "again")[3]["train/loss"] == metrics(tmp_path / "run")[3]["train/loss"]
