from honing.config.redact import REDACTED, is_secret_key, redact


def test_secret_key_names():
    for key in ["api_key", "WANDB_API_KEY", "token", "hf_token", "aws_secret_access_key", "password", "access_key_id"]:
        assert is_secret_key(key), key
    for key in ["max_new_tokens", "eos_token", "lr", "path", "tokens", "tokenizer", "tokens_per_batch"]:
        assert not is_secret_key(key), key


def test_redact_nested_and_lists_without_mutating():
    data = {"wandb": {"api_key": "abc", "project": "p"}, "sinks": [{"password": "pw", "url": "u"}], "token": None}
    out = redact(data)
    assert out == {
        "wandb": {"api_key": REDACTED, "project": "p"},
        "sinks": [{"password": REDACTED, "url": "u"}],
        "token": None,
    }
    assert data["wandb"]["api_key"] == "abc"
