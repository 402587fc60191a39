"""The TRL keys built as honing's own features and read by ``hf_training_extras`` / ``trl_extra_keys``: each one's
honing key validated, and ``eval_on_start`` trained: an evaluation at step 0 before the first step."""

from __future__ import annotations

import json

from honing.config import validate
from honing.interop.configs.llamafactory import translate_llamafactory
from honing.interop.configs.trl_args import translate_trl_args
from tests.interop.configs.test_trl_cli_train import WORDS, trained


def valid(values: dict, config_class: str):
    """``values`` of ``config_class`` translated, with no refusal, and validated with a model and rows."""
    t = translate_trl_args(values, config_class)
    assert t.refused == [], t.refused
    raw = t.config
    raw.setdefault("model", {})["name_or_path"] = "tiny"
    raw.setdefault("data", {})["train"] = {"sources": [{"path": "generated:addition_preference?samples=8&seed=0"}]}
    return validate(raw, source="<trl>")


def test_eval_on_start_evaluates_at_step_0_before_training(tmp_path):
    rows = [{"text": f"The film {word} was {'good' if i % 2 else 'bad'}."} for i, word in enumerate(WORDS * 2)]
    held_out = tmp_path / "held_out.jsonl"
    held_out.write_text("".join(json.dumps(row) + "\n" for row in rows[:4]))
    raw = {"model_name_or_path": "Qwen/Qwen2-0.5B", "dataset_name": "stanfordnlp/imdb", "eval_on_start": True,
           "eval_strategy": "steps", "eval_steps": 100, "learning_rate": 1e-3}  # fmt: skip
    extra = [f"data.validation.sources=[{{path: {held_out}}}]"]
    config, _ = trained(tmp_path, raw, "trl-sft", rows, extra)
    assert config.callbacks.evaluator.before_training
    lines = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    evaluated = [line["step"] for line in lines if "eval/loss" in line]
    assert evaluated == [0, 2]  # before step 1, and at the end of the 2 steps


def test_without_eval_on_start_the_first_evaluation_is_after_training(tmp_path):
    assert not valid({}, "SFTConfig").callbacks.evaluator.before_training


def test_activation_checkpointing_kwargs_are_honings_every_n_and_offload():
    config = valid({"activation_checkpointing_kwargs": {"every_n_layers": 2, "offload": True}}, "DPOConfig")
    parallel = config.parallel
    assert (parallel.activation_checkpointing, parallel.activation_checkpointing_every) == ("every_n", 2)
    assert parallel.activation_offload
    t = translate_trl_args({"activation_checkpointing_kwargs": {"preserve_rng_state": False}}, "DPOConfig")
    assert t.refused[0].startswith("activation_checkpointing_kwargs.preserve_rng_state: not translated")
    note = translate_trl_args({"gradient_checkpointing_kwargs": {"use_reentrant": False}}, "SFTConfig")
    assert note.refused == [] and "non-reentrant" in note.notes[0]


def test_parallelism_config_is_honings_mesh():
    config = valid({"parallelism_config": {"dp_replicate_size": 2, "dp_shard_size": 2, "tp_size": 1}}, "SFTConfig")
    assert (config.parallel.dp_replicate, config.parallel.dp_shard, config.parallel.tp) == (2, 2, 1)
    t = translate_trl_args({"parallelism_config": {"sp_size": 2}}, "SFTConfig")
    assert t.refused == ["parallelism_config.sp_size: not available: give cp_size (honing's context parallelism)"]


def test_compile_backend_and_mode_turn_compile_on_and_another_value_is_refused():
    config = valid({"torch_compile_backend": "inductor", "torch_compile_mode": "default"}, "SFTConfig")
    assert config.parallel.compile is True
    t = translate_trl_args({"torch_compile_mode": "max-autotune"}, "SFTConfig")
    assert t.refused == ["torch_compile_mode: 'max-autotune' is not available: honing compiles with 'default' "
                         "(parallel.compile)"]  # fmt: skip


def test_the_same_keys_translate_from_llamafactory():
    keys = {"eval_on_start": True, "torch_compile_backend": "inductor", "parallelism_config": {"tp_size": 2}}
    t = translate_llamafactory({"stage": "sft", "model_name_or_path": "Qwen/Qwen2-0.5B", "do_predict": True, **keys})
    assert [line.split(":")[0] for line in t.refused] == ["dataset"], t.refused  # no rows named: nothing else
    assert (t.get("callbacks.evaluator.before_training"), t.get("parallel.compile"), t.get("parallel.tp")) == (
        True,
        True,
        2,
    )
    assert any(line.startswith("do_predict: not needed") for line in t.notes)


def test_a_jinja_chat_template_path_is_the_templates_text(tmp_path):
    template = tmp_path / "chat.jinja"
    template.write_text("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}")
    assert valid({"chat_template_path": str(template)}, "SFTConfig").data.chat_template == template.read_text()
    missing = translate_trl_args({"chat_template_path": str(tmp_path / "none.jinja")}, "RewardConfig")
    assert missing.refused[0].startswith("chat_template_path: ") and "no such file" in missing.refused[0]
    tokenizer = translate_trl_args({"chat_template_path": "Qwen/Qwen3-0.6B"}, "SFTConfig")
    assert "a tokenizer's template is not cloned" in tokenizer.refused[0]


def test_online_reward_weights_eval_generations_and_generation_kwargs():
    t = translate_trl_args({"reward_weights": [1.0, 0.25], "num_generations_eval": 4, "temperature": 0.7,
                            "generation_kwargs": {"top_p": 0.9, "max_tokens": 64}}, "GRPOConfig")  # fmt: skip
    assert t.refused == []
    assert t.get("grpo.reward_weights") == [1.0, 0.25]
    assert (t.get("grpo.top_p"), t.get("grpo.max_completion_length")) == (0.9, 64)  # generation_kwargs override
    validation = {name: t.get(f"grpo.validation.{name}") for name in ("num_generations", "temperature", "top_p")}
    assert validation == {"num_generations": 4, "temperature": 0.7, "top_p": 0.9}  # sampled as the training is
    refused = translate_trl_args({"generation_kwargs": {"num_beams": 4, "do_sample": False}}, "RLOOConfig").refused
    assert [line.split(":")[0] for line in refused] == ["generation_kwargs.do_sample", "generation_kwargs.num_beams"]


def test_label_smoothing_factor_is_a_note_where_trls_trainer_ignores_it():
    t = translate_trl_args({"label_smoothing_factor": 0.1}, "DPOConfig")
    assert t.refused == [] and t.notes[0].startswith("label_smoothing_factor: not needed: the class's trainer")
    assert translate_trl_args({"label_smoothing_factor": 0.1}, "SFTConfig").refused  # SFTTrainer smooths


def test_optim_args_are_read_as_transformers_reads_them_for_the_optimizer():
    config = valid({"optim": "sgd", "optim_args": "momentum=0.9, weight_decay=0.01"}, "SFTConfig")
    assert (config.optim.momentum, config.optim.weight_decay) == (0.9, 0.01)
    t = translate_trl_args({"optim": "sgd"}, "SFTConfig")  # transformers' SGD: torch's momentum 0, not honing's 0.9
    assert t.get("optim.momentum") == 0.0 and "optim.momentum" in t.defaults
    t = translate_trl_args({"optim_args": "beta3=0.99"}, "DPOConfig")  # adamw_torch_fused reads none
    assert t.refused == [] and t.notes[0].startswith("optim_args: not needed: transformers'")
    refused = translate_trl_args({"optim": "sgd", "optim_args": "nesterov=True"}, "SFTConfig").refused
    assert refused == ["optim_args: nesterov=True: not available: honing's SGD reads momentum and weight_decay"]


def test_grpos_entropy_bonus_keys_validate_as_the_grpo_sections():
    values = {"entropy_coef": 0.01, "use_adaptive_entropy": True, "entropy_target": 0.5, "entropy_coef_delta": 0.001}
    grpo = valid(values, "GRPOConfig").grpo
    assert (grpo.entropy_coef, grpo.use_adaptive_entropy, grpo.entropy_target, grpo.entropy_coef_delta) == (
        0.01,
        True,
        0.5,
        0.001,
    )


def test_eval_strategy_epoch_is_every_epoch():
    """transformers' eval_strategy 'epoch' (TRL's and LLaMA-Factory's arguments): honing's every_epoch."""
    config = valid({"eval_strategy": "epoch", "eval_steps": 7}, "SFTConfig")
    assert config.callbacks.evaluator.every_epoch is True
    t = translate_trl_args({"eval_strategy": "best"}, "SFTConfig")
    assert t.refused == ["eval_strategy: 'best' is not available: honing evaluates every N steps or every epoch"]


def test_min_p_and_repetition_penalty_reach_the_online_sections_sampler():
    grpo = valid({"min_p": 0.05, "repetition_penalty": 1.1}, "GRPOConfig").grpo
    assert (grpo.min_p, grpo.repetition_penalty) == (0.05, 1.1)
    t = translate_trl_args({"generation_kwargs": {"min_p": 0.2}, "num_generations_eval": 2}, "RLOOConfig")
    assert t.refused == [] and t.get("rloo.min_p") == 0.2  # generation_kwargs override, as TRL's
    assert t.get("rloo.validation.min_p") == 0.2  # TRL's eval samples as its training does
    assert t.get("rloo.validation.repetition_penalty") is None  # off: the section's default


def test_chat_template_kwargs_are_the_data_sections():
    config = valid({"chat_template_kwargs": {"enable_thinking": False}}, "GRPOConfig")
    assert config.data.chat_template_kwargs == {"enable_thinking": False}
    t = translate_trl_args({"chat_template_kwargs": '{"enable_thinking": false}'}, "RLOOConfig")  # the CLI's form
    assert t.get("data.chat_template_kwargs") == {"enable_thinking": False}
    refused = translate_trl_args({"chat_template_kwargs": "thinking"}, "GRPOConfig").refused
    assert [line.split(":")[0] for line in refused] == ["chat_template_kwargs"]
