"""What transformers' OSError for a model it could not load becomes: one line naming the key, what went wrong on the
Hugging Face hub (not reachable, no such repository, gated) and the fix."""

import pytest
from huggingface_hub.errors import GatedRepoError, LocalEntryNotFoundError, RepositoryNotFoundError

from honing.hub import hub_load_error


def transformers_error(cause: BaseException) -> OSError:
    """An OSError raised from ``cause``, as transformers raises them (its message spans lines)."""
    error = OSError("We couldn't connect to 'https://huggingface.co' to load the files.\nCheck your connection.")
    error.__cause__ = cause
    return error


def hub_error(kind: type[Exception]) -> Exception:
    return kind.__new__(kind)  # huggingface_hub's HTTP errors need a response to be built; the type is what counts


@pytest.mark.parametrize(
    "cause, expected",
    [
        (LocalEntryNotFoundError("not cached"), "is a Hugging Face hub name, the hub cannot be reached from here"),
        (hub_error(GatedRepoError), "is a gated model on the Hugging Face hub; accept its terms"),
        (hub_error(RepositoryNotFoundError), "no model 'org/name' on the Hugging Face hub (check the name"),
    ],
    ids=["unreachable", "gated", "not-found"],
)
def test_a_hub_failure_is_one_line_naming_the_key_and_the_fix(cause, expected):
    message = str(hub_load_error("model.name_or_path", "org/name", transformers_error(cause)))
    assert message.startswith("model.name_or_path: ") and expected in message and "\n" not in message


def test_a_local_folder_keeps_transformers_reason_on_one_line(tmp_path):
    error = transformers_error(LocalEntryNotFoundError("not cached"))
    message = str(hub_load_error("MODEL_OR_RUN", str(tmp_path), error))
    assert message == (
        f"MODEL_OR_RUN: cannot load {str(tmp_path)!r}: We couldn't connect to 'https://huggingface.co' to load the "
        "files. Check your connection."
    )
