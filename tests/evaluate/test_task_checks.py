"""The tasks of an evaluation checked before lm-eval runs them: answer lengths against the model's context, and
local data files, each refused in one line naming the option or config key to change."""

from pathlib import Path

import pytest

from honing.errors import ConfigError
from honing.evaluate.task_checks import check_tasks, length_key

pytest.importorskip("lm_eval", reason="lm-eval is not installed (pip install 'honing[eval]')")

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def manager():
    from lm_eval.tasks import TaskManager

    return TaskManager(include_path=[str(REPO / "configs" / "eval")], include_defaults=False)


def test_the_length_key_sits_beside_the_tasks_key():
    assert length_key("--tasks") == "--max-new-tokens"
    assert length_key("callbacks.harness_eval.tasks") == "callbacks.harness_eval.max_new_tokens"


def test_a_tasks_own_answer_length_must_leave_room_for_a_prompt(manager):
    with pytest.raises(ConfigError) as refused:
        check_tasks(
            manager, ["gsm8k_local"], max_new_tokens=None, max_length=256, tasks_key="callbacks.harness_eval.tasks"
        )
    assert str(refused.value) == (
        "callbacks.harness_eval.max_new_tokens: task gsm8k_local's answers of 256 tokens leave no room for a prompt "
        "in the model's 256 positions; give callbacks.harness_eval.max_new_tokens below 256, e.g. 128"
    )
    with pytest.raises(ConfigError, match=r"^--max-new-tokens: 300 new tokens .* \(task reverse\); give"):
        check_tasks(manager, ["reverse"], max_new_tokens=300, max_length=300, tasks_key="--tasks")
    check_tasks(manager, ["reverse"], max_new_tokens=None, max_length=17, tasks_key="--tasks")  # its own: 16


def test_a_missing_local_data_file_is_named_with_its_task(manager, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # gsm8k_local names ../shared/data/gsm8k/test.jsonl: not there from here
    with pytest.raises(ConfigError, match=r"^--tasks: task gsm8k_local reads \.\./shared/data/gsm8k/test\.jsonl "):
        check_tasks(manager, ["gsm8k_local"], max_new_tokens=8, max_length=2048, tasks_key="--tasks")
