"""``training.verl_config_overrides`` of an Oumi ``VERL_GRPO`` config: verl's own keys, written as honing's."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from honing.interop.configs.translation import Keys, Translation, read_number

# verl key -> (honing key, conversion)
VERL_KEYS: dict[str, tuple[str, Any]] = {
    "data.train_batch_size": ("data.global_batch_size", int),
    "data.max_response_length": ("grpo.max_completion_length", int),
    "actor_rollout_ref.rollout.n": ("grpo.num_generations", int),
    "actor_rollout_ref.rollout.temperature": ("grpo.temperature", float),
    "actor_rollout_ref.rollout.top_p": ("grpo.top_p", float),
    "actor_rollout_ref.rollout.top_k": ("grpo.top_k", lambda value: max(0, int(value))),  # verl: -1 is none
    "actor_rollout_ref.actor.optim.lr": ("optim.lr", float),
    "actor_rollout_ref.actor.clip_ratio": ("grpo.epsilon", float),
    "actor_rollout_ref.actor.clip_ratio_low": ("grpo.epsilon", float),
    "actor_rollout_ref.actor.clip_ratio_high": ("grpo.epsilon_high", float),
    "actor_rollout_ref.actor.kl_loss_coef": ("grpo.beta", float),
    "trainer.total_training_steps": ("trainer.max_duration", lambda value: f"{int(value)}steps"),
    "trainer.total_epochs": ("trainer.max_duration", lambda value: f"{int(value)}epochs"),
    "trainer.save_freq": ("callbacks.checkpointer.save_interval", int),
    "trainer.default_local_dir": ("trainer.save_folder", str),
    "trainer.experiment_name": ("run_name", str),
    "trainer.seed": ("trainer.seed", int),
    # the validation pass: data.val_files' prompts sampled by val_kwargs every test_freq steps (-1: none on the way)
    "trainer.test_freq": ("callbacks.evaluator.interval", lambda value: int(value) if int(value) > 0 else 10**9),
    "data.val_batch_size": ("callbacks.evaluator.batch_size", int),
    "trainer.val_before_train": ("grpo.validation.before_training", bool),
    "actor_rollout_ref.rollout.val_kwargs.n": ("grpo.validation.num_generations", int),
    "actor_rollout_ref.rollout.val_kwargs.temperature": ("grpo.validation.temperature", float),
    "actor_rollout_ref.rollout.val_kwargs.top_p": ("grpo.validation.top_p", float),
    "actor_rollout_ref.rollout.val_kwargs.top_k": ("grpo.validation.top_k", lambda value: max(0, int(value))),
}

# verl's loss_agg_mode -> honing's grpo.loss_type (the same normalisations, as TRL names them)
LOSS_AGG_MODES = {"token-mean": "dapo", "seq-mean-token-mean": "grpo", "seq-mean-token-sum-norm": "dr_grpo"}


def flatten(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested mapping as dotted keys (``{"data": {"x": 1}}`` -> ``{"data.x": 1}``)."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, path))
        else:
            out[path] = value
    return out


def translate_verl_overrides(t: Translation, overrides: Keys) -> None:
    """Each verl key the table knows, as honing's; every other one refused by name."""
    flat = flatten(overrides.values)
    overrides.taken.update(overrides.values)
    use_kl = flat.pop("actor_rollout_ref.actor.use_kl_loss", None)
    max_prompt = flat.pop("data.max_prompt_length", None)
    do_sample = flat.pop("actor_rollout_ref.rollout.val_kwargs.do_sample", None)
    for key, value in flat.items():
        full = f"{overrides.prefix}.{key}"
        if key in VERL_KEYS:
            path, convert = VERL_KEYS[key]
            try:
                t.set(path, convert(value))
            except (TypeError, ValueError, OverflowError):
                t.refuse(full, f"{value!r} cannot be read (for honing's {path})")
        elif key == "actor_rollout_ref.actor.loss_agg_mode" and value in LOSS_AGG_MODES:
            t.set("grpo.loss_type", LOSS_AGG_MODES[value])
        elif key == "algorithm.adv_estimator" and value == "grpo":
            pass
        elif key == "algorithm.norm_adv_by_std_in_grpo":
            t.set("grpo.scale_rewards", "group" if value else "none")
        elif key == "actor_rollout_ref.rollout.name" and value == "hf":
            pass
        elif key == "actor_rollout_ref.model.enable_gradient_checkpointing":
            if value:
                t.set("parallel.activation_checkpointing", "full")
        elif key == "data.image_key" and value == "images" and t.get("method") == "vl_grpo":
            t.note(full, "honing's image prompts read their images from the 'images' column, as here")
        elif key == "trainer.logger":
            loggers = [value] if isinstance(value, str) else value if isinstance(value, list) else []
            t.set("callbacks.wandb.enabled", "wandb" in loggers)
            t.set("callbacks.tensorboard.enabled", "tensorboard" in loggers)
        else:
            t.refuse(full, f"{value!r}: not translated (honing's GRPO has no such setting)")
    if use_kl is False:
        t.set("grpo.beta", 0.0)
    if not do_sample and t.get("grpo.validation.temperature"):  # verl's default do_sample false: greedy whatever
        t.set("grpo.validation.temperature", 0.0)  # val_kwargs.temperature says
    max_prompt = read_number(t, f"{overrides.prefix}.data.max_prompt_length", max_prompt, int) if max_prompt else None
    if max_prompt is not None:
        # honing keeps a prompt when it leaves max_completion_length tokens of data.seq_len
        t.set("data.seq_len", max_prompt + int(t.get("grpo.max_completion_length", 256)))
