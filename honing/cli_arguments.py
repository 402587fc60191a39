"""The arguments of honing's own verbs (``train``, ``export``, ``plot``, ``prepare``, ``config`` ...), one function a
verb, named in ``honing.cli.VERBS``; the verbs that use a trained model have theirs in ``honing.infer.arguments``."""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

from honing.config import METHODS


def one_line(text: str) -> str:
    """``text`` as one printable line: its lines joined by spaces, other control characters written as escapes (a
    message may quote another library's, which spans lines, or a typed argument holding anything)."""
    lines = (line.strip(" \t") for line in text.replace("\r", "\n").split("\n"))
    joined = " ".join(line for line in lines if line)
    return "".join(char if char.isprintable() else char.encode("unicode_escape").decode("ascii") for char in joined)


def usage_error(prog: str, message: str) -> NoReturn:
    """Print a command-line mistake as one line naming the argument and where the usage is, and exit 2."""
    sys.stderr.write(f"{prog}: error: {one_line(message)}; see `{prog} --help`\n")
    raise SystemExit(2)


class OneLineErrorParser(argparse.ArgumentParser):
    """argparse's parser, whose mistakes (a bad flag, a missing argument, a value of the wrong type) are one line
    instead of the usage block and the message; its subcommands' parsers are of the same class."""

    def error(self, message: str) -> NoReturn:
        """Print ``message`` on one line and exit 2."""
        usage_error(self.prog, message)


def add_config_and_overrides(parser: argparse.ArgumentParser, config_help: str = "YAML config") -> None:
    """CONFIG and its dotted ``key.path=value`` overrides."""
    parser.add_argument("config", help=config_help)
    parser.add_argument("overrides", nargs="*", help="dotted overrides, as for train")


def add_from(parser: argparse.ArgumentParser) -> None:
    """``--from SYSTEM``: which system wrote CONFIG, where its shape does not say (a TRL CLI file's trainer)."""
    parser.add_argument(
        "--from",
        dest="from_dialect",
        metavar="SYSTEM",
        help="the system that wrote CONFIG: trl-sft, trl-dpo, trl-grpo, trl-kto, trl-reward, trl-rloo, trl-orpo, "
        "trl-cpo, trl-gkd (a `trl <command> --config` file), oumi, axolotl, llamafactory, olmocr",
    )


def train_arguments(parser: argparse.ArgumentParser) -> None:
    """``honing train [CONFIG] [key=value ...] [--nproc N] [--from SYSTEM]``."""
    parser.add_argument("config", nargs="?", help="YAML config (default: the quickstart)")
    parser.add_argument("overrides", nargs="*", help="dotted overrides, e.g. trainer.max_duration=200steps")
    add_from(parser)
    parser.add_argument(
        "--nproc",
        type=int,
        metavar="N",
        help="train with N processes on this machine (one per GPU), started by torchrun",
    )


def export_arguments(parser: argparse.ArgumentParser) -> None:
    """``honing export CHECKPOINT OUT_DIR`` and ``honing export SOURCE OUT.gguf --gguf [--outtype f16|f32]``."""
    parser.add_argument(
        "checkpoint", help="a SAVE_FOLDER/stepN checkpoint directory (with --gguf also a run or Hugging Face folder)"
    )
    parser.add_argument("out_dir", help="where to write the Hugging Face folder (with --gguf: the .gguf file)")
    parser.add_argument(
        "--gguf", action="store_true", help="write one GGUF file for llama.cpp (Llama, Mistral, Qwen2 families)"
    )
    parser.add_argument("--outtype", metavar="TYPE", help="the GGUF file's weights: f16 (the default) or f32")


def merge_arguments(parser: argparse.ArgumentParser) -> None:
    """``honing merge CHECKPOINT OUT_DIR``."""
    parser.add_argument("checkpoint", help="a SAVE_FOLDER/stepN checkpoint directory of a LoRA run")
    parser.add_argument("out_dir", help="where to write the merged Hugging Face folder")


def plot_arguments(parser: argparse.ArgumentParser) -> None:
    """``honing plot RUN_DIR ... [-o PNG] [--x step|tokens] [--metric NAME] [--smooth N]``."""
    parser.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="save folders holding metrics.jsonl")
    parser.add_argument(
        "-o", "--output", help="the PNG to write (default: RUN_DIR/plot.png, or ./plot.png for several runs)"
    )
    parser.add_argument("--x", choices=["step", "tokens"], default="step", help="the horizontal axis")
    parser.add_argument(
        "--metric",
        action="append",
        metavar="NAME",
        help="a logged metric to draw in a panel of its own (repeat for more; default: loss, lr, grad norm, tokens/s)",
    )
    parser.add_argument(
        "--smooth", type=int, default=1, metavar="N", help="draw the trailing mean of N logged points over the raw line"
    )


def data_arguments(parser: argparse.ArgumentParser) -> None:
    """``honing data CONFIG [key=value ...] [-o DIR]``."""
    add_config_and_overrides(parser)
    parser.add_argument("-o", "--output", help="folder for data_report.txt / .png (default: the save folder)")


def plan_arguments(parser: argparse.ArgumentParser) -> None:
    """``honing plan CONFIG [key=value ...] [--budget SIZE] [--nproc N]``."""
    add_config_and_overrides(parser)
    parser.add_argument(
        "--budget", metavar="SIZE", help="memory per rank, e.g. 20GiB: the largest micro-batch that fits"
    )
    parser.add_argument("--nproc", type=int, default=1, metavar="N", help="processes the run will use (default: 1)")


def prepare_arguments(parser: argparse.ArgumentParser) -> None:
    """``honing prepare CONFIG [key=value ...] --out DIR [--workers N] [--split S] [--shard-mb MB]``."""
    add_config_and_overrides(parser, "YAML config (its data sources, tokenizer and row settings are used)")
    parser.add_argument(
        "--out", required=True, metavar="DIR", help="the folder to write (pretraining: local or s3://...; else local)"
    )
    parser.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="tokenizing processes (default: pretraining min(2, CPUs), else 8 at most)",
    )
    parser.add_argument(
        "--split",
        choices=["train", "validation"],
        default="train",
        help="fine-tuning methods: which split's sources to prepare (default: train)",
    )
    parser.add_argument(
        "--shard-mb", type=float, default=256.0, metavar="MB", help="input text per shard (default: 256)"
    )


def convert_arguments(parser: argparse.ArgumentParser) -> None:
    """``honing convert CONFIG [-o OUT] [--from SYSTEM]``."""
    parser.add_argument("config", help="the Oumi, olmOCR, axolotl, LLaMA-Factory or TRL CLI YAML config")
    parser.add_argument("-o", "--output", help="the honing YAML to write (default: print it)")
    add_from(parser)


def config_arguments(parser: argparse.ArgumentParser) -> None:
    """``honing config show CONFIG [key=value ...]``, ``honing config schema``, ``honing config keys [PREFIX]``."""
    config_verbs = parser.add_subparsers(dest="config_verb", required=True, metavar="{show,schema,keys}")
    show = config_verbs.add_parser("show", help="print the resolved config (secrets redacted)")
    show.add_argument("config")
    show.add_argument("overrides", nargs="*")
    add_from(show)
    config_verbs.add_parser("schema", help="print the config's JSON schema (for editor completion)")
    keys = config_verbs.add_parser("keys", help="list every config key with its type, default and description")
    keys.add_argument("prefix", nargs="?", metavar="PREFIX", help="only the keys under it, e.g. trainer or data.train")
    keys.add_argument("--method", choices=list(METHODS), help="only the keys this method reads")
