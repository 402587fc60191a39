"""Oumi's ``training.gkd`` (``TRL_GKD``) and ``training.gold`` (``TRL_GOLD``) as honing's ``distill`` section: TRL's
GKD keys under the same names. GOLD's cross-tokenizer alignment (ULD) is not built, so a GOLD config that asks for
it, or names a teacher tokenizer of its own, is refused by name."""

from __future__ import annotations

from honing.interop.configs.oumi_table import GOLD_ENGINE_KEYS
from honing.interop.configs.translation import Keys, Translation

#: Oumi's trainer_type for each distillation section
DISTILL_SECTIONS = {"gkd": "TRL_GKD", "gold": "TRL_GOLD"}
ULD_REFUSAL = (
    "GOLD's cross-tokenizer alignment (ULD) is not built in honing: use a teacher with the student's tokenizer"
)


def translate_distill(t: Translation, training: Keys, *, method: str) -> None:
    """``training.gkd`` / ``training.gold`` as ``distill.*`` (each refused for another method)."""
    chosen = str(training.peek("trainer_type", "HF")).upper()
    for name, trainer in DISTILL_SECTIONS.items():
        section = t.section(training.take(name), f"training.{name}")
        if method != "distill" or chosen != trainer:
            if section.values:
                t.refuse(f"training.{name}", f"used by trainer_type {trainer} only")
            continue
        translate_section(t, section, gold=name == "gold")


def translate_section(t: Translation, section: Keys, *, gold: bool) -> None:
    """One section's keys: the teacher, the mix of on-policy steps, the divergence and the sampling."""
    section.copy("teacher_model_name_or_path", "distill.teacher_model_name_or_path", str)
    kwargs = section.take("teacher_model_init_kwargs")
    if isinstance(kwargs, dict):
        t.set("distill.teacher_model_init_kwargs", kwargs)
    elif kwargs is not None:
        t.refuse(section.key("teacher_model_init_kwargs"), f"{kwargs!r}: expected a mapping")
    for key in ("lmbda", "beta", "temperature"):
        section.copy(key, f"distill.{key}", float)
    section.copy("seq_kd", "distill.seq_kd", bool)
    # TRL's GKD and GOLD disable the student's dropout unless told not to
    if section.has("disable_dropout"):
        section.copy("disable_dropout", "model.disable_dropout", bool)
    else:
        t.default("model.disable_dropout", True, "TRL's GKDConfig.disable_dropout")
    if not gold:
        section.copy("max_new_tokens", "distill.max_new_tokens", int)
        section.done()
        return
    section.copy("max_completion_length", "distill.max_new_tokens", int)
    # GOLD samples with top_p 0.95 by default (Oumi's GoldParams), GKD with the whole distribution
    if section.has("top_p"):
        section.copy("top_p", "distill.top_p", float)
    else:
        t.default("distill.top_p", 0.95, "Oumi's GoldParams.top_p")
    section.copy("top_k", "distill.top_k", int)
    if section.take("use_uld_loss"):
        t.refuse("training.gold.use_uld_loss", ULD_REFUSAL)
    section.refuse("teacher_tokenizer_name_or_path", ULD_REFUSAL)
    for key in [name for name in section.values if name.startswith("uld_") or name == "use_extended_uld"]:
        section.note(key, "unused: it tunes GOLD's cross-tokenizer loss (use_uld_loss), which honing does not build")
    for key in GOLD_ENGINE_KEYS:
        section.note(key, "unused: honing's own decoder samples the completions, in the training process")
    section.done()
