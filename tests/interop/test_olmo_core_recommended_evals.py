"""OLMo-core's ``TrainerConfig.with_recommended_evals`` in honing's nearest form (``interop/olmo_core_evals.py``):
OLMo-core's signature, a ``downstream_evaluator`` running the named task set's benchmarks with lm-eval and an
``lm_evaluator`` giving the loss on the validation documents of a local folder, every ``eval_interval`` steps and
at the end. Offline stand-ins: a task set of one local lm-eval task file and two text documents."""

from __future__ import annotations

import inspect
import json
from dataclasses import replace

import pytest
import torch

import honing.interop.olmo_core as olmo_core
import honing.interop.olmo_core_evals as evals
from honing.data.loader import DataLoader
from honing.data.tokenizer import build_tokenizer
from honing.errors import ConfigError
from honing.losses import cross_entropy_sum
from honing.methods.lm import LMTrainModule
from honing.optim.param_groups import build_adamw
from tests.helpers import TokenDataset, tiny_llama

pytest.importorskip("lm_eval", reason="lm-eval is not installed (pip install 'honing[eval]')")

# OLMo-core's (src/olmo_core/train/config.py at fa6c501): the parameters in order and their defaults
OLMO_CORE_SIGNATURE = [
    ("tokenizer", inspect.Parameter.empty),
    ("sequence_length", inspect.Parameter.empty),
    ("cluster", inspect.Parameter.empty),
    ("task_set", "full"),
    ("eval_interval", 10_000),
    ("lazy_load", False),
]

TASK = """task: tiny_choice
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
output_type: multiple_choice
test_split: test
doc_to_text: "{{{{question}}}}"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: "{{{{answer}}}}"
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
metadata:
  version: 1.0
"""

DOCUMENTS = ["The quick brown fox jumps over the lazy dog. " * 3, "Pack my box with five dozen liquor jugs."]


def offline_stand_ins(tmp_path, monkeypatch, tasks: list[str] | None = None):
    """A task set ``local`` of one lm-eval task file, a folder of two documents, a byte tokenizer and a tiny Llama."""
    data = tmp_path / "choices.jsonl"
    rows = [{"question": f"{i} + 1 =", "choices": [str(i + 1), "no"], "answer": 0} for i in range(3)]
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    task = tmp_path / "tiny_choice.yaml"
    task.write_text(TASK.format(data=data))
    monkeypatch.setitem(evals.TASK_GROUPS, "local", tasks if tasks is not None else [str(task)])
    documents = tmp_path / "validation"
    (documents / "part").mkdir(parents=True)
    (documents / "a.txt").write_text(DOCUMENTS[0])
    (documents / "part" / "b.jsonl").write_text(json.dumps({"text": DOCUMENTS[1]}) + "\n")
    tokenizer = build_tokenizer("byte")
    model = tiny_llama(vocab=len(tokenizer), seed=0)
    optimizer = build_adamw(model, lr=1e-3, weight_decay=0.0, betas=(0.9, 0.95), eps=1e-8)
    module = LMTrainModule(model, optimizer, micro_batch_size=4)
    loader = DataLoader(TokenDataset(rows=32, vocab=64), global_batch_size=4, seed=0)
    return tokenizer, str(documents), module, loader


def test_the_signature_is_olmo_cores():
    signature = inspect.signature(olmo_core.TrainerConfig.with_recommended_evals).parameters
    assert [(name, p.default) for name, p in signature.items() if name != "self"] == OLMO_CORE_SIGNATURE
    assert {"full", "fast", "full__small_compute", "full__large_compute"} == set(evals.TASK_GROUPS)


@pytest.mark.slow  # lm-eval builds its task and model wrappers: seconds on a CPU
def test_the_task_set_and_the_documents_are_evaluated_every_interval_and_at_the_end(tmp_path, monkeypatch):
    tokenizer, folder, module, loader = offline_stand_ins(tmp_path, monkeypatch)
    config = olmo_core.TrainerConfig(save_folder=str(tmp_path / "run"), max_duration=olmo_core.Duration.steps(3))
    with_evals = config.with_recommended_evals(tokenizer, 16, folder, task_set="local", eval_interval=2)
    assert config.callbacks == {} and set(with_evals.callbacks) == {"downstream_evaluator", "lm_evaluator"}
    trainer = with_evals.build(module, loader)
    logged: dict[int, dict[str, float]] = {}
    trainer.add_callback("log", Recorder(logged))
    trainer.fit()
    evaluated = {step for step, metrics in logged.items() if "eval/harness/tiny_choice/acc" in metrics}
    assert evaluated == {2, 3}  # every eval_interval steps and at the end (OLMo-core's eval_on_finish)
    assert {step for step, metrics in logged.items() if "eval/loss" in metrics} == {2, 3}
    assert 0.0 <= logged[3]["eval/harness/tiny_choice/acc"] <= 1.0
    # the lm_evaluator's loss is the mean next-token loss of the documents' tokens (each + EOS, rows of 16, the last
    # padded) under the final weights, computed here directly
    total, count = 0.0, 0
    module.model.eval()
    with torch.no_grad():
        for text in DOCUMENTS:
            ids = tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
            for start in range(0, len(ids), 16):
                piece = torch.tensor([ids[start : start + 16]])
                if piece.shape[1] < 2:
                    continue
                total += float(cross_entropy_sum(module.model(input_ids=piece).logits, piece))
                count += piece.shape[1] - 1
    assert logged[3]["eval/loss"] == pytest.approx(total / count, rel=1e-4)


def test_no_evals_turns_both_off(tmp_path, monkeypatch):
    tokenizer, folder, module, loader = offline_stand_ins(tmp_path, monkeypatch)
    config = olmo_core.TrainerConfig(
        save_folder=str(tmp_path / "run"), max_duration=olmo_core.Duration.steps(2), no_evals=True
    )
    trainer = config.with_recommended_evals(tokenizer, 16, folder, task_set="local", eval_interval=1).build(
        module, loader
    )
    logged: dict[int, dict[str, float]] = {}
    trainer.add_callback("log", Recorder(logged))
    trainer.fit()
    assert not any(name.startswith("eval/") for metrics in logged.values() for name in metrics)


def test_an_unknown_set_or_folder_is_refused_and_lazy_load_defers_a_missing_task(tmp_path, monkeypatch):
    tokenizer, folder, module, loader = offline_stand_ins(tmp_path, monkeypatch, tasks=[str(tmp_path / "gone.yaml")])
    config = olmo_core.TrainerConfig(save_folder=str(tmp_path / "run"), max_duration=olmo_core.Duration.steps(2))
    with pytest.raises(ConfigError, match="task set not recognized: 'olmes'"):
        config.with_recommended_evals(tokenizer, 16, folder, task_set="olmes")
    with pytest.raises(ConfigError, match="cluster='jupiter' is no folder"):
        config.with_recommended_evals(tokenizer, 16, "jupiter")
    # loaded up front (OLMo-core's default): the missing task file fails before the first step
    eager = config.with_recommended_evals(tokenizer, 16, folder, task_set="local", eval_interval=2)
    trainer = eager.build(module, loader)
    with pytest.raises(ConfigError, match="gone.yaml does not exist"):
        trainer.fit()
    assert trainer.global_step == 0
    # lazy_load: only at the first evaluation (step 2)
    lazy = replace(config, save_folder=str(tmp_path / "lazy")).with_recommended_evals(
        tokenizer, 16, folder, task_set="local", eval_interval=2, lazy_load=True
    )
    trainer = lazy.build(module, loader)
    with pytest.raises(ConfigError, match="gone.yaml does not exist"):
        trainer.fit()
    assert trainer.global_step == 2


class Recorder(olmo_core.Callback):
    """Keeps every logged metric by step."""

    def __init__(self, logged: dict[int, dict[str, float]]):
        self.logged = logged

    def on_log(self, step: int, metrics: dict[str, float]) -> None:
        self.logged.setdefault(step, {}).update(metrics)
