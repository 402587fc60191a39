"""The README stays a short front door whose commands work as written: the two commands at the top, every
``honing train`` line a valid config (with a layout that fits its ``--nproc``), every link a file that exists."""

import re
import shlex
from pathlib import Path

import pytest

from honing.cli_configs import find_config
from honing.config import load_config
from honing.parallel_dims import parallel_dims_from

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def train_commands() -> list[list[str]]:
    """The arguments after ``honing train`` of every command line in the README (continuations joined)."""
    text = README.replace("\\\n", " ")
    lines = [line.split("#", 1)[0] for line in text.splitlines() if "honing train " in line and "`" not in line]
    return [shlex.split(line.split("honing train ", 1)[1]) for line in lines]


def config_file(name: str) -> str:
    """The file a README command's CONFIG names: a path from the repository's root, else a packaged config's name
    (``honing train sft-full``), as the CLI finds it."""
    return str(ROOT / name) if (ROOT / name).exists() else find_config(name)


def test_the_readme_is_short_and_opens_with_the_two_commands():
    lines = README.splitlines()
    assert len(lines) <= 250
    first_block = README.split("```bash\n", 1)[1].split("```", 1)[0].splitlines()
    assert [line.split("#")[0].strip() for line in first_block] == ["make train", "make test"]
    assert README.index("make train") < README.index("\n## ")  # before the first section


@pytest.mark.parametrize("arguments", train_commands(), ids=lambda args: " ".join(args))
def test_every_train_command_of_the_readme_is_a_valid_config(arguments):
    nproc = None
    if "--nproc" in arguments:
        at = arguments.index("--nproc")
        nproc = int(arguments[at + 1])
        arguments = arguments[:at] + arguments[at + 2 :]
    config_path, *overrides = arguments
    config = load_config(config_file(config_path), overrides)
    if nproc is not None:
        parallel_dims_from(config.parallel, nproc)  # raises when the layout cannot fit


def test_the_readme_names_an_example_for_every_method():
    configs = {args[0] for args in train_commands()}
    methods = {load_config(config_file(path), []).method for path in configs}
    assert methods >= {"pretrain", "sft", "vl_sft", "dpo", "grpo"}
    assert {"configs/sft-full.yaml", "configs/sft-lora.yaml", "configs/sft-qlora.yaml"} <= configs


def test_every_link_of_the_readme_is_a_file_of_the_repository():
    targets = {target.split("#")[0] for target in re.findall(r"\]\(([^)]+)\)", README)}
    local = sorted(target for target in targets if target and "://" not in target)
    assert local, "the README links to the docs"
    assert [target for target in local if not (ROOT / target).exists()] == []
