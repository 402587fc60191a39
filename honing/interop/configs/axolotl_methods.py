"""axolotl's preference and GRPO keys (``rl_beta``, ``dpo_*``, ``orpo_alpha``, ``simpo_gamma``, ``kto_*`` and the
``trl`` section) as the method sections of honing's config (``axolotl`` reads the rest)."""

from __future__ import annotations

from honing.interop.configs.axolotl_table import TABLE
from honing.interop.configs.key_tables import key_table
from honing.interop.configs.machine_options import settle_vllm_mode
from honing.interop.configs.schema_table import finish
from honing.interop.configs.translation import Keys, Translation

SOURCE, KEYS = key_table("axolotl")

SCHEMA = f"axolotl ({SOURCE})"


def translate_method_keys(t: Translation, top: Keys, method: str) -> None:
    """The preference methods' and GRPO's keys; ``trl`` as GRPO's section."""
    beta = top.number("rl_beta", float)
    if beta is None:
        beta = top.number("dpo_beta", float)
    top.take("dpo_beta")
    trl = t.section(top.take("trl"), "trl")
    trl_beta = trl.number("beta", float)
    beta = trl_beta if trl_beta is not None else beta
    if beta is not None and method in ("dpo", "cpo", "kto", "grpo"):
        t.set(f"{method}.beta", beta)
    elif beta is not None and method == "orpo" and not top.has("orpo_alpha"):
        t.set("orpo.beta", beta)
    elif beta is not None:
        t.refuse("rl_beta", f"unused by method {method!r}")
    for name, path, kind, methods in (
        ("dpo_label_smoothing", "dpo.label_smoothing", float, ("dpo",)),
        ("rpo_alpha", "dpo.rpo_alpha", float, ("dpo",)),
        ("orpo_alpha", "orpo.beta", float, ("orpo",)),
        ("simpo_gamma", "cpo.simpo_gamma", float, ("cpo",)),
        ("cpo_alpha", "cpo.cpo_alpha", float, ("cpo",)),
        ("kto_desirable_weight", "kto.desirable_weight", float, ("kto",)),
        ("kto_undesirable_weight", "kto.undesirable_weight", float, ("kto",)),
    ):
        if top.has(name) and method not in methods:
            top.refuse(name, f"unused by method {method!r}")
        elif top.has(name):
            top.copy(name, path, kind)
    translate_dpo_losses(t, top, method)
    if top.take("precompute_ref_log_probs"):
        t.set("dpo.reference", "precompute")
    translate_trl(t, trl, method)


def translate_dpo_losses(t: Translation, top: Keys, method: str) -> None:
    """``dpo_loss_type`` (a name or a list, summed by ``dpo_loss_weights``: MPO) and ``dpo_use_weighting`` (WPO), as
    TRL's DPOConfig takes them from axolotl, into the ``dpo`` section."""
    names = ("dpo_loss_type", "dpo_loss_weights", "dpo_use_weighting")
    if method != "dpo":
        for name in names:
            top.refuse(name, f"unused by method {method!r} (TRL's DPOConfig's)")
        return
    losses = top.names("dpo_loss_type")
    if losses:
        t.set("dpo.loss_type", losses[0] if len(losses) == 1 else losses)
    weights = top.take("dpo_loss_weights")
    if weights is not None:
        if isinstance(weights, list) and all(isinstance(w, (int, float)) and not isinstance(w, bool) for w in weights):
            t.set("dpo.loss_weights", [float(w) for w in weights])
        else:
            t.refuse("dpo_loss_weights", f"{weights!r} is not a list of numbers (one per dpo_loss_type)")
    top.copy("dpo_use_weighting", "dpo.use_weighting", bool)


def translate_trl(t: Translation, trl: Keys, method: str) -> None:
    """axolotl's ``trl`` section (TRL's GRPO keys) as ``grpo.*``."""
    if method != "grpo":
        finish(trl, TABLE["trl"], KEYS["trl"], SCHEMA)
        return
    for name, kind in (("max_completion_length", int), ("num_generations", int), ("temperature", float),
                       ("top_p", float), ("top_k", int), ("epsilon", float), ("epsilon_high", float),
                       ("num_iterations", int), ("importance_sampling_level", str), ("loss_type", str),
                       ("use_vllm", bool), ("vllm_mode", str), ("vllm_server_host", str), ("vllm_server_port", int),
                       ("vllm_server_timeout", float), ("min_p", float), ("repetition_penalty", float)):  # fmt: skip
        trl.copy(name, f"grpo.{name}", kind)
    settle_vllm_mode(t, "grpo", trl.key("vllm_mode"))
    scale = trl.take("scale_rewards")
    if scale is not None:
        t.set("grpo.scale_rewards", "group" if scale is True else "none" if scale is False else str(scale))
    rewards, weights = trl.names("reward_funcs"), trl.take("reward_weights")
    if rewards:
        weights = weights if isinstance(weights, list) and len(weights) == len(rewards) else [1.0] * len(rewards)
        t.set("grpo.rewards", [{"name": name, "weight": float(w)} for name, w in zip(rewards, weights)])
    if trl.take("log_completions"):
        t.note("trl.log_completions", "completions and rewards go to samples.jsonl every grpo.sample_interval steps")
    finish(trl, TABLE["trl"], KEYS["trl"], SCHEMA)
