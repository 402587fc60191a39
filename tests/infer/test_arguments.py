"""The command lines of ``honing generate``, ``chat``, ``eval`` and ``serve`` (``honing/infer/arguments.py``)."""

from __future__ import annotations

import argparse

import pytest

from honing.infer.arguments import chat_arguments, eval_arguments, generate_arguments, serve_arguments


def parser_of(add):
    parser = argparse.ArgumentParser(exit_on_error=False)
    add(parser)
    return parser


@pytest.mark.parametrize(
    ("add", "required"),
    [(generate_arguments, ["--prompt", "hi"]), (chat_arguments, []), (eval_arguments, ["--tasks", "t"])],
)
def test_the_chat_template_is_the_tokenizers_choice_unless_one_flag_names_it(add, required):
    parser = parser_of(add)
    assert parser.parse_args(["run", *required]).chat_template is None
    assert parser.parse_args(["run", *required, "--chat-template"]).chat_template is True
    assert parser.parse_args(["run", *required, "--no-chat-template"]).chat_template is False
    with pytest.raises(argparse.ArgumentError):  # argparse refuses the two together
        parser.parse_args(["run", *required, "--chat-template", "--no-chat-template"])


def test_serve_decodes_with_the_same_options_and_defaults_as_generate():
    served = parser_of(serve_arguments).parse_args(["run"])
    generated = parser_of(generate_arguments).parse_args(["run", "--prompt", "hi"])
    for option in ("max_new_tokens", "temperature", "top_p", "top_k", "seed"):
        assert getattr(served, option) == getattr(generated, option)
