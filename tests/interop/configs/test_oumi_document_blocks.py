"""Every code block of Oumi's training-methods page (``../shared/seeds/003_*``, skipped where absent) run as written,
with only the import root changed (``oumi.core.types.conversation`` -> ``honing.interop.oumi``) and hub names and
``/path/to/...`` replaced by local stand-ins: 13 blocks, 6 rows, 1 Python block, 6 YAML configs.

The rows and the Python block run here, read from the page's text. The saved text lost the YAML's indentation, so
the configs are held indented as the page shows them (``tests/e2e/test_foreign_configs.py``, whose tests train each
through ``honing train``), and a test here checks that each held config is the page's block line for line."""

from __future__ import annotations

import ast
import json

import yaml

from honing.data.formats import Conversation, PlainText, to_example
from honing.data.preference.pairs import PreferencePair, to_pair
from honing.data.prompts.prompts import to_prompt
from honing.interop.configs import translate
from honing.rl import resolve_reward
from tests.e2e import test_foreign_configs as trained
from tests.interop.document_blocks import oumi_blocks, same_lines, seed_text

#: each block's kind, in the page's order (SFT row, SFT config, VL row, VL Python, VL config, pretraining row and
#: config, DPO row and config, TRL_GRPO row, VERL_GRPO row, TRL_GRPO config, VERL_GRPO config)
KINDS = ["json", "yaml", "json", "python", "yaml", "json", "yaml", "json", "yaml", "json", "json", "yaml", "yaml"]
#: the page's configs, in order, as the e2e tests hold (and train) them
HELD_CONFIGS = [
    trained.OUMI_SFT,
    trained.OUMI_VL_SFT,
    trained.OUMI_PRETRAINING,
    trained.OUMI_DPO,
    trained.OUMI_GRPO,
    trained.OUMI_VERL_GRPO,
]
IMPORT_ROOT = ("from oumi.core.types.conversation import", "from honing.interop.oumi import")


def blocks(kind: str) -> list[str]:
    found = oumi_blocks(seed_text("003"))
    return [text for block_kind, text in found if block_kind == kind]


def row(text: str) -> dict:
    """A row as written: JSON, or (the TRL_GRPO row: single quotes, trailing commas) a Python literal."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return ast.literal_eval(text)


def test_the_page_has_thirteen_code_blocks():
    assert [kind for kind, _ in oumi_blocks(seed_text("003"))] == KINDS


def test_the_pages_rows_are_read_by_honings_formats_as_written():
    sft, vl, pretraining, dpo, letters, countdown = (row(text) for text in blocks("json"))
    assert to_example(sft, "conversation").to_hf_messages() == sft["messages"]
    conversation = to_example(vl, "conversation")
    assert [item.type for item in conversation.images()] == ["image_url"] and conversation.has_assistant()
    assert to_example(pretraining, "text") == PlainText(text=pretraining["text"])
    assert to_pair(dpo, "preference") == PreferencePair(
        dpo["messages"], dpo["chosen"]["messages"], dpo["rejected"]["messages"]
    )
    # the GRPO rows: the prompt, and every other column kept for the rewards
    letter_prompt = to_prompt(letters, "prompt")
    assert letter_prompt.prompt == letters["prompt"] and letter_prompt.columns == {"letter_count": 1}
    countdown_prompt = to_prompt(countdown, "prompt")
    assert set(countdown_prompt.columns) == {"ability", "data_source", "extra_info", "reward_model"}
    columns = {key: [value] for key, value in countdown_prompt.columns.items()}
    score = resolve_reward("verl:countdown")  # the row's ground truth: [79, 8] -> 87
    assert score(prompts=["p"], completions=["<answer>79 + 8</answer>"], **columns) == [1.0]


def test_the_pages_python_block_runs_with_the_import_root_changed():
    (block,) = blocks("python")
    statements = ast.parse(block.replace(*IMPORT_ROOT)).body
    namespace: dict = {}
    exec(compile(ast.Module(statements[:-1], []), "oumi-page", "exec"), namespace)  # the import
    built = eval(compile(ast.Expression(statements[-1].value), "oumi-page", "eval"), namespace)
    assert isinstance(built, Conversation)
    # the same conversation as the page's row: Role.USER / Type.IMAGE_URL are the strings honing holds
    assert built == to_example(row(blocks("json")[1]), "conversation")
    assert namespace["Role"].USER == "user" and namespace["Type"].IMAGE_URL == "image_url"


def test_the_pages_configs_are_the_ones_the_e2e_tests_train_and_translate_with_nothing_refused():
    found = blocks("yaml")
    assert len(found) == len(HELD_CONFIGS)
    for held, block in zip(HELD_CONFIGS, found, strict=True):
        assert same_lines(held, block), block.splitlines()[0]
        assert translate(yaml.safe_load(held)).refused == []
