"""After ``done``, ``honing train`` says where the model is and the command that uses it (issue 45)."""

from __future__ import annotations

import os
import stat

from honing.cli_arguments import one_line
from honing.cli_next_steps import next_steps_line, program_name


def test_a_chat_model_is_answered_with_honing_chat_on_its_export():
    line = next_steps_line("runs/sft-full", "sft", ".venv/bin/honing")
    assert line == (
        "next: .venv/bin/honing chat runs/sft-full/hf to talk with the trained model, or .venv/bin/honing generate "
        "runs/sft-full/hf --prompt TEXT"
    )
    assert line == one_line(line)


def test_a_pretrained_model_continues_text_and_paths_are_quoted():
    line = next_steps_line("runs/my run/", "pretrain")
    assert line.startswith("next: honing generate 'runs/my run/hf' --prompt TEXT continues a text")


def test_a_reward_model_and_a_remote_folder_are_not_chatted_with():
    assert "chat" not in next_steps_line("runs/reward", "reward")
    assert "reward_model:runs/reward/hf" in next_steps_line("runs/reward", "reward")
    remote = next_steps_line("s3://bucket/run", "sft")
    assert "s3://bucket/run/hf" in remote and "copy it to this machine" in remote


def test_the_program_is_named_as_the_user_can_call_it(tmp_path, monkeypatch):
    script = tmp_path / "bin" / "honing"
    script.parent.mkdir()
    script.write_text("#!/bin/sh\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", "/usr/bin")
    assert program_name(str(script)) == str(script)  # not on the PATH: the path typed
    monkeypatch.setenv("PATH", f"{script.parent}{os.pathsep}/usr/bin")
    assert program_name(str(script)) == "honing"
    assert program_name("/somewhere/honing/__main__.py") == "honing"
