"""Tests for honing/data/chat/conversation.py: rendering, assistant-only labels on both paths, length fitting."""

import pytest

from honing.config import ConfigError
from honing.data.chat.conversation import (
    TokenizedExample,
    ensure_special_tokens,
    fit_to_length,
    has_trainable_tokens,
    render_chat,
    resolve_chat_template,
    tokenize_conversation,
    tokenize_plain_text,
    tokenize_prompt,
)
from honing.data.chat.templates import NAMED_TEMPLATES, NAMED_TEMPLATES_PLAIN
from honing.data.tokenizer import build_tokenizer
from honing.errors import DataError
from honing.losses import IGNORE_INDEX


@pytest.fixture(scope="module")
def tok():
    tokenizer = build_tokenizer("byte")
    ensure_special_tokens(tokenizer, "chatml")
    ensure_special_tokens(tokenizer, "llama3")
    return tokenizer


SINGLE = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hi there"}]
MULTI = [*SINGLE, {"role": "user", "content": "Go?"}, {"role": "assistant", "content": "Bye"}]
WITH_SYSTEM = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Ça va?"},
    {"role": "assistant", "content": "Très bien"},
]

# The expected rendering written out by hand, as (text, trained) pieces in order.
EXPECTED = {
    ("chatml", "single"): [
        ("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", False),
        ("Hi there<|im_end|>", True),
        ("\n", False),
    ],
    ("chatml", "multi"): [
        ("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", False),
        ("Hi there<|im_end|>", True),
        ("\n<|im_start|>user\nGo?<|im_end|>\n<|im_start|>assistant\n", False),
        ("Bye<|im_end|>", True),
        ("\n", False),
    ],
    ("chatml", "system"): [
        ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nÇa va?<|im_end|>\n<|im_start|>assistant\n", False),
        ("Très bien<|im_end|>", True),
        ("\n", False),
    ],
    ("llama3", "single"): [
        (
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n",
            False,
        ),
        ("Hi there<|eot_id|>", True),
    ],
    ("llama3", "multi"): [
        (
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n",
            False,
        ),
        ("Hi there<|eot_id|>", True),
        (
            "<|start_header_id|>user<|end_header_id|>\n\nGo?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n",
            False,
        ),
        ("Bye<|eot_id|>", True),
    ],
    ("llama3", "system"): [
        (
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nÇa va?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n",
            False,
        ),
        ("Très bien<|eot_id|>", True),
    ],
}
EOS = "<|endoftext|>"  # the byte-level tokenizer's eos, which zephyr and eos_separated end each turn with
EXPECTED |= {
    ("zephyr", "multi"): [
        ("<|user|>\nHi" + EOS + "\n<|assistant|>\n", False),
        ("Hi there" + EOS, True),
        ("\n<|user|>\nGo?" + EOS + "\n<|assistant|>\n", False),
        ("Bye" + EOS, True),
        ("\n", False),
    ],
    ("zephyr", "system"): [
        ("<|system|>\nBe brief." + EOS + "\n<|user|>\nÇa va?" + EOS + "\n<|assistant|>\n", False),
        ("Très bien" + EOS, True),
        ("\n", False),
    ],
    ("plain_roles", "multi"): [
        ("USER: Hi\nASSISTANT: ", False),
        ("Hi there", True),
        ("\nUSER: Go?\nASSISTANT: ", False),
        ("Bye", True),
    ],
    ("plain_roles", "system"): [("SYSTEM: Be brief.\nUSER: Ça va?\nASSISTANT: ", False), ("Très bien", True)],
    ("eos_separated", "multi"): [
        ("Hi" + EOS, False),
        ("Hi there" + EOS, True),
        ("Go?" + EOS, False),
        ("Bye" + EOS, True),
    ],
}
CONVERSATIONS = {"single": SINGLE, "multi": MULTI, "system": WITH_SYSTEM}


def expected_example(tokenizer, pieces):
    """Encode each hand-written piece on its own (bytes and special tokens compose) and label the trained ones."""
    input_ids, labels = [], []
    for text, trained in pieces:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        input_ids += ids
        labels += ids if trained else [IGNORE_INDEX] * len(ids)
    return TokenizedExample(input_ids=input_ids, labels=labels)


def trained_pieces(tokenizer, example):
    """The decoded runs of consecutive tokens that carry a loss."""
    pieces, run = [], []
    for token, label in zip(example.input_ids, example.labels):
        if label != IGNORE_INDEX:
            run.append(token)
        elif run:
            pieces.append(tokenizer.decode(run))
            run = []
    return pieces + ([tokenizer.decode(run)] if run else [])


@pytest.mark.parametrize("name,conversation", sorted(EXPECTED))
def test_assistant_labels_are_exact_on_both_paths(tok, name, conversation):
    messages = CONVERSATIONS[conversation]
    marked = tokenize_conversation(tok, messages, chat_template=NAMED_TEMPLATES[name])
    plain = tokenize_conversation(tok, messages, chat_template=NAMED_TEMPLATES_PLAIN[name])
    expected = expected_example(tok, EXPECTED[name, conversation])
    assert marked == expected
    assert plain == expected
    assert trained_pieces(tok, marked) == [text for text, trained in EXPECTED[name, conversation] if trained]


def test_single_turn_chatml_token_positions(tok):
    example = tokenize_conversation(tok, SINGLE, chat_template="chatml")
    # <|im_start|> user\n(5) Hi(2) <|im_end|> \n <|im_start|> assistant\n(10) = 21 prompt tokens,
    # then "Hi there"(8) <|im_end|> trained, then the untrained "\n".
    assert len(example.input_ids) == 31
    assert example.labels[:21] == [IGNORE_INDEX] * 21
    assert example.labels[21:30] == [72, 105, 32, 116, 104, 101, 114, 101, 259]
    assert example.labels[30] == IGNORE_INDEX


def test_conversation_starting_with_assistant(tok):
    messages = [{"role": "assistant", "content": "Hello"}, {"role": "user", "content": "Hm"}]
    expected = expected_example(
        tok,
        [("<|im_start|>assistant\n", False), ("Hello<|im_end|>", True), ("\n<|im_start|>user\nHm<|im_end|>\n", False)],
    )
    assert tokenize_conversation(tok, messages, chat_template=NAMED_TEMPLATES["chatml"]) == expected
    assert tokenize_conversation(tok, messages, chat_template=NAMED_TEMPLATES_PLAIN["chatml"]) == expected


def test_train_on_all_labels_every_token(tok):
    example = tokenize_conversation(tok, MULTI, chat_template="llama3", train_on="all")
    assert example.labels == example.input_ids
    assert len(example.input_ids) == sum(
        len(tok(text, add_special_tokens=False)["input_ids"]) for text, _ in EXPECTED["llama3", "multi"]
    )


def test_no_assistant_turn_has_no_trainable_tokens(tok):
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    for template in (NAMED_TEMPLATES["chatml"], NAMED_TEMPLATES_PLAIN["chatml"]):
        example = tokenize_conversation(tok, messages, chat_template=template)
        # <|im_start|> system\n(7) S <|im_end|> \n, then <|im_start|> user\n(5) U <|im_end|> \n: 11 + 9 tokens.
        assert example.labels == [IGNORE_INDEX] * 20
        assert not has_trainable_tokens(example)


def test_tokenizer_own_template_is_used_when_none():
    tokenizer = build_tokenizer("byte")
    ensure_special_tokens(tokenizer, "chatml")
    tokenizer.chat_template = NAMED_TEMPLATES["chatml"]
    template = resolve_chat_template(tokenizer, None)
    assert template == NAMED_TEMPLATES["chatml"]
    assert tokenize_conversation(tokenizer, SINGLE, chat_template=template) == expected_example(
        tokenizer, EXPECTED["chatml", "single"]
    )


def test_named_template_resolves_to_its_text(tok):
    assert resolve_chat_template(tok, "llama3") == NAMED_TEMPLATES["llama3"]


def test_inline_template_without_special_tokens(tok):
    inline = (
        "{% for m in messages %}### {{ m['role'] }}:\n{{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}### assistant:\n{% endif %}"
    )
    assert resolve_chat_template(tok, inline) == inline
    example = tokenize_conversation(tok, SINGLE, chat_template=inline)
    # No end-of-turn special token, so the whole turn text after the header is trained, its newline included.
    assert example == expected_example(tok, [("### user:\nHi\n### assistant:\n", False), ("Hi there\n", True)])


def test_missing_template_error_names_the_key():
    with pytest.raises(ConfigError, match=r"data\.chat_template is not set.*chatml, llama3.*inline Jinja"):
        resolve_chat_template(build_tokenizer("byte"), None)


def test_mistyped_name_suggests_the_closest():
    with pytest.raises(ConfigError, match=r"'chatm1' is neither a named template.*did you mean 'chatml'"):
        resolve_chat_template(build_tokenizer("byte"), "chatm1")


def test_invalid_jinja_is_a_config_error():
    with pytest.raises(ConfigError, match=r"not a valid Jinja template.*endfor"):
        resolve_chat_template(build_tokenizer("byte"), "{% for m in messages %}{{ m['content'] }}")


def test_template_raise_exception_is_a_data_error(tok):
    template = (
        "{% for m in messages %}{% if m['role'] == 'tool' %}{{ raise_exception('no tools') }}{% endif %}"
        "{{ m['content'] }}{% endfor %}"
    )
    with pytest.raises(DataError, match="could not render the conversation: no tools"):
        tokenize_conversation(tok, [{"role": "tool", "content": "x"}], chat_template=template)


def test_prefix_unstable_template_is_rejected(tok):
    # The message count at the start changes with every turn, so no rendering of a prefix is a prefix of the whole.
    template = (
        "{{ messages | length }}{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
        "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    with pytest.raises(DataError, match=r"not prefix-stable: .* message 1 .*generation %\} markers"):
        tokenize_conversation(tok, SINGLE, chat_template=template)


@pytest.mark.parametrize(
    "name,header", [("zephyr", "<|user|>\nGo?" + EOS + "\n<|assistant|>\n"), ("plain_roles", "USER: Go?\nASSISTANT: ")]
)
def test_oumis_plain_templates_prompt_for_the_assistant(tok, name, header):
    # Oumi's zephyr and default templates end a prompt with the assistant's header, as their training rows have it
    assert render_chat(tok, MULTI[:3], chat_template=name, add_generation_prompt=True).endswith(header)


def test_generation_prompt_ends_with_assistant_header(tok):
    prompt = SINGLE[:1]
    assert render_chat(tok, prompt, chat_template="chatml", add_generation_prompt=True) == (
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    )
    assert render_chat(tok, prompt, chat_template="llama3", add_generation_prompt=True).endswith(
        "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
    )
    # The prompt ids are exactly the untrained head of the full conversation: generation continues where SFT trained.
    for name in NAMED_TEMPLATES:
        prompt_ids = tokenize_prompt(tok, prompt, chat_template=name)
        full = tokenize_conversation(tok, SINGLE, chat_template=name)
        assert full.input_ids[: len(prompt_ids)] == prompt_ids
        assert full.labels[: len(prompt_ids)] == [IGNORE_INDEX] * len(prompt_ids)
        assert full.labels[len(prompt_ids)] != IGNORE_INDEX


def test_ensure_special_tokens_adds_missing_once():
    tokenizer = build_tokenizer("byte")
    assert ensure_special_tokens(tokenizer, "chatml") == 2
    assert ensure_special_tokens(tokenizer, NAMED_TEMPLATES_PLAIN["chatml"]) == 0
    assert tokenizer.convert_tokens_to_ids(["<|im_start|>", "<|im_end|>"]) == [258, 259]
    assert ensure_special_tokens(tokenizer, NAMED_TEMPLATES["llama3"]) == 4
    assert len(tokenizer) == 264
    assert ensure_special_tokens(tokenizer, "{{ messages[0]['content'] }}") == 0
    # Added as single special tokens: the template's markers are never split into bytes.
    assert tokenizer("<|eot_id|>x", add_special_tokens=False)["input_ids"] == [263, 120]


def test_plain_text_ends_with_eos(tok):
    assert tokenize_plain_text(tok, "ab") == TokenizedExample(input_ids=[97, 98, 256], labels=[97, 98, 256])


def test_fit_to_length_truncates_or_drops(tok):
    example = tokenize_conversation(tok, SINGLE, chat_template="chatml")  # 31 tokens, trained at 21..29
    assert fit_to_length(example, 31, "drop") is example
    assert fit_to_length(example, 30, "drop") is None
    cut = fit_to_length(example, 22, "truncate")
    assert cut == TokenizedExample(input_ids=example.input_ids[:22], labels=[IGNORE_INDEX] * 21 + [72])
    assert has_trainable_tokens(cut)
    # Cut before the reply starts: nothing left to train on, which the caller reports.
    assert not has_trainable_tokens(fit_to_length(example, 21, "truncate"))


def test_bad_values_are_config_errors(tok):
    example = TokenizedExample(input_ids=[1, 2], labels=[1, 2])
    with pytest.raises(ConfigError, match="one of truncate, drop, got 'clip'"):
        fit_to_length(example, 1, "clip")
    with pytest.raises(ConfigError, match="positive number of tokens, got 0"):
        fit_to_length(example, 0, "truncate")
    with pytest.raises(ConfigError, match="one of assistant, all, got 'user'"):
        tokenize_conversation(tok, SINGLE, chat_template="chatml", train_on="user")
    with pytest.raises(DataError, match="no messages"):
        tokenize_conversation(tok, [], chat_template="chatml")


def test_the_fallback_template_is_used_only_for_a_tokenizer_without_its_own(monkeypatch):
    from honing.config.schema import DataSection, TokenizerSection
    from honing.data.chat import chat_tokenizer as module

    sources = {"train": {"sources": [{"path": "rows.jsonl"}]}}
    data = DataSection.model_validate({**sources, "chat_template_fallback": "plain_roles"})
    config, model = TokenizerSection(kind="byte"), type("Model", (), {"name_or_path": None})()
    tokenizer, template = module.chat_tokenizer(config, data, model)  # the byte-level tokenizer carries no template
    assert template == NAMED_TEMPLATES["plain_roles"] and tokenizer.chat_template == template
    owned = build_tokenizer("byte")
    owned.chat_template = NAMED_TEMPLATES["chatml"]
    monkeypatch.setattr(module, "build_tokenizer", lambda *args, **kwargs: owned)
    assert module.chat_tokenizer(config, data, model)[1] == NAMED_TEMPLATES["chatml"]  # its own wins, as in Oumi
    with pytest.raises(ValueError, match="chat_template_fallback: read only when chat_template is unset"):
        DataSection.model_validate({**sources, "chat_template": "chatml", "chat_template_fallback": "plain_roles"})
