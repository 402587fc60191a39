"""``honing`` on the command line: parse, then hand over to a recipe. User errors exit 2."""

from __future__ import annotations

import argparse
import faulthandler
import json
import logging
import multiprocessing
import os
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

from honing.config import ConfigError, HoningError, load_config, to_yaml
from honing.config.schema import RunConfig
from honing.infer.arguments import add_chat_parser, add_eval_parser, add_generate_parser, add_push_parser

QUICKSTART = Path(__file__).resolve().parent.parent / "configs" / "quickstart.yaml"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser for every verb."""
    parser = argparse.ArgumentParser(prog="honing", description="Train language models: pretraining, SFT, DPO, GRPO.")
    verbs = parser.add_subparsers(dest="verb", required=True)

    train = verbs.add_parser("train", help="train from a YAML config with key.path=value overrides")
    train.add_argument("config", nargs="?", help="YAML config (default: the quickstart)")
    train.add_argument("overrides", nargs="*", help="dotted overrides, e.g. trainer.max_duration=200steps")
    train.add_argument(
        "--nproc",
        type=int,
        metavar="N",
        help="train with N processes on this machine (one per GPU), started by torchrun",
    )

    export = verbs.add_parser("export", help="export a checkpoint to a Hugging Face folder")
    export.add_argument("checkpoint", help="a SAVE_FOLDER/stepN checkpoint directory")
    export.add_argument("out_dir", help="where to write the Hugging Face folder")

    merge = verbs.add_parser("merge", help="merge a LoRA checkpoint into a full Hugging Face model")
    merge.add_argument("checkpoint", help="a SAVE_FOLDER/stepN checkpoint directory of a LoRA run")
    merge.add_argument("out_dir", help="where to write the merged Hugging Face folder")

    plot = verbs.add_parser("plot", help="draw loss, lr, grad norm and throughput of runs into a PNG")
    plot.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="save folders holding metrics.jsonl")
    plot.add_argument(
        "-o", "--output", help="the PNG to write (default: RUN_DIR/plot.png, or ./plot.png for several runs)"
    )
    plot.add_argument("--x", choices=["step", "tokens"], default="step", help="the horizontal axis")
    plot.add_argument(
        "--metric",
        action="append",
        metavar="NAME",
        help="a logged metric to draw in a panel of its own (repeat for more; default: loss, lr, grad norm, tokens/s)",
    )
    plot.add_argument(
        "--smooth", type=int, default=1, metavar="N", help="draw the trailing mean of N logged points over the raw line"
    )

    data = verbs.add_parser("data", help="report on a config's training data as training will see it")
    data.add_argument("config", help="YAML config")
    data.add_argument("overrides", nargs="*", help="dotted overrides, as for train")
    data.add_argument("-o", "--output", help="folder for data_report.txt / .png (default: the save folder)")

    plan = verbs.add_parser("plan", help="estimate a config's peak memory per rank and the largest micro-batch")
    plan.add_argument("config", help="YAML config")
    plan.add_argument("overrides", nargs="*", help="dotted overrides, as for train")
    plan.add_argument("--budget", metavar="SIZE", help="memory per rank, e.g. 20GiB: the largest micro-batch that fits")
    plan.add_argument("--nproc", type=int, default=1, metavar="N", help="processes the run will use (default: 1)")

    prepare = verbs.add_parser(
        "prepare",
        help="tokenize a config's training sources once: token shards (pretrain, format: tokens) or prepared rows "
        "(sft, vl_sft, dpo, grpo: a source {path: DIR})",
    )
    prepare.add_argument("config", help="YAML config (its data sources, tokenizer and row settings are used)")
    prepare.add_argument("overrides", nargs="*", help="dotted overrides, as for train")
    prepare.add_argument(
        "--out", required=True, metavar="DIR", help="the folder to write (pretraining: local or s3://...; else local)"
    )
    prepare.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="tokenizing processes (default: pretraining min(2, CPUs), else 8 at most)",
    )
    prepare.add_argument(
        "--split",
        choices=["train", "validation"],
        default="train",
        help="fine-tuning methods: which split's sources to prepare (default: train)",
    )
    prepare.add_argument(
        "--shard-mb", type=float, default=256.0, metavar="MB", help="input text per shard (default: 256)"
    )

    for add_verb in (add_generate_parser, add_chat_parser, add_eval_parser, add_push_parser):
        add_verb(verbs)  # using a trained model: honing.infer

    convert = verbs.add_parser(
        "convert", help="write an Oumi or olmOCR training config as a honing YAML (honing train reads them as they are)"
    )
    convert.add_argument("config", help="the Oumi or olmOCR YAML config")
    convert.add_argument("-o", "--output", help="the honing YAML to write (default: print it)")

    config = verbs.add_parser("config", help="inspect configs")
    config_verbs = config.add_subparsers(dest="config_verb", required=True)
    show = config_verbs.add_parser("show", help="print the resolved config (secrets redacted)")
    show.add_argument("config")
    show.add_argument("overrides", nargs="*")
    config_verbs.add_parser("schema", help="print the config's JSON schema (for editor completion)")
    return parser


def split_config_and_overrides(config: str | None, overrides: list[str]) -> tuple[str, list[str]]:
    """``honing train key=value`` (no file) means the quickstart with those overrides."""
    if config is None or ("=" in config and not os.path.exists(config)):
        return str(QUICKSTART), ([config] if config else []) + overrides
    return config, overrides


def setup_logging() -> None:
    """INFO from honing on rank 0, warnings only elsewhere; quieter third-party libraries."""
    rank = int(os.environ.get("RANK", "0"))
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    logging.getLogger("honing").setLevel(logging.INFO if rank == 0 else logging.WARNING)
    # torchao, imported by peft and transformers whenever it is installed, registers enums with torch's pytree, which
    # logs a deprecation notice for each: noise in every run's log that the user can do nothing about
    logging.getLogger("torch.utils._pytree").setLevel(logging.ERROR)


#: the verbs that use a trained model: verb → (module, function(args) -> exit code)
USE_VERBS = {
    "generate": ("honing.infer.generate_command", "run_generate"),
    "chat": ("honing.infer.chat", "run_chat"),
    "eval": ("honing.infer.eval_command", "run_eval"),
    "push": ("honing.infer.push", "run_push"),
}


def run(args: argparse.Namespace) -> int:
    """Carry out one parsed command; returns the exit code."""
    if args.verb == "train":
        from honing.recipes import recipe_for

        path, overrides = split_config_and_overrides(args.config, args.overrides)
        config = load_config(path, overrides)  # checked here, so a bad config fails once, before any launch
        if args.nproc is not None and "RANK" not in os.environ:
            from honing.parallel_dims import parallel_dims_from

            parallel_dims_from(config.parallel, args.nproc)  # a layout that cannot fit fails before any launch
            return launch_torchrun(args.nproc, path, overrides)
        recipe_for(config).run()  # the config's own recipe class, if it names one
        return 0
    if args.verb == "export":
        from honing.recipes.checkpoint_model import export_checkpoint

        print(f"exported {args.checkpoint} to {export_checkpoint(args.checkpoint, args.out_dir)}")
        return 0
    if args.verb == "merge":
        from honing.recipes.checkpoint_model import merge_checkpoint

        print(f"merged {args.checkpoint} into {merge_checkpoint(args.checkpoint, args.out_dir)}")
        return 0
    if args.verb == "plot":
        from honing.plot import plot_runs

        print(f"wrote {plot_runs(args.run_dirs, args.output, x=args.x, metrics=args.metric, smooth=args.smooth)}")
        return 0
    if args.verb == "plan":
        from honing.plan.estimate import parse_bytes
        from honing.plan.from_config import plan_config

        try:
            budget = parse_bytes(args.budget) if args.budget else None
        except ValueError as error:
            raise ConfigError(f"--budget: {error}") from None
        print(plan_config(load_config(args.config, args.overrides), budget=budget, nproc=args.nproc)[0])
        return 0
    if args.verb == "data":
        from honing.data_report import write_data_report

        text, text_path, png_path = write_data_report(load_config(args.config, args.overrides), args.output)
        print(f"{text}\nwrote {text_path} and {png_path}")
        return 0
    if args.verb == "prepare":
        config = load_config(args.config, args.overrides)
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
    if args.verb in USE_VERBS:
        import importlib

        module, function = USE_VERBS[args.verb]
        return getattr(importlib.import_module(module), function)(args)
    if args.verb == "convert":
        from honing.config.converting import convert_file

        text = convert_file(args.config, args.output)
        print(f"wrote {args.output}" if args.output else text, end="\n" if args.output else "")
        return 0
    if args.config_verb == "show":
        print(to_yaml(load_config(args.config, args.overrides)), end="")
        return 0
    print(json.dumps(RunConfig.model_json_schema(), indent=2))
    return 0


def prepare_rows(config: RunConfig, args: argparse.Namespace) -> int:
    """``honing prepare`` for a fine-tuning method: the split's rows into ``--out``; prints what it holds."""
    from honing.data.prepared_rows import REJECTED
    from honing.recipes import recipe_class

    recipe = recipe_class(config.method)(config)
    rows, built = recipe.prepare(args.out, split=args.split, workers=args.workers, progress=sys.stderr.isatty())
    rejected = int((rows.column("status") == REJECTED).sum())
    cut = rows.index["seq_len"]
    print(
        f"{args.out}: {'prepared' if built else 'up to date'}; {len(rows):,} {rows.method} rows of "
        f"{len(rows.sources)} source(s) ({rejected:,} rejected), "
        + (f"cut at {cut} tokens" if cut else "whole")
        + f"; train with data.{args.split}.sources=[{{path: {args.out}}}]"
    )
    return 0


#: where ``honing train --nproc N`` asks its ranks to leave a user error's message for it to print on one line
USER_ERROR_FILE = "HONING_USER_ERROR_FILE"


def launch_torchrun(nproc: int, config: str, overrides: list[str]) -> int:
    """Run ``honing train`` in ``nproc`` processes under ``torch.distributed.run``; its exit code."""
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
                print(f"honing: error: {handle.read()}", file=sys.stderr)
            return 2
    if code != 0:
        print(
            f"honing: error: the {nproc}-process run failed (exit code {code}); the failed rank is named above",
            file=sys.stderr,
        )
    return code


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
    if unknown and (args.verb not in ("train", "prepare", "plan") or not overrides_only):
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
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
            print(f"honing: error: {error}", file=sys.stderr)
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
