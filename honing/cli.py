"""``honing`` on the command line: parse, then hand over to a recipe. User errors exit 2."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

from honing.config import HoningError, load_config, to_yaml
from honing.config.schema import RunConfig

QUICKSTART = Path(__file__).resolve().parent.parent / "configs" / "quickstart.yaml"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser for every verb."""
    parser = argparse.ArgumentParser(prog="honing", description="Train language models: pretraining, SFT, DPO, GRPO.")
    verbs = parser.add_subparsers(dest="verb", required=True)

    train = verbs.add_parser("train", help="train from a YAML config with key.path=value overrides")
    train.add_argument("config", nargs="?", help="YAML config (default: the quickstart)")
    train.add_argument("overrides", nargs="*", help="dotted overrides, e.g. trainer.max_duration=200steps")

    export = verbs.add_parser("export", help="export a checkpoint to a Hugging Face folder")
    export.add_argument("checkpoint", help="a SAVE_FOLDER/stepN checkpoint directory")
    export.add_argument("out_dir", help="where to write the Hugging Face folder")

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


def run(args: argparse.Namespace) -> int:
    """Carry out one parsed command; returns the exit code."""
    if args.verb == "train":
        from honing.recipes import RECIPES

        path, overrides = split_config_and_overrides(args.config, args.overrides)
        config = load_config(path, overrides)
        RECIPES[config.method](config).run()
        return 0
    if args.verb == "export":
        from honing.models.checkpoint_export import export_checkpoint

        print(f"exported {args.checkpoint} to {export_checkpoint(args.checkpoint, args.out_dir)}")
        return 0
    if args.config_verb == "show":
        print(to_yaml(load_config(args.config, args.overrides)), end="")
        return 0
    print(json.dumps(RunConfig.model_json_schema(), indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``honing`` command."""
    args = build_parser().parse_args(argv)
    setup_logging()
    try:
        return run(args)
    except HoningError as error:
        print(f"honing: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
