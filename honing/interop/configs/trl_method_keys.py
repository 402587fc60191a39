"""Each TRL config class's own keys (beside ``TrainingArguments``') as honing's method section, model and data keys:
one reader per class (``READERS``), each taking the keys its verdict table honours; ``trl_args`` calls them and
``schema_table.finish`` notes or refuses the rest."""

from __future__ import annotations

from collections.abc import Callable

from honing.interop.configs.key_tables import key_table
from honing.interop.configs.machine_options import settle_vllm_mode
from honing.interop.configs.schema_table import Value, schema_default
from honing.interop.configs.translation import Keys, Translation, schema_has
from honing.interop.configs.trl_extra_keys import read_chat_template_path, read_online_extras
from honing.interop.configs.trl_grpo_batch import steps_as_rollout_batches, translate_trl_grpo_batch
from honing.interop.configs.trl_online_table import ENTROPY_KEYS, GRPO_LOSS_KEYS, SAME_NAME

KEYS = key_table("trl").keys


def class_fields(config_class: str) -> dict[str, tuple[str, str]]:
    """Every field of ``config_class``: key -> (type, default as source text)."""
    return {**KEYS["TrainingArguments"], **KEYS[config_class]}


def class_default(config_class: str, key: str) -> Value:
    """A field's default in ``config_class``."""
    return schema_default(class_fields(config_class)[key][1])


def read_model(t: Translation, top: Keys, config_class: str) -> None:
    """``model_init_kwargs``, ``trust_remote_code``, ``disable_dropout`` (TRL's default filled in),
    ``router_aux_loss_coef`` (SFT only), ``max_length`` (TRL's 1024 filled in), ``activation_offloading``."""
    kwargs = top.take("model_init_kwargs")
    if isinstance(kwargs, dict):
        t.set("model.load_kwargs", dict(kwargs))
    elif kwargs is not None:
        t.refuse("model_init_kwargs", f"{kwargs!r}: give a mapping of from_pretrained's keyword arguments")
    top.copy("trust_remote_code", "model.trust_remote_code", bool)
    if "disable_dropout" in class_fields(config_class):
        if top.has("disable_dropout"):
            top.copy("disable_dropout", "model.disable_dropout", bool)
        elif class_default(config_class, "disable_dropout"):
            t.default("model.disable_dropout", True, f"{config_class}.disable_dropout")
    if config_class == "SFTConfig":
        top.copy("router_aux_loss_coef", "model.router_aux_loss_coef", float)
    if "max_length" in class_fields(config_class):
        if top.has("max_length"):
            top.copy("max_length", "data.seq_len", int)
        else:
            t.default("data.seq_len", class_default(config_class, "max_length"), f"{config_class}.max_length")
    top.copy("activation_offloading", "parallel.activation_offload", bool)


def read_training_arguments(t: Translation, top: Keys, config_class: str) -> None:
    """Plain ``TrainingArguments``: nothing of its own."""


def read_sft(t: Translation, top: Keys, config_class: str) -> None:
    """``SFTConfig``: packing (TRL's false filled in), which tokens train, truncation, the loss, the chat template's
    file."""
    read_model(t, top, config_class)
    read_chat_template_path(t, top)
    if top.has("packing"):
        top.copy("packing", "data.packing", bool)
    elif config_class == "SFTConfig":
        t.default("data.packing", False, f"{config_class}.packing")
    assistant, completion = top.take("assistant_only_loss"), top.take("completion_only_loss")
    if assistant or completion:
        t.set("data.train_on", "assistant")
    elif assistant is False and completion is False or completion is False:
        t.set("data.train_on", "all")
    else:  # TRL trains on every token of a conversation unless assistant_only_loss
        t.default("data.train_on", "all", f"{config_class}.assistant_only_loss")
    mode = top.take("truncation_mode")
    if mode == "keep_start":
        t.set("data.overlong", "truncate")
    elif mode is not None:
        t.refuse("truncation_mode", f"{mode!r} is not available: honing keeps an example's start ('keep_start')")
    loss = top.take("loss_type")
    if loss not in (None, "nll"):
        t.refuse("loss_type", f"{loss!r} is not available: honing's SFT loss is cross-entropy ('nll')")


def read_gkd(t: Translation, top: Keys, config_class: str) -> None:
    """``GKDConfig``: an SFT config with the distillation's keys as ``distill.*``."""
    read_sft(t, top, config_class)
    for name, kind in (("temperature", float), ("lmbda", float), ("beta", float), ("max_new_tokens", int),
                       ("teacher_model_name_or_path", str), ("seq_kd", bool)):  # fmt: skip
        top.copy(name, f"distill.{name}", kind)
    kwargs = top.take("teacher_model_init_kwargs")
    if isinstance(kwargs, dict):
        t.set("distill.teacher_model_init_kwargs", dict(kwargs))
    elif kwargs is not None:
        t.refuse("teacher_model_init_kwargs", f"{kwargs!r}: give a mapping of from_pretrained's keyword arguments")


def read_dpo(t: Translation, top: Keys, config_class: str) -> None:
    """``DPOConfig``: beta, the loss types (one or a weighted list) and their settings, the reference precomputed."""
    read_model(t, top, config_class)
    read_dpo_loss(t, top)
    if top.take("precompute_ref_log_probs"):
        t.set("dpo.reference", "precompute")


#: DPOConfig's loss settings honing's dpo section has under the same names, and their types
DPO_LOSS_KEYS = (
    ("beta", float),
    ("label_smoothing", float),
    ("f_divergence_type", str),
    ("f_alpha_divergence_coef", float),
    ("ld_alpha", float),
    ("use_weighting", bool),
    ("discopop_tau", float),
)


def read_dpo_loss(t: Translation, keys: Keys) -> None:
    """DPOConfig's loss keys (a DPOConfig's, or Oumi's ``trainer_kwargs``) as the ``dpo`` section's: ``loss_type`` a
    name or a list (one name: the name), ``loss_weights`` a list of numbers, the others as they are."""
    for name, kind in DPO_LOSS_KEYS:
        keys.copy(name, f"dpo.{name}", kind)
    losses = keys.peek("loss_type")
    names = [losses] if isinstance(losses, str) else losses
    if isinstance(names, list) and names and all(isinstance(name, str) for name in names):
        keys.take("loss_type")
        if names != ["sigmoid"]:
            t.set("dpo.loss_type", names[0] if len(names) == 1 else list(names))
    else:
        keys.refuse("loss_type", f"{losses!r} is not a loss type name or a list of them")
    weights = keys.peek("loss_weights")
    if isinstance(weights, list) and all(isinstance(w, (int, float)) and not isinstance(w, bool) for w in weights):
        keys.take("loss_weights")
        t.set("dpo.loss_weights", [float(w) for w in weights])
    else:
        keys.refuse("loss_weights", f"{weights!r} is not a list of numbers (one per loss_type)")


def read_kto(t: Translation, top: Keys, config_class: str) -> None:
    """``KTOConfig``: beta, the loss type, the weights, the reference precomputed."""
    read_model(t, top, config_class)
    for name, kind in (("beta", float), ("desirable_weight", float), ("undesirable_weight", float),
                       ("loss_type", str)):  # fmt: skip
        top.copy(name, f"kto.{name}", kind)
    if top.take("precompute_ref_log_probs"):
        t.set("kto.reference", "precompute")
        # TRL's batches are fixed by its sequential loader; honing's shuffle, so the scored mismatch is the split's
        t.set("kto.kl_pairing", "split")


def read_orpo(t: Translation, top: Keys, config_class: str) -> None:
    """``ORPOConfig``: beta."""
    read_model(t, top, config_class)
    top.copy("beta", "orpo.beta", float)


def read_cpo(t: Translation, top: Keys, config_class: str) -> None:
    """``CPOConfig`` (CPO and SimPO): beta, the loss, its terms' weights."""
    read_model(t, top, config_class)
    for name, kind in (("beta", float), ("label_smoothing", float), ("loss_type", str), ("cpo_alpha", float),
                       ("simpo_gamma", float), ("alpha", float)):  # fmt: skip
        top.copy(name, f"cpo.{name}", kind)


def read_reward(t: Translation, top: Keys, config_class: str) -> None:
    """``RewardConfig``: the centring of the rewards, the chat template's file."""
    read_model(t, top, config_class)
    read_chat_template_path(t, top)
    top.copy("center_rewards_coefficient", "reward.center_rewards_coefficient", float)


def read_online(t: Translation, top: Keys, config_class: str) -> None:
    """``GRPOConfig`` / ``RLOOConfig``: sampling, clipping, KL and the rollout server as ``grpo.*`` / ``rloo.*``."""
    read_model(t, top, config_class)
    section = "grpo" if config_class == "GRPOConfig" else "rloo"
    for name in SAME_NAME:
        kind = {"int": int, "float": float, "bool": bool, "str": str}.get(class_fields(config_class)[name][0])
        if name == "steps_per_generation":  # counts per-device batches: read with the batch below
            top.take(name)
        else:
            top.copy(name, f"{section}.{name}", kind)
    read_online_batch(t, top, config_class, section)
    read_online_extras(t, top, config_class, section)
    if not top.has("max_completion_length"):
        t.default(f"{section}.max_completion_length", 512, f"{config_class}.max_completion_length")
    if top.peek("use_vllm") and not top.has("vllm_mode"):
        t.set(f"{section}.vllm_mode", "colocate")  # TRL's default; honing's is a server
    settle_vllm_mode(t, section, top.key("vllm_mode"))
    top.copy("mask_truncated_completions", f"{section}.mask_truncated_completions", bool)
    if section == "rloo":
        top.copy("normalize_advantages", "rloo.normalize_advantages", bool)
        clip = top.take("reward_clip_range")
        if clip is not None:
            t.set("rloo.reward_clip_range", [float(bound) for bound in clip])
        return
    top.copy("importance_sampling_level", "grpo.importance_sampling_level", str)
    top.copy("loss_type", "grpo.loss_type", str)
    top.copy("use_bias_correction_kl", "grpo.use_bias_correction_kl", bool)
    for name in GRPO_LOSS_KEYS:
        top.copy(name, f"grpo.{name}", str if name == "multi_objective_aggregation" else float)
    for name in ENTROPY_KEYS:
        top.copy(name, f"grpo.{name}", bool if name == "use_adaptive_entropy" else float)
    top.copy("off_policy_mask_threshold", "grpo.off_policy_mask_threshold", float)
    scale = top.take("scale_rewards")
    if scale is not None:
        t.set("grpo.scale_rewards", "group" if scale is True else "none" if scale is False else str(scale))
    iterations = top.number("max_tool_calling_iterations", int)
    if iterations is not None and schema_has("grpo.max_turns"):
        t.set("grpo.max_turns", iterations + 1)


def read_online_batch(t: Translation, top: Keys, config_class: str, section: str) -> None:
    """TRL's batch (completions per device; ``steps_per_generation`` per-device batches per generation) as prompts
    per rank and rollout batches (``trl_grpo_batch``), over the per-device rows ``translate_training`` wrote."""
    counts = {
        name: top.peek(name, class_default(config_class, name))
        for name in ("per_device_train_batch_size", "gradient_accumulation_steps", "num_generations", "num_iterations")
    }
    spg = top.peek("steps_per_generation")
    if not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in [*counts.values(), spg or 1]):
        return  # refused where it is read, or by honing's bounds
    keys = {
        "per_device": "per_device_train_batch_size",
        "accumulation": "gradient_accumulation_steps",
        "generations": "num_generations",
        "steps_per_generation": "steps_per_generation",
    }
    given = any(top.has(name) for name in counts)  # the file's batch, or TRL's defaults (header)
    updates = translate_trl_grpo_batch(
        t,
        keys,
        given=given or spg is not None,
        whose=f"{config_class}.per_device_train_batch_size x steps_per_generation / num_generations",
        section=section,
        per_device=counts["per_device_train_batch_size"],
        accumulation=counts["gradient_accumulation_steps"],
        generations=counts["num_generations"],
        steps_per_generation=spg,
        num_iterations=counts["num_iterations"],
    )
    steps_as_rollout_batches(t, updates, "", "steps_per_generation" if spg else "num_iterations")


READERS: dict[str, Callable[[Translation, Keys, str], None]] = {
    "TrainingArguments": read_training_arguments,
    "SFTConfig": read_sft,
    "GKDConfig": read_gkd,
    "DPOConfig": read_dpo,
    "KTOConfig": read_kto,
    "ORPOConfig": read_orpo,
    "CPOConfig": read_cpo,
    "RewardConfig": read_reward,
    "GRPOConfig": read_online,
    "RLOOConfig": read_online,
}
