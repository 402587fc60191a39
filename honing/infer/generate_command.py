"""``honing generate MODEL_OR_RUN --prompt TEXT | --file prompts.jsonl``: one prompt streamed to the terminal,
or many answered in batches and written as JSON Lines."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from typing import Any, TextIO

from honing.errors import ConfigError, DataError
from honing.infer.generate import (
    DEFAULT_MAX_NEW_TOKENS,
    Prompt,
    Sampling,
    TextGenerator,
    answer_with_images,
    vision_turn,
    within_context,
)
from honing.infer.model_source import LoadedModel, load_model
from honing.json_lines import json_lines


def sampling_from(args: argparse.Namespace) -> Sampling:
    """The sampling options of a parsed command line."""
    return Sampling(
        max_new_tokens=DEFAULT_MAX_NEW_TOKENS if args.max_new_tokens is None else args.max_new_tokens,
        temperature=args.temperature,
        top_p=args.top_p,
        top_k=args.top_k,
        seed=args.seed,
    ).check()


def load_images(paths: list[str], pdf_page: int) -> list[Any]:
    """Images (RGB) from files; a PDF gives its page ``pdf_page``."""
    from honing.data.formats import ContentItem
    from honing.data.vision.images import load_image

    images = []
    for path in paths:
        if path.lower().endswith(".pdf"):
            item = ContentItem(type="pdf", content=os.path.abspath(path), page=pdf_page)
        else:
            item = ContentItem(type="image_path", content=os.path.abspath(path))
        images.append(load_image(item))
    return images


def read_prompt_file(path: str) -> list[dict[str, Any]]:
    """The rows of a prompts file: each a JSON object with ``prompt`` (text) or ``messages``, or a JSON string."""
    if not os.path.isfile(path):
        raise DataError(f"--file: {path} does not exist")
    rows = []
    for number, row in json_lines(path):
        if isinstance(row, json.JSONDecodeError):
            raise DataError(f"{path}:{number}: not JSON ({row.msg})")
        if isinstance(row, str):
            row = {"prompt": row}
        if not isinstance(row, dict) or not (isinstance(row.get("prompt"), str) or "messages" in row):
            raise DataError(f'{path}:{number}: expected {{"prompt": TEXT}} or {{"messages": [...]}}')
        rows.append(row)
    if not rows:
        raise DataError(f"{path}: no prompts in it")
    return rows


def prompt_of(row: dict[str, Any]) -> Prompt:
    """A file row's prompt: its text, or its messages."""
    return row["prompt"] if "prompt" in row else row["messages"]


def run_generate(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Carry out ``honing generate``; returns the exit code."""
    out = out or sys.stdout
    sampling = sampling_from(args)
    rows = read_prompt_file(args.file) if args.file else [{"prompt": text} for text in args.prompt]
    loaded = load_model(args.model, device=args.device, dtype=args.dtype, trust_remote_code=args.trust_remote_code)
    sampling = within_context(sampling, loaded, explicit=args.max_new_tokens is not None)
    if args.image and not loaded.is_vision:
        raise ConfigError(f"--image: {loaded.source.path} is a text model; images need a vision-language model")
    stream = len(rows) == 1 and not args.file and not args.output
    if loaded.is_vision:
        return _generate_vision(loaded, args, rows, sampling, out, stream)
    generator = TextGenerator(loaded, sampling, chat_template=args.chat_template, batch_size=args.batch_size)
    if stream:
        generator.stream(prompt_of(rows[0]), _writer(out))
        out.write("\n")
        return 0
    answers = generator.complete([prompt_of(row) for row in rows])
    _write_rows(args.output, out, [{**row, "completion": answer} for row, answer in zip(rows, answers)])
    return 0


def _generate_vision(
    loaded: LoadedModel,
    args: argparse.Namespace,
    rows: list[dict[str, Any]],
    sampling: Sampling,
    out: TextIO,
    stream: bool,
) -> int:
    """Image prompts, one at a time through transformers' ``generate`` (the lean decoder is text-only)."""
    shared = load_images(args.image, args.pdf_page)
    results = []
    for index, row in enumerate(rows):
        if not isinstance(row.get("prompt"), str):
            raise DataError('a vision-language prompt is text with --image / an "images" list, not messages')
        folder = os.path.dirname(os.path.abspath(args.file)) if args.file else os.getcwd()
        own = [os.path.join(folder, path) for path in row.get("images", [])]  # relative to the prompts file
        images = shared + load_images(own, args.pdf_page)
        seeded = Sampling(**{**sampling.__dict__, "seed": sampling.seed + index})
        messages = [vision_turn(row["prompt"], len(images))]
        text = answer_with_images(loaded, messages, images, seeded, write=_writer(out) if stream else None)
        results.append({**row, "completion": text})
    if stream:
        out.write("\n")
    else:
        _write_rows(args.output, out, results)
    return 0


def _writer(out: TextIO) -> Callable[[str], None]:
    def write(text: str) -> None:
        out.write(text)
        out.flush()

    return write


def _write_rows(path: str | None, out: TextIO, rows: list[dict[str, Any]]) -> None:
    lines = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    if path is None:
        out.write(lines)
        return
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(lines)
    print(f"wrote {len(rows)} answer(s) to {path}", file=sys.stderr)
