"""``honing push`` up to the upload call (no network here): the run's hf/ folder, model card included, goes to the
named repository; without a token it stops with one line before any request."""

from __future__ import annotations

import pytest

import honing.infer.push as push_module
from honing.cli import main

pytestmark = pytest.mark.slow


class FakeHub:
    """Records what ``HfApi`` is asked to do."""

    calls: list[tuple[str, dict]] = []

    def __init__(self, token=None):
        FakeHub.calls.append(("init", {"token": token}))

    def create_repo(self, repo_id, **kwargs):
        FakeHub.calls.append(("create_repo", {"repo_id": repo_id, **kwargs}))

    def upload_folder(self, **kwargs):
        FakeHub.calls.append(("upload_folder", kwargs))
        return f"https://huggingface.co/{kwargs['repo_id']}/commit/abc"


def test_push_uploads_the_hf_folder_with_its_card(sft_run, monkeypatch, capsys):
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "HfApi", FakeHub)
    FakeHub.calls.clear()
    assert main(["push", str(sft_run), "me/reverse", "--token", "hf_test", "--private"]) == 0
    assert FakeHub.calls[0] == ("init", {"token": "hf_test"})
    assert FakeHub.calls[1] == (
        "create_repo",
        {"repo_id": "me/reverse", "private": True, "exist_ok": True, "repo_type": "model"},
    )
    upload = FakeHub.calls[2][1]
    assert upload["folder_path"] == str(sft_run / "hf") and upload["repo_id"] == "me/reverse"
    assert (sft_run / "hf" / "README.md").exists()
    assert capsys.readouterr().out == f"pushed {sft_run / 'hf'} to https://huggingface.co/me/reverse/commit/abc\n"


def test_push_without_a_token_or_adapter_is_one_line(sft_run, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path))  # no saved login here
    assert main(["push", str(sft_run), "me/reverse"]) == 2
    assert capsys.readouterr().err == (
        "honing: error: push: no Hugging Face token: pass --token, set HF_TOKEN or run `hf auth login`\n"
    )
    assert main(["push", str(sft_run), "me/reverse", "--adapter", "--token", "x"]) == 2
    assert capsys.readouterr().err == (
        f"honing: error: RUN: {sft_run} holds no LoRA adapter (adapter/ with adapter_config.json); train the run "
        "first, or give the folder itself\n"
    )
    assert push_module.folder_to_push(str(sft_run / "hf"), adapter=False) == str(sft_run / "hf")
