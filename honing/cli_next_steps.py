"""The line ``honing train`` prints after a finished run: where the trained model is and the command that uses it
(a first run otherwise ends at ``done`` with no hint of what the folder is for)."""

from __future__ import annotations

import os
import shlex
import shutil


def program_name(argv0: str) -> str:
    """How the user can call honing again: ``honing`` when it is on the PATH, else the path they typed
    (``.venv/bin/honing`` with the environment not activated)."""
    if os.path.basename(argv0) != "honing":  # python -m honing, or a test calling main()
        return "honing"
    on_path = shutil.which("honing")
    if on_path and os.path.realpath(on_path) == os.path.realpath(argv0):
        return "honing"
    return argv0


def next_steps_line(save_folder: str, method: str, program: str = "honing") -> str:
    """``next: honing chat SAVE_FOLDER/hf ...``: the verb that fits the method's model, on its export."""
    hf = f"{save_folder.rstrip('/')}/hf"
    if "://" in save_folder:  # honing chat and generate read local folders
        return f"next: the model is in {hf} (Hugging Face format); copy it to this machine to chat or generate with it"
    model = shlex.quote(hf)
    if method == "reward":
        return (
            f"next: the reward model is in {hf} (AutoModelForSequenceClassification); "
            f"a grpo.rewards entry named reward_model:{hf} scores GRPO's completions with it"
        )
    if method == "pretrain":
        return f"next: {program} generate {model} --prompt TEXT continues a text with the trained model ({hf})"
    return f"next: {program} chat {model} to talk with the trained model, or {program} generate {model} --prompt TEXT"
