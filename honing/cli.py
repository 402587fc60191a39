"""``honing`` on the command line: parse, then hand over to a recipe. User errors exit 2.

Every verb is one row of ``VERBS`` (name, help, arguments, handler): the parser's subcommands and the dispatch are
both built from it. A handler is a small function that imports what it needs when it runs, so ``honing --help``
loads no model code; the arguments live in ``honing.cli_arguments`` (and ``honing.infer.arguments``)."""

from __future__ import annotations

import argparse
import faulthandler
import importlib
import json
import logging
import multiprocessing
import os
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable
from dataclasses import dataclass

from honing.cli_arguments import (
    OneLineErrorParser,
    config_arguments,
    convert_arguments,
    data_arguments,
    export_arguments,
    merge_arguments,
    one_line,
    plan_arguments,
    plot_arguments,
    prepare_arguments,
    train_arguments,
    usage_error,
)
from honing.cli_checks import check_at_least, check_checkpoint, check_out_dir, check_output_folder, check_positive
from honing.cli_configs import (
    QUICKSTART,  # noqa: F401 (honing.cli.QUICKSTART: the quickstart a bare train runs)
    find_config,
    split_config_and_overrides,
)
from honing.cli_hub import hub_access_for
from honing.cli_library_warnings import quiet_library_warnings
from honing.cli_next_steps import next_steps_line, program_name
from honing.config import ConfigError, HoningError, RunConfig, to_yaml
from honing.infer.arguments import (
    chat_arguments,
    eval_arguments,
    generate_arguments,
    push_arguments,
    serve_arguments,
)
from honing.interop.configs import convert_file, load_any_config

Handler = Callable[[argparse.Namespace], int]


def setup_logging() -> None:
    """INFO from honing on rank 0, warnings only elsewhere; quieter third-party libraries."""
    rank = int(os.environ.get("RANK", "0"))
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    logging.getLogger("honing").setLevel(logging.INFO if rank == 0 else logging.WARNING)
    quiet_library_warnings()


def run_train(args: argparse.Namespace) -> int:
    """``honing train``: in this process, or in ``--nproc N`` processes under torchrun."""
    path, overrides = split_config_and_overrides(args.config, args.overrides)
    # checked before torch and transformers are imported (seconds): a typo is answered at once, and once
    config = load_any_config(path, overrides, args.from_dialect)
    if args.nproc is not None and "RANK" not in os.environ:
        from honing.parallel_dims import parallel_dims_from

        parallel_dims_from(config.parallel, args.nproc)  # a layout that cannot fit fails before any launch
        code = launch_torchrun(args.nproc, path, overrides, args.from_dialect)
        if code == 0:
            print(next_steps_line(config.trainer.save_folder, config.method, program_name(sys.argv[0])))
        return code
    from honing.recipes import recipe_for

    trainer = recipe_for(config).run()  # the config's own recipe class, if it names one
    # one process, or rank 0 of a torchrun the user started (under --nproc the launcher says it)
    launched = USER_ERROR_FILE in os.environ
    if not getattr(trainer, "canceled", False) and distributed_rank() in (None, 0) and not launched:
        print(next_steps_line(config.trainer.save_folder, config.method, program_name(sys.argv[0])))
    return 0


def run_export(args: argparse.Namespace) -> int:
    """``honing export``: a checkpoint as a Hugging Face folder, or a model as one GGUF file (``--gguf``)."""
    if args.gguf:
        from honing.cli_gguf import run_export_gguf

        return run_export_gguf(args)
    if args.outtype is not None:
        raise ConfigError("--outtype: the GGUF file's weight type; give it with --gguf")
    from honing.run.checkpoint_model import export_checkpoint

    check_checkpoint(args.checkpoint)
    check_out_dir(args.out_dir, "export")
    print(f"exported {args.checkpoint} to {export_checkpoint(args.checkpoint, args.out_dir)}")
    return 0


def run_merge(args: argparse.Namespace) -> int:
    """``honing merge``: a LoRA checkpoint merged into a full Hugging Face model."""
    from honing.run.checkpoint_model import merge_checkpoint

    check_checkpoint(args.checkpoint)
    check_out_dir(args.out_dir, "merge")
    print(f"merged {args.checkpoint} into {merge_checkpoint(args.checkpoint, args.out_dir)}")
    return 0


def run_plot(args: argparse.Namespace) -> int:
    """``honing plot``: the runs' metrics drawn into a PNG."""
    from honing.plot import plot_runs

    print(f"wrote {plot_runs(args.run_dirs, args.output, x=args.x, metrics=args.metric, smooth=args.smooth)}")
    return 0


def run_plan(args: argparse.Namespace) -> int:
    """``honing plan``: the config's peak memory per rank, and the largest micro-batch within ``--budget``."""
    from honing.cli_plan import plan_run
    from honing.plan.estimate import parse_bytes

    check_at_least("--nproc", args.nproc, 1)
    try:
        budget = parse_bytes(args.budget) if args.budget else None
    except ValueError as error:
        raise ConfigError(f"--budget: {error}") from None
    check_positive("--budget", budget)
    print(plan_run(load_any_config(args.config, args.overrides), budget=budget, nproc=args.nproc)[0])
    return 0


def run_data(args: argparse.Namespace) -> int:
    """``honing data``: the report on a config's training data."""
    from honing.data.report_files import write_data_report
    from honing.distributed import seed_all
    from honing.recipes import recipe_for
    from honing.recipes.build_run import data_alone

    config = load_any_config(args.config, args.overrides)
    seed_all(config.trainer.seed)
    _, data = data_alone(recipe_for(config))  # its own recipe's model assets and data, as training's: no model
    reports = data.reports
    text, text_path, png_path = write_data_report(reports, args.output or config.trainer.save_folder)
    print(f"{text}\nwrote {text_path} and {png_path}")
    return 0


def run_prepare(args: argparse.Namespace) -> int:
    """``honing prepare``: token shards for pretraining, prepared rows for the fine-tuning methods."""
    check_output_folder("--out", args.out)
    check_positive("--shard-mb", args.shard_mb)
    config = load_any_config(args.config, args.overrides)
    if config.method != "pretrain":
        return prepare_rows(config, args)
    from honing.recipes.pretrain import PretrainRecipe

    recipe = PretrainRecipe(config)
    shard_bytes = max(1, int(args.shard_mb * 2**20))
    result = recipe.prepare(args.out, workers=args.workers, shard_bytes=shard_bytes, progress=sys.stderr.isatty())
    state = "up to date" if result.up_to_date else f"wrote {len(result.written)} shard(s)"
    print(
        f"{args.out}: {state}; {result.index.num_tokens:,} tokens, {result.index.num_documents:,} documents in "
        f"{len(result.index.shards)} shard(s) of {result.index.dtype}; train with "
        f"data.train.sources=[{{path: {args.out}, format: tokens}}]"
    )
    return 0


def prepare_rows(config: RunConfig, args: argparse.Namespace) -> int:
    """``honing prepare`` for a fine-tuning method: the split's rows into ``--out``; prints what it holds."""
    from honing.data.prepared_rows import REJECTED
    from honing.recipes import recipe_class
    from honing.recipes.prepare_rows import prepare_split

    recipe = recipe_class(config.method)(config)
    rows, built = prepare_split(recipe, args.out, split=args.split, workers=args.workers, progress=sys.stderr.isatty())
    rejected = int((rows.column("status") == REJECTED).sum())
    cut = rows.index["seq_len"]
    print(
        f"{args.out}: {'prepared' if built else 'up to date'}; {len(rows):,} {rows.method} rows of "
        f"{len(rows.sources)} source(s) ({rejected:,} rejected), "
        + (f"cut at {cut} tokens" if cut else "whole")
        + f"; train with data.{args.split}.sources=[{{path: {args.out}}}]"
    )
    return 0


def run_convert(args: argparse.Namespace) -> int:
    """``honing convert``: an Oumi, olmOCR, axolotl or LLaMA-Factory config written as a honing YAML."""
    text = convert_file(args.config, args.output, args.from_dialect)
    print(f"wrote {args.output}" if args.output else text, end="\n" if args.output else "")
    return 0


def run_config(args: argparse.Namespace) -> int:
    """``honing config show | schema | keys``."""
    if args.config_verb == "show":
        print(to_yaml(load_any_config(args.config, args.overrides, args.from_dialect)), end="")
    elif args.config_verb == "keys":
        print(config_keys_text(args.prefix, args.method), end="")
    else:
        print(json.dumps(RunConfig.model_json_schema(), indent=2))
    return 0


def config_keys_text(prefix: str | None, method: str | None) -> str:
    """``honing config keys [PREFIX] [--method M]``: each key under ``prefix`` (that ``method`` reads), with its type,
    default and description."""
    from honing.config.reference import config_keys, render_text

    keys = [key for key in config_keys() if method is None or method in key.methods]
    if prefix:
        keys = [key for key in keys if key.path == prefix or key.path.startswith((f"{prefix}.", f"{prefix}["))]
        if not keys:
            sections = sorted({key.path.split(".")[0] for key in config_keys() if "." in key.path})
            raise ConfigError(f"config keys: no key under {prefix!r}; the sections are: {', '.join(sections)}")
    return render_text(keys, method)


def lazy(module: str, function: str) -> Handler:
    """A handler that imports ``module`` only when its verb runs (the verbs that load a model)."""
    return lambda args: getattr(importlib.import_module(module), function)(args)


@dataclass(frozen=True)
class Verb:
    """One ``honing`` verb: its name and help, the function that adds its arguments, the one that carries it out."""

    name: str
    help: str
    arguments: Callable[[argparse.ArgumentParser], None]
    handler: Handler
    overrides_after_options: bool = False
    """``key=value`` overrides may follow its options (``--nproc N``), after argparse has closed the positionals."""


#: every verb of ``honing``, in the order ``honing --help`` lists them
VERBS: tuple[Verb, ...] = (
    Verb("train", "train from a YAML config with key.path=value overrides", train_arguments, run_train, True),
    Verb(
        "export",
        "export a checkpoint to a Hugging Face folder, or a model to GGUF (--gguf)",
        export_arguments,
        run_export,
    ),
    Verb("merge", "merge a LoRA checkpoint into a full Hugging Face model", merge_arguments, run_merge),
    Verb("plot", "draw loss, lr, grad norm and throughput of runs into a PNG", plot_arguments, run_plot),
    Verb("data", "report on a config's training data as training will see it", data_arguments, run_data),
    Verb(
        "plan", "estimate a config's peak memory per rank and the largest micro-batch", plan_arguments, run_plan, True
    ),
    Verb(
        "prepare",
        "tokenize a config's training sources once: token shards (pretrain, format: tokens) or prepared rows "
        "(sft, vl_sft, dpo, grpo: a source {path: DIR})",
        prepare_arguments,
        run_prepare,
        True,
    ),
    Verb(
        "generate",
        "answer prompts with a trained model (streamed, or batched to JSONL)",
        generate_arguments,
        lazy("honing.infer.generate_command", "run_generate"),
    ),
    Verb(
        "chat",
        "talk with a trained model in the terminal (/reset, /exit)",
        chat_arguments,
        lazy("honing.infer.chat", "run_chat"),
    ),
    Verb(
        "eval",
        "score a trained model with lm-evaluation-harness tasks",
        eval_arguments,
        lazy("honing.infer.eval_command", "run_eval"),
    ),
    Verb(
        "serve",
        "serve a trained model behind an OpenAI-compatible chat endpoint (/v1/chat/completions)",
        serve_arguments,
        lazy("honing.infer.serve", "run_serve"),
    ),
    Verb(
        "push",
        "upload a run's hf/ (or adapter/) folder to the Hugging Face Hub",
        push_arguments,
        lazy("honing.infer.push", "run_push"),
    ),
    Verb(
        "convert",
        "write an Oumi, olmOCR, axolotl or LLaMA-Factory config as a honing YAML (honing train reads them as they are)",
        convert_arguments,
        run_convert,
    ),
    Verb("config", "inspect configs: show one resolved, the JSON schema, or every key", config_arguments, run_config),
)
VERBS_BY_NAME = {verb.name: verb for verb in VERBS}


def build_parser() -> argparse.ArgumentParser:
    """The argument parser for every verb of ``VERBS``."""
    parser = OneLineErrorParser(prog="honing", description="Train language models: pretraining, SFT, DPO, GRPO.")
    parser.add_argument("--version", action="version", version=f"honing {installed_version()}")
    subparsers = parser.add_subparsers(dest="verb", required=True)
    for verb in VERBS:
        verb.arguments(subparsers.add_parser(verb.name, help=verb.help))
    return parser


def installed_version() -> str:
    """honing's version as its installed package metadata says (``unknown`` when run from a tree not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("honing")
    except PackageNotFoundError:
        return "unknown (not installed: run from a source tree)"


def run(args: argparse.Namespace) -> int:
    """Carry out one parsed command; returns the exit code."""
    if getattr(args, "config", None) is not None and args.verb != "convert":  # convert reads other systems' files
        args.config = find_config(args.config)  # a packaged config's name: its file
    with hub_access_for(args):  # offline unless the command needs the hub and the hub answers
        return VERBS_BY_NAME[args.verb].handler(args)


#: where ``honing train --nproc N`` asks its ranks to leave a user error's message for it to print on one line
USER_ERROR_FILE = "HONING_USER_ERROR_FILE"


def launch_torchrun(nproc: int, config: str, overrides: list[str], dialect: str | None = None) -> int:
    """Run ``honing train`` in ``nproc`` processes under ``torch.distributed.run`` (``dialect``: its ``--from``);
    its exit code."""
    if nproc < 1:
        raise ConfigError(f"--nproc: expected a number of processes >= 1, got {nproc}")
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={nproc}",
        "-m",
        "honing",
        "train",
        config,
        *overrides,
        *(["--from", dialect] if dialect else []),
    ]
    with tempfile.TemporaryDirectory() as folder:
        error_file = os.path.join(folder, "error")
        with subprocess.Popen(command, env={**os.environ, USER_ERROR_FILE: error_file}) as process:
            try:
                code = process.wait()
            except KeyboardInterrupt:  # torchrun got the same Ctrl-C and stops its workers; wait for that
                code = process.wait()
        if code != 0 and os.path.exists(error_file):
            # a user error (config, layout, data) found by the ranks: one line and exit 2, as in one process
            with open(error_file, encoding="utf-8") as handle:
                print(f"honing: error: {error_line(handle.read())}", file=sys.stderr)
            return 2
    if code != 0:
        print(
            f"honing: error: the {nproc}-process run failed (exit code {code}); the failed rank is named above",
            file=sys.stderr,
        )
    return code


def error_line(error: BaseException | str) -> str:
    """A user error's message on one line (the CLI's promise), or its type when it has none."""
    return one_line(str(error)) or (type(error).__name__ if isinstance(error, BaseException) else "(no message)")


def distributed_rank() -> int | None:
    """This process's rank when it is one of several started by torchrun, else None."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and "RANK" in os.environ:
        return int(os.environ["RANK"])
    return None


def report_failed_rank(rank: int, error: BaseException) -> None:
    """Print ``rank N failed: ...`` (with the traceback for internal errors) and leave the error where
    torchrun's failure summary finds it."""
    from torch.distributed.elastic.multiprocessing.errors import ErrorHandler

    print(f"honing: rank {rank} failed: {type(error).__name__}: {error}", file=sys.stderr)
    if isinstance(error, HoningError) and USER_ERROR_FILE in os.environ:
        try:  # the first rank to fail names the error; the launcher prints it on one line
            with open(os.environ[USER_ERROR_FILE], "x", encoding="utf-8") as handle:
                handle.write(str(error))
        except FileExistsError:
            pass
    elif "TORCHELASTIC_ERROR_FILE" in os.environ:
        ErrorHandler().record_exception(error)  # torchrun's failure summary shows it with the traceback
    elif not isinstance(error, HoningError):
        traceback.print_exception(error, file=sys.stderr)
    sys.stderr.flush()
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``honing`` command."""
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    overrides_only = all("=" in item and not item.startswith("-") for item in unknown)
    if unknown and (not VERBS_BY_NAME[args.verb].overrides_after_options or not overrides_only):
        hint = "; key=value overrides go right after CONFIG, before the options" if overrides_only else ""
        usage_error(f"honing {args.verb}", f"unrecognized arguments: {' '.join(unknown)}{hint}")
    if unknown:  # overrides after --nproc N / --out DIR: argparse has already closed the positionals
        args.overrides = [*args.overrides, *unknown]
    setup_logging()
    rank = distributed_rank()
    if rank is not None:
        # a rank that dies in native code (SIGABRT, SIGSEGV) prints every thread's Python stack first
        faulthandler.enable(all_threads=True)
    try:
        code = run(args)
        if rank is None:
            return code
    except HoningError as error:
        if rank is None:
            print(f"honing: error: {error_line(error)}", file=sys.stderr)
            return 2
        report_failed_rank(rank, error)
        code = 2
    except Exception as error:
        if rank is None:
            raise
        report_failed_rank(rank, error)
        code = 1
    # A torchrun worker leaves without interpreter finalization, whatever the outcome. After a failure,
    # background threads (checkpoint writes, metric reductions) may wait in a collective for peers that will
    # never join, and would hold the process. After a run that went well every file is written and closed and
    # the process group is left, but gloo's worker threads live until their group object is freed: one that
    # frees a tensor while the interpreter finalizes aborts the process (pytorch/pytorch#179291; seen in CI).
    for child in multiprocessing.active_children():
        if child.daemon:  # data-loader workers: what interpreter exit stops (they would hold the output pipes)
            child.terminate()
    sys.stdout.flush()
    sys.stderr.flush()
    logging.shutdown()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
