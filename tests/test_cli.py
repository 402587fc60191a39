"""The verb table of ``honing``: the parser's subcommands and the dispatch both come from ``VERBS``."""

import argparse
from dataclasses import replace

import pytest

from honing.cli import VERBS, VERBS_BY_NAME, build_parser, main, run


def test_every_verb_of_the_table_is_a_subcommand_with_its_help():
    parser = build_parser()
    subcommands = next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
    assert list(subcommands.choices) == [verb.name for verb in VERBS]
    helps = {choice.dest: choice.help for choice in subcommands._choices_actions}
    assert helps == {verb.name: verb.help for verb in VERBS}


def test_a_parsed_verb_runs_its_handler_and_returns_its_exit_code(monkeypatch):
    seen = []
    monkeypatch.setitem(
        VERBS_BY_NAME, "export", replace(VERBS_BY_NAME["export"], handler=lambda a: seen.append(a) or 7)
    )
    args = build_parser().parse_args(["export", "runs/x/step10", "out"])
    assert run(args) == 7 and seen[0].checkpoint == "runs/x/step10" and seen[0].out_dir == "out"


def test_overrides_after_options_only_where_the_table_allows_them(monkeypatch, capsys):
    seen = []
    monkeypatch.setitem(VERBS_BY_NAME, "plan", replace(VERBS_BY_NAME["plan"], handler=lambda a: seen.append(a) or 0))
    assert main(["plan", "quickstart", "--nproc", "2", "optim.lr=0.1"]) == 0  # a packaged config's name
    assert seen[0].overrides == ["optim.lr=0.1"] and seen[0].nproc == 2
    assert seen[0].config.endswith("configs/quickstart.yaml")  # the handler gets its file
    with pytest.raises(SystemExit) as exit:
        main(["data", "c.yaml", "-o", "out", "optim.lr=0.1"])  # data takes its overrides before its options only
    assert exit.value.code == 2 and "unrecognized arguments: optim.lr=0.1" in capsys.readouterr().err


def test_config_keys_prints_the_keys_under_a_prefix(capsys):
    assert main(["config", "keys", "scheduler"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("scheduler.semantics: one of: honing, transformers = honing\n    ")
    assert "\nscheduler.name: " in out
    assert "scheduler.warmup_ratio: float or null, >= 0 and < 1 = null\n" in out
    assert not any(line.startswith("optim.") for line in out.splitlines())  # descriptions may name optim.lr


def test_version_is_the_installed_packages(capsys):
    import re
    from pathlib import Path

    pyproject = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    version = re.search(r'^version = "([^"]+)"', pyproject, flags=re.M).group(1)  # tomllib is 3.11+
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"honing {version}"
