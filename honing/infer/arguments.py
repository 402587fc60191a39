"""The command lines of ``honing generate``, ``chat``, ``eval``, ``push`` and ``serve``, kept apart from their work
so that ``honing --help`` imports no model code."""

from __future__ import annotations

import argparse


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """MODEL_OR_RUN and how to load it (shared by generate, chat and eval)."""
    parser.add_argument(
        "model",
        metavar="MODEL_OR_RUN",
        help="a run folder (its hf/, else its newest stepN/), its best/ folder or a stepN/ "
        "checkpoint (LoRA merged on the fly), or a Hugging Face model folder",
    )
    parser.add_argument("--device", default="auto", help="auto (a GPU if there is one), cpu or cuda[:N]")
    parser.add_argument("--dtype", default="float32", help="float32, bfloat16 or float16")
    parser.add_argument("--trust-remote-code", action="store_true", help="run the model folder's own code")


def add_decoding_arguments(parser: argparse.ArgumentParser, *, request_defaults: bool = False) -> None:
    """--max-new-tokens, --temperature, --top-p and --seed: how generate and chat decode, or (``request_defaults``)
    how serve decodes a request that names none."""
    of = "of a request that names none: " if request_defaults else ""
    parser.add_argument(
        "--max-new-tokens",
        type=int,
        metavar="N",
        help=f"{of}answer length limit (default: 256, or the model's context less one where that is shorter)",
    )
    parser.add_argument("--temperature", type=float, default=0.0, help=f"{of}0 (the default): greedy")
    parser.add_argument("--top-p", type=float, default=1.0, help=f"{of}nucleus sampling (1: off)")
    seed_help = "sampling seed" if request_defaults else "sampling seed (prompt i of a file uses seed + i)"
    parser.add_argument("--seed", type=int, default=0, help=of + seed_help)


def add_chat_template_arguments(parser: argparse.ArgumentParser, *, rendered: str, raw: str | None = None) -> None:
    """--chat-template / --no-chat-template, one or neither (``chat_template`` None: the tokenizer's template when it
    has one); ``rendered`` and ``raw`` are their help."""
    template = parser.add_mutually_exclusive_group()
    template.add_argument(
        "--chat-template",
        dest="chat_template",
        action="store_const",
        const=True,
        default=None,
        help=f"{rendered} (the default when it has one)",
    )
    template.add_argument("--no-chat-template", dest="chat_template", action="store_const", const=False, help=raw)


def add_sampling_arguments(parser: argparse.ArgumentParser) -> None:
    """The sampling options (shared by generate and chat)."""
    add_decoding_arguments(parser)
    parser.add_argument("--top-k", type=int, default=0, help="top-k sampling (0: off)")
    add_chat_template_arguments(
        parser, rendered="render prompts with the tokenizer's chat template", raw="continue raw text"
    )
    parser.add_argument("--image", action="append", default=[], metavar="PATH", help="an image or PDF (VL models)")
    parser.add_argument("--pdf-page", type=int, default=1, metavar="N", help="the page of PDF --image files (1)")


def generate_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``honing generate``."""
    add_model_arguments(parser)
    prompts = parser.add_mutually_exclusive_group(required=True)
    prompts.add_argument("--prompt", action="append", metavar="TEXT", help="a prompt (repeat for several)")
    prompts.add_argument(
        "--file", metavar="JSONL", help='prompts, one JSON object a line: {"prompt": ...} or {"messages": [...]}'
    )
    parser.add_argument("--output", "-o", metavar="JSONL", help="write answers here (default: stdout)")
    parser.add_argument("--batch-size", type=int, default=32, metavar="N", help="prompts decoded together (32)")
    add_sampling_arguments(parser)


def chat_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``honing chat``."""
    add_model_arguments(parser)
    parser.add_argument("--system", metavar="TEXT", help="a system message at the start of every conversation")
    add_sampling_arguments(parser)


def eval_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``honing eval``."""
    add_model_arguments(parser)
    parser.add_argument(
        "--tasks",
        action="append",
        required=True,
        metavar="TASKS",
        help="lm-eval task names or task YAML files, comma-separated or repeated",
    )
    parser.add_argument("--include", action="append", default=[], metavar="DIR", help="a folder of task YAML files")
    parser.add_argument("--limit", type=float, metavar="N", help="examples per task (a fraction when < 1)")
    parser.add_argument("--num-fewshot", type=int, metavar="N", help="few-shot examples (default: each task's own)")
    parser.add_argument("--batch-size", type=int, default=8, metavar="N", help="requests per forward (8)")
    parser.add_argument("--max-new-tokens", type=int, metavar="N", help="answer length of generation tasks")
    parser.add_argument("--seed", type=int, default=0, help="lm-eval's random seeds (few-shot sampling)")
    parser.add_argument("--output", "-o", metavar="DIR", help="write DIR/eval/harness/ (default: the run folder)")
    add_chat_template_arguments(parser, rendered="wrap each request in the tokenizer's chat template")


def push_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``honing push``."""
    parser.add_argument("run", metavar="RUN", help="a run folder (or a model folder to upload as it is)")
    parser.add_argument("repo_id", metavar="REPO_ID", help="the Hub repository, e.g. me/my-model")
    parser.add_argument("--adapter", action="store_true", help="upload the LoRA adapter/ instead of hf/")
    parser.add_argument("--private", action="store_true", help="create the repository as private")
    parser.add_argument("--token", help="a Hub token (default: HF_TOKEN or the saved login)")
    parser.add_argument("--revision", help="the branch to upload to (default: main)")


def serve_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``honing serve``."""
    add_model_arguments(parser)
    parser.add_argument("--host", default="127.0.0.1", help="the address to listen on (127.0.0.1: this machine only)")
    parser.add_argument("--port", type=int, default=8000, help="the port to listen on (8000; 0: any free port)")
    parser.add_argument(
        "--served-model-name", metavar="NAME", help="the model's name in the API (default: MODEL_OR_RUN as given)"
    )
    add_decoding_arguments(parser, request_defaults=True)
    parser.set_defaults(top_k=0)  # no --top-k: a request that names none samples without top-k
