"""``training.verl_config_overrides`` of an Oumi ``VERL_GRPO`` config: verl's own keys, written as honing's."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from honing.config.schema import GRPOSection
from honing.interop.configs.translation import Keys, Translation, read_number
from honing.interop.configs.verl_model_optim import regroup, take_model_optim, translate_model_optim
from honing.interop.configs.verl_table import walk

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
    "actor_rollout_ref.actor.ppo_epochs": ("grpo.num_iterations", int),  # passes over each rollout batch
    "trainer.total_training_steps": ("trainer.max_duration", lambda value: f"{int(value)}steps"),
    "trainer.total_epochs": ("trainer.max_duration", lambda value: f"{int(value)}epochs"),
    "trainer.save_freq": ("callbacks.checkpointer.save_interval", int),
    "trainer.default_local_dir": ("trainer.save_folder", str),
    "trainer.experiment_name": ("run_name", str),
    "trainer.project_name": ("callbacks.wandb.project", str),
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

# verl's kl_loss_type -> honing's grpo.kl_estimator (verl's core_algos.kl_penalty_forward; its k3 is clamped)
KL_LOSS_TYPES = {"kl": "k1", "k1": "k1", "abs": "abs", "mse": "k2", "k2": "k2", "low_var_kl": "low_var_kl"}
KL_LOSS_TYPES["k3"] = "low_var_kl"
VERL_KL_LOSS_TYPE = "low_var_kl"  # verl's actor default

# settings of how verl lays out its work that change no loss or update of honing's run
MOOT_VERL_KEYS = {
    "actor_rollout_ref.model.use_remove_padding": "a speed setting of verl's forward (padding removed); the losses "
    "are the same, and honing's loss head computes completion positions only",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": "honing scores the old policy's log-probs in "
    "micro-batches of data.micro_batch_size prompts",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": "honing scores the reference's log-probs in "
    "micro-batches of data.micro_batch_size prompts",
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
    flat = regroup(flatten(overrides.values))
    overrides.taken.update(overrides.values)
    model_optim = take_model_optim(flat)
    translate_policy_loss(t, overrides.prefix, flat)
    translate_multi_turn(t, overrides.prefix, flat)
    translate_reward_function(t, overrides.prefix, flat)
    # the rollout's lengths: verl samples up to rollout.response_length (data.max_response_length's by default)
    if flat.get("actor_rollout_ref.rollout.response_length") is not None:
        flat["data.max_response_length"] = flat.pop("actor_rollout_ref.rollout.response_length")
    rollout_prompt = flat.pop("actor_rollout_ref.rollout.prompt_length", None)
    use_kl = flat.pop("actor_rollout_ref.actor.use_kl_loss", None)
    max_prompt = flat.pop("data.max_prompt_length", None)
    max_prompt = rollout_prompt if max_prompt is None else max_prompt  # the filter's length, else the rollout's
    do_sample = flat.pop("actor_rollout_ref.rollout.val_kwargs.do_sample", None)
    kl_loss_type = flat.pop("actor_rollout_ref.actor.kl_loss_type", VERL_KL_LOSS_TYPE)
    mini_batch = flat.pop("actor_rollout_ref.actor.ppo_mini_batch_size", None)
    micro_batch = flat.pop("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", None)
    for key, value in flat.items():
        full = f"{overrides.prefix}.{key}"
        if key in VERL_KEYS:
            path, convert = VERL_KEYS[key]
            try:
                t.set(path, convert(value))
            except (TypeError, ValueError, OverflowError):
                t.refuse(full, f"{value!r} cannot be read (for honing's {path})")
        elif key in ("data.train_files", "data.val_files"):
            # verl's Parquet files (one path or a list), read as the split's sources: Oumi's advice for one's own
            split = "train" if key == "data.train_files" else "validation"
            files = [value] if isinstance(value, str) else value if isinstance(value, list) else None
            if not files or not all(isinstance(path, str) for path in files):
                t.refuse(full, f"{value!r}: expected a Parquet file's path or a list of them")
            else:
                t.set(f"data.{split}", {"sources": [{"path": path} for path in files]})
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
        elif key in MOOT_VERL_KEYS:
            t.note(full, MOOT_VERL_KEYS[key])
        elif key == "data.filter_overlong_prompts" and value:
            t.note(full, "honing drops every prompt that leaves fewer than max_completion_length tokens of seq_len")
        elif key == "data.filter_overlong_prompts":
            t.refuse(full, f"{value!r}: not available: honing drops every prompt too long for data.seq_len")
        elif key == "data.image_key" and value == "images" and t.get("method") == "vl_grpo":
            t.note(full, "honing's image prompts read their images from the 'images' column, as here")
        elif key == "trainer.logger":
            loggers = [value] if isinstance(value, str) else value if isinstance(value, list) else []
            t.set("callbacks.wandb.enabled", "wandb" in loggers)
            t.set("callbacks.tensorboard.enabled", "tensorboard" in loggers)
        else:  # moot, refused, or not verl's: as verl_table's row says (nothing at verl's default)
            walk(t, full, key, value)
    if use_kl is False:
        t.set("grpo.beta", 0.0)
    elif use_kl:
        translate_kl_loss(t, f"{overrides.prefix}.actor_rollout_ref.actor.kl_loss_type", kl_loss_type)
    translate_actor_batches(t, overrides.prefix, mini_batch, micro_batch)
    translate_model_optim(t, overrides.prefix, model_optim)  # after trainer.max_duration: the warmup's steps
    if not do_sample and t.get("grpo.validation.temperature"):  # verl's default do_sample false: greedy whatever
        t.set("grpo.validation.temperature", 0.0)  # val_kwargs.temperature says
    max_prompt = read_number(t, f"{overrides.prefix}.data.max_prompt_length", max_prompt, int) if max_prompt else None
    if max_prompt is not None:
        # honing keeps a prompt when it leaves max_completion_length tokens of data.seq_len
        completion = t.get("grpo.max_completion_length", GRPOSection.model_fields["max_completion_length"].default)
        t.set("data.seq_len", max_prompt + int(completion))


def translate_kl_loss(t: Translation, key: str, kl_loss_type: Any) -> None:
    """verl's ``use_kl_loss``: β × ``kl_loss_type``'s estimate in the loss, not multiplied by the ratio."""
    if kl_loss_type not in KL_LOSS_TYPES:
        t.refuse(
            key,
            f"{kl_loss_type!r}: honing's grpo.kl_estimator has {sorted(KL_LOSS_TYPES)} (verl's '+' "
            "straight-through variants and 'full' are not built)",
        )
        return
    t.set("grpo.kl_estimator", KL_LOSS_TYPES[kl_loss_type])
    t.set("grpo.use_bias_correction_kl", False)


def translate_actor_batches(t: Translation, prefix: str, mini_batch: Any, micro_batch: Any) -> None:
    """``ppo_mini_batch_size`` (prompts per optimizer step: ``grpo.steps_per_generation`` updates per rollout batch)
    and ``ppo_micro_batch_size_per_gpu`` (completions per forward: ``data.micro_batch_size`` in prompts when whole
    groups, else ``grpo.micro_batch_completions``)."""
    prompts = int(t.get("data.global_batch_size", 0))
    if mini_batch is not None:
        key = f"{prefix}.actor_rollout_ref.actor.ppo_mini_batch_size"
        mini_batch = read_number(t, key, mini_batch, int)
        if mini_batch is not None and (mini_batch < 1 or prompts % mini_batch):
            t.refuse(key, f"{mini_batch} must divide data.train_batch_size ({prompts}), as in verl")
        elif mini_batch is not None:
            # train_batch_size / ppo_mini_batch_size updates per rollout batch, each of whole groups
            t.set("grpo.steps_per_generation", prompts // mini_batch)
    if micro_batch is not None:
        key = f"{prefix}.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"
        micro_batch = read_number(t, key, micro_batch, int)
        group = int(t.get("grpo.num_generations", 8))
        if micro_batch is None:
            return
        if micro_batch < 1:
            t.refuse(key, f"{micro_batch}: expected a positive number of completions")
        elif micro_batch % group:  # part of a group per forward pass, as in verl (checked against the step at launch)
            t.set("grpo.micro_batch_completions", micro_batch)
        else:
            t.set("data.micro_batch_size", micro_batch // group)  # prompts per micro-batch


POLICY_LOSS = "actor_rollout_ref.actor.policy_loss.loss_mode"
# verl's policy_loss.loss_mode -> honing's grpo keys (verl's core_algos.compute_policy_loss_*): gspo is GSPO-token,
# sg[s_i]·π/sg[π], aggregated seq-mean-token-mean whatever loss_agg_mode says; sapo the sigmoid gate, likewise
LOSS_MODES = {
    "vanilla": {},
    "gspo": {"grpo.loss_type": "grpo", "grpo.importance_sampling_level": "sequence_token"},
    "sapo": {"grpo.loss_type": "sapo"},
}
REFUSED_LOSS_MODES = {
    "cispo": "verl clips the weight to [1 - clip_ratio_low, 1 + clip_ratio_high]; honing's cispo (TRL's) caps it "
    "above only",
    "gpg": "GPG's unclipped -A·log π is not built",
    "clip_cov": "Clip-Cov's covariance-selected clipping is not built",
    "kl_cov": "KL-Cov's covariance-selected KL penalty is not built",
    "geo_mean": "GMPO's geometric-mean ratio is not built",
}
SAPO_TEMPERATURES = {"actor_rollout_ref.actor.tau_pos": "grpo.sapo_temperature_pos",
                     "actor_rollout_ref.actor.tau_neg": "grpo.sapo_temperature_neg"}  # fmt: skip


def translate_policy_loss(t: Translation, prefix: str, flat: dict[str, Any]) -> None:
    """``policy_loss.loss_mode`` (vanilla, gspo, sapo) and SAPO's ``tau_pos`` / ``tau_neg``; set after
    ``loss_agg_mode`` (gspo and sapo aggregate per sequence whatever it says)."""
    mode = flat.pop(POLICY_LOSS, None)
    temperatures = {key: flat.pop(key) for key in SAPO_TEMPERATURES if key in flat}
    if mode is not None and mode not in LOSS_MODES:
        why = REFUSED_LOSS_MODES.get(mode, "not one of verl's loss modes")
        t.refuse(f"{prefix}.{POLICY_LOSS}", f"{mode!r}: {why}; honing has vanilla, gspo and sapo")
        return
    if mode in ("gspo", "sapo"):
        flat.pop("actor_rollout_ref.actor.loss_agg_mode", None)
    for path, value in LOSS_MODES.get(mode or "vanilla", {}).items():
        t.set(path, value)
    for key, value in temperatures.items():
        if mode == "sapo":
            number = read_number(t, f"{prefix}.{key}", value, float)
            if number is not None:
                t.set(SAPO_TEMPERATURES[key], number)
        elif value is not None:
            t.note(
                f"{prefix}.{key}", f"unused: verl reads it with policy_loss.loss_mode sapo, not {mode or 'vanilla'!r}"
            )


MULTI_TURN = "actor_rollout_ref.rollout.multi_turn"


def translate_multi_turn(t: Translation, prefix: str, flat: dict[str, Any]) -> None:
    """verl's tool agent loop limits as honing's tool-use keys (read with ``grpo.tools``): assistant turns, a tool
    answer's characters, and the hermes tool-call format."""
    for name, path in (("max_assistant_turns", "grpo.max_turns"), ("max_tool_response_length",
                                                                   "grpo.max_tool_response_length")):  # fmt: skip
        value = flat.pop(f"{MULTI_TURN}.{name}", None)
        if value is not None:
            number = read_number(t, f"{prefix}.{MULTI_TURN}.{name}", value, int)
            if number is not None:
                t.set(path, number)
    tool_format = flat.pop(f"{MULTI_TURN}.format", None)
    if tool_format == "hermes":
        t.set("grpo.tool_call_format", "hermes")
    elif tool_format is not None:
        t.refuse(f"{prefix}.{MULTI_TURN}.format", f"{tool_format!r}: honing parses hermes and json tool calls")


def translate_reward_function(t: Translation, prefix: str, flat: dict[str, Any]) -> None:
    """``custom_reward_function.path`` (``pkg://module`` or a .py file under the working directory) and ``name``
    (verl's ``compute_score``): the run's one reward, called with verl's signature (``verl:module:function``)."""
    path = flat.pop("custom_reward_function.path", None)
    name = flat.pop("custom_reward_function.name", None)
    if not path:
        if name and name != "compute_score":
            t.note(f"{prefix}.custom_reward_function.name", "unused without custom_reward_function.path")
        return
    path = str(path)
    if path.startswith("pkg://"):
        module = path.removeprefix("pkg://")
    elif path.endswith(".py") and not path.startswith(("/", "~")) and ".." not in path:
        module = path.removesuffix(".py").removeprefix("./").replace("/", ".")
    else:
        t.refuse(
            f"{prefix}.custom_reward_function.path",
            f"{path!r}: give pkg://module or a .py file under the working directory (imported as a module)",
        )
        return
    t.set("grpo.rewards", [{"name": f"verl:{module}:{name or 'compute_score'}"}])


#: the hub data sets verl scores with a built-in when a config names no reward (``default_compute_score`` picks it
#: by the row's ``data_source``), and honing's reward that gives the same score from the ``answer`` column that
#: honing's named data set of that id writes
VERL_DEFAULT_REWARDS: dict[str, str] = {"openai/gsm8k": "gsm8k", "hiyouga/geometry3k": "geo3k"}


def verl_default_reward(t: Translation) -> str | None:
    """honing's reward for verl's built-in score when every data source is a hub data set verl scores by its
    ``data_source`` (all the same one); None otherwise."""
    sources = [source for split in ("train", "validation") for source in t.get(f"data.{split}.sources") or []]
    hub_ids = {str(source.get("path", "")).split(":", 1)[0] for source in sources if isinstance(source, dict)}
    rewards = {VERL_DEFAULT_REWARDS.get(hub_id) for hub_id in hub_ids}
    return rewards.pop() if len(rewards) == 1 and None not in rewards else None
