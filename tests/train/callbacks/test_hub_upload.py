"""callbacks.hub: the final export (and, by strategy, each checkpoint) pushed with huggingface_hub's upload_folder,
the API mocked (no network): what is pushed where, a bad repository failing before any step, no token handled."""

from __future__ import annotations

import os

import pytest

from honing.errors import ConfigError
from honing.train.callbacks import hub_upload
from honing.train.callbacks.hub_upload import HubUploadCallback
from tests.helpers import make_trainer
from tests.train.callbacks.test_upload import FakeExport

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")


class FakeApi:
    """huggingface_hub.HfApi's two calls, recorded with the files each pushed folder held at that moment."""

    def __init__(self, fail_create: bool = False):
        self.fail_create = fail_create
        self.created, self.pushes = [], []

    def create_repo(self, repo_id, *, private, exist_ok, repo_type):
        if self.fail_create:
            raise PermissionError("401 Unauthorized")
        self.created.append((repo_id, private, exist_ok, repo_type))
        return type("RepoUrl", (), {"repo_id": repo_id if "/" in repo_id else f"me/{repo_id}"})()

    def upload_folder(
        self, *, folder_path, repo_id, repo_type, path_in_repo, revision, commit_message, delete_patterns
    ):
        files = sorted(os.listdir(folder_path))
        self.pushes.append((repo_id, path_in_repo, files, delete_patterns, revision))
        return f"https://huggingface.co/{repo_id}/commit/{len(self.pushes)}"


def run(tmp_path, api, **options):
    hub = HubUploadCallback("run-name", api_factory=lambda: api, **options)
    trainer = make_trainer(tmp_path, max_duration="10steps", callbacks={"hub": hub, "export": FakeExport()})
    trainer.fit()
    return hub


def test_end_pushes_only_the_final_export_to_the_repositorys_root(tmp_path):
    api = FakeApi()
    run(tmp_path, api, private=True, revision="main")
    assert api.created == [("run-name", True, True, "model")]
    # a bare name resolved under the token's account, as create_repo answers
    assert api.pushes == [("me/run-name", None, ["config.json", "model.safetensors"], None, "main")]


def test_checkpoint_replaces_last_checkpoint_at_each_save_and_all_checkpoints_keeps_each(tmp_path):
    api = FakeApi()
    run(tmp_path / "last", api, strategy="checkpoint")
    assert [(path, deleting) for _, path, _, deleting, _ in api.pushes] == [
        ("last-checkpoint", ["*"]),  # steps 4, 8 and 10: the files the new one lacks are deleted
        ("last-checkpoint", ["*"]),
        ("last-checkpoint", ["*"]),
        (None, None),
    ]
    assert api.pushes[0][2] == [".complete", "model_and_optim", "train"]  # a whole checkpoint, to resume from
    api = FakeApi()
    run(tmp_path / "all", api, strategy="all_checkpoints")
    assert [path for _, path, _, _, _ in api.pushes] == ["step4", "step8", "step10", None]


def test_a_repository_the_hub_refuses_fails_before_the_first_step(tmp_path):
    with pytest.raises(ConfigError, match=r"^callbacks.hub.repo_id: cannot create or reach 'run-name'"):
        run(tmp_path, FakeApi(fail_create=True))
    assert not any(name.startswith("step") for name in os.listdir(tmp_path))


def test_the_token_is_left_to_huggingface_hub(monkeypatch):
    seen = []
    monkeypatch.setattr("huggingface_hub.HfApi", lambda *args, **kwargs: seen.append((args, kwargs)))
    hub_upload.default_api()
    assert seen == [((), {})]  # HF_TOKEN or the saved login, read by huggingface_hub: never in honing's config
