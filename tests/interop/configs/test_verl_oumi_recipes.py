"""Oumi's own VERL_GRPO recipes translate with no refusal: configs/examples/grpo_verl_geometry3k/train.yaml and
configs/recipes/vision/molmo/grpo/train.yaml of oumi-ai/oumi (Apache-2.0; the geometry3k file below, comments
dropped; the Molmo recipe has the same verl_config_overrides with Molmo as its model). Their
``actor.param_offload`` / ``actor.optimizer_offload`` are not keys of verl's actor config (its fsdp_config's are, set
beside them): noted as offload settings, never refused."""

from __future__ import annotations

import yaml

from honing.interop.configs import translate

PREFIX = "training.verl_config_overrides"
GEOMETRY3K = """
model:
  model_name: "Qwen/Qwen2.5-VL-3B-Instruct"
data:
  train:
    datasets:
      - dataset_name: "hiyouga/geometry3k"
        split: "train"
        shuffle: True
        seed: 42
        transform_num_workers: "auto"
        dataset_kwargs:
          return_conversations: True
          processor_name: "Qwen/Qwen2.5-VL-3B-Instruct"
          return_tensors: True
  validation:
    datasets:
      - dataset_name: "hiyouga/geometry3k"
        split: "validation"
        shuffle: True
        seed: 42
        transform_num_workers: "auto"
        dataset_kwargs:
          return_conversations: True
          processor_name: "Qwen/Qwen2.5-VL-3B-Instruct"
          return_tensors: True
training:
  trainer_type: "VERL_GRPO"
  num_train_epochs: 5
  save_steps: 150
  eval_strategy: "steps"
  eval_steps: 12
  learning_rate: 1.0e-6
  enable_gradient_checkpointing: True
  reward_functions: []
  grpo:
    max_completion_length: 1024
    use_vllm: True
    temperature: 0.6
    vllm_gpu_memory_utilization: 0.6
  verl_config_overrides:
    data:
      train_batch_size: 512
      val_batch_size: 512
      max_prompt_length: 1024
      max_response_length: 2048
      filter_overlong_prompts: True
      truncation: "error"
      image_key: "images"
    algorithm:
      use_kl_in_reward: False
    actor_rollout_ref:
      model:
        use_remove_padding: True
      actor:
        ppo_mini_batch_size: 128
        ppo_micro_batch_size_per_gpu: 10
        use_kl_loss: True
        kl_loss_coef: 0.01
        kl_loss_type: "low_var_kl"
        entropy_coeff: 0
        param_offload: False
        optimizer_offload: False
        fsdp_config:
          param_offload: False
          optimizer_offload: False
      rollout:
        tensor_model_parallel_size: 2
        log_prob_micro_batch_size_per_gpu: 20
        n: 5
        enforce_eager: False
        free_cache_engine: False
        enable_chunked_prefill: False
      ref:
        log_prob_micro_batch_size_per_gpu: 20
        fsdp_config:
          param_offload: True
    trainer:
      n_gpus_per_node: 4
      nnodes: 1
  output_dir: "output/grpo-verl-vlm-geom3k"
  enable_wandb: True
"""


def with_reward(raw: dict) -> dict:
    """The recipe with a reward named (as written, ``reward_functions: []`` asks for verl's built-in geo3k scorer:
    see the tests below)."""
    raw["training"]["reward_functions"] = ["my_rewards:geo3k_score"]
    return raw


def test_verls_built_in_reward_by_data_source_is_honings_geo3k():
    """verl scores hiyouga/geometry3k rows with verl.utils.reward_score.geo3k when no reward is named: the same
    score, honing's geo3k over the named data set's answer column, with one note."""
    t = translate(yaml.safe_load(GEOMETRY3K))
    assert t.refused == []
    assert t.get("grpo.rewards") == [{"name": "geo3k"}]
    notes = [note for note in t.notes if note.startswith("training.reward_functions: [] → [geo3k]")]
    assert len(notes) == 1


def test_a_data_set_verl_has_no_ported_built_in_for_is_refused_in_one_line():
    raw = yaml.safe_load(GEOMETRY3K)
    raw["data"]["validation"]["datasets"][0]["dataset_name"] = "lmms-lab/multimodal-open-r1-8k-verified"
    t = translate(raw)
    assert len(t.refused) == 1 and t.refused[0].startswith("training.reward_functions: []: verl's built-in reward")
    assert "openai/gsm8k, hiyouga/geometry3k" in t.refused[0]


def test_oumis_geometry3k_and_molmo_verl_recipes_translate_with_verls_settings():
    raw = with_reward(yaml.safe_load(GEOMETRY3K))
    molmo = with_reward(yaml.safe_load(GEOMETRY3K))
    molmo["model"] = {"model_name": "oumi-ai/Molmo-7B-O-0924", "torch_dtype_str": "float32", "trust_remote_code": True}
    molmo["training"]["enable_gradient_checkpointing"] = False
    for config in (raw, molmo):
        t = translate(config)
        assert t.refused == []
        assert t.get("method") == "vl_grpo"
        # 512 prompts x 5 completions; 128 prompts per optimizer step; 10 completions = 2 prompts per forward
        assert (t.get("data.global_batch_size"), t.get("grpo.num_generations")) == (512, 5)
        assert (t.get("grpo.steps_per_generation"), t.get("data.micro_batch_size")) == (4, 2)
        assert (t.get("grpo.beta"), t.get("grpo.kl_estimator"), t.get("data.seq_len")) == (0.01, "low_var_kl", 3072)
        offload = [note for note in t.notes if note.startswith(f"{PREFIX}.actor_rollout_ref.actor.param_offload: ")]
        assert len(offload) == 1 and "fsdp_config.param_offload" in offload[0]


def test_freeze_vision_tower_reaches_an_image_run_and_verls_own_keys_override_oumis():
    raw = with_reward(yaml.safe_load(GEOMETRY3K))
    actor = raw["training"]["verl_config_overrides"]["actor_rollout_ref"]["actor"]
    actor["freeze_vision_tower"] = True
    actor["optim"] = {"lr": 2e-6, "weight_decay": 0.0, "lr_scheduler_type": "cosine", "lr_warmup_steps": 3}
    raw["training"]["verl_config_overrides"]["actor_rollout_ref"]["model"]["path"] = "Qwen/Qwen2.5-VL-7B-Instruct"
    t = translate(raw)
    assert t.refused == []
    assert (t.get("model.freeze_vision"), t.get("model.name_or_path")) == (True, "Qwen/Qwen2.5-VL-7B-Instruct")
    assert (t.get("optim.lr"), t.get("optim.weight_decay")) == (2e-6, 0.0)
    assert (t.get("scheduler.name"), t.get("scheduler.warmup_steps")) == ("cosine", 3)


def test_a_loss_mode_honing_lacks_is_refused_in_one_line_with_why():
    raw = with_reward(yaml.safe_load(GEOMETRY3K))
    raw["training"]["verl_config_overrides"]["actor_rollout_ref"]["actor"]["policy_loss"] = {"loss_mode": "cispo"}
    t = translate(raw)
    assert len(t.refused) == 1 and t.refused[0].startswith(f"{PREFIX}.actor_rollout_ref.actor.policy_loss.loss_mode")
    assert "caps it above only" in t.refused[0]
