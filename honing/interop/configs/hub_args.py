"""transformers' ``push_to_hub`` / ``hub_*`` keys (TrainingArguments, so LLaMA-Factory's and TRL's, and axolotl's
``hub_model_id`` / ``hub_strategy``) as honing's ``callbacks.hub``."""

from __future__ import annotations

import os

from honing.interop.configs.translation import Keys, Translation

# transformers' hub_strategy -> honing's callbacks.hub.strategy; every_save is read below
STRATEGIES = {"end": "end", "checkpoint": "checkpoint", "all_checkpoints": "all_checkpoints"}
EVERY_SAVE = (
    "'every_save' pushes the saved model at each save; honing's checkpoints are resumable DCP folders, not model "
    "folders, so the final export is pushed (callbacks.hub.strategy: checkpoint also pushes each checkpoint, with "
    "its optimizer, to last-checkpoint/)"
)
UNUSED = "unused without a push (push_to_hub / hub_model_id), as in transformers"


def translate_hub(t: Translation, top: Keys, *, push: bool) -> None:
    """``hub_model_id`` (else, as transformers names it, ``output_dir``'s folder name), ``hub_strategy`` (transformers'
    default ``every_save``), ``hub_private_repo``, ``hub_revision`` and ``hub_always_push`` when ``push``; each a
    note when nothing is pushed. A LoRA run pushes its adapter, as the Trainer's ``save_model`` writes one."""
    names = ("hub_model_id", "hub_strategy", "hub_private_repo", "hub_revision", "hub_always_push")
    if not push:
        for name in names:
            top.note(name, UNUSED)
        return
    repo = top.take("hub_model_id")
    folder = t.get("trainer.save_folder")
    if repo is None and folder:
        repo = os.path.basename(os.path.normpath(str(folder)))
    if not repo:
        t.refuse(top.key("hub_model_id"), "required with push_to_hub (no output_dir to name the repository after)")
        return
    t.set("callbacks.hub.repo_id", str(repo))
    strategy = str(top.take("hub_strategy", "every_save"))
    if strategy == "every_save":
        t.note(top.key("hub_strategy") if top.has("hub_strategy") else "hub_strategy (default)", EVERY_SAVE)
    elif strategy in STRATEGIES:
        t.set("callbacks.hub.strategy", STRATEGIES[strategy])
    else:
        t.refuse(top.key("hub_strategy"), f"{strategy!r} is not available; expected end, every_save, checkpoint or "
                                          "all_checkpoints")  # fmt: skip
    if t.get("model.lora") is not None:
        t.set("callbacks.hub.folder", "adapter")
    if top.take("hub_private_repo"):
        t.set("callbacks.hub.private", True)
    top.copy("hub_revision", "callbacks.hub.revision", str)
    top.note("hub_always_push", "not needed: honing queues every push in order and skips none")
