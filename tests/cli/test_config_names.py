"""A config is a path, or the name of a packaged example config when no such file exists where the command runs
(issue 45: an installed wheel's configs could only be named by their site-packages path): ``honing train sft-full``,
``sft-full.yaml`` and ``configs/sft-full.yaml`` typed from any folder run the packaged file; an unknown name is one
line listing the packaged names."""

from __future__ import annotations

import pytest

from honing.cli import main
from honing.cli_configs import EXAMPLE_CONFIGS, packaged_config, packaged_config_names
from tests.cli.test_bad_input import the_error_line
from tests.cli.test_paths_offline import Reached, honing, offline_cli


@pytest.mark.parametrize(
    "name, run_name",
    [
        ("sft-full", "sft-full"),
        ("sft-full.yaml", "sft-full"),
        ("configs/sft-full.yaml", "sft-full"),  # as the README writes it, typed outside the repository
        ("models/smollm2/smollm2-1.7b-full-24gb", None),
    ],
)
def test_a_packaged_config_is_found_by_its_name_from_another_folder(name, run_name, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["config", "show", name]) == 0
    shown = capsys.readouterr().out
    assert "method: " in shown
    if run_name:
        assert f"run_name: {run_name}\n" in shown


def test_a_file_where_the_command_runs_wins_over_the_packaged_config_of_that_name(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    mine = (EXAMPLE_CONFIGS / "sft-full.yaml").read_text().replace("run_name: sft-full", "run_name: mine")
    (tmp_path / "sft-full.yaml").write_text(mine)
    assert main(["config", "show", "sft-full.yaml"]) == 0
    assert "run_name: mine\n" in capsys.readouterr().out


def test_an_unknown_name_is_one_line_listing_the_packaged_names(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["plan", "sft-fulll"]) == 2
    line = the_error_line(capsys.readouterr().err)
    assert "CONFIG: no file 'sft-fulll' here and no packaged config of that name" in line
    assert ", ".join(packaged_config_names()) in line
    assert {"quickstart", "sft-full", "dpo", "grpo"} <= set(packaged_config_names())


def test_a_name_never_reaches_outside_the_packaged_configs():
    assert (EXAMPLE_CONFIGS.parent / "mkdocs.yml").is_file()  # a YAML file one folder up, in the source tree
    assert packaged_config("../mkdocs.yml") is None
    assert packaged_config("/etc/hostname") is None
    assert packaged_config("quickstart") == (EXAMPLE_CONFIGS / "quickstart.yaml").resolve()


def test_train_runs_the_packaged_config_its_name_gives(tmp_path):
    with offline_cli(str(tmp_path)) as err:
        outcome = honing(["train", "sft-full", f"trainer.save_folder={tmp_path / 'run'}"])
    assert isinstance(outcome, Reached), "".join(err)
    config = outcome.args[0]
    assert (config.run_name, config.method, config.trainer.save_folder) == ("sft-full", "sft", str(tmp_path / "run"))
