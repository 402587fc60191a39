"""The paths and names a run reads or writes, fuzzed offline (issue 45): ``trainer.save_folder``, ``trainer.load_path``,
data source paths, hub model names and ``honing push``. Each bad one is one line on stderr naming the key, exit
status 2, before any tokenizer or model is built; a good one reaches the build. No test here builds a model: the
run stops right after its path checks (``Reached``)."""

from __future__ import annotations

import json
import os
import socket
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import huggingface_hub
import huggingface_hub.constants
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import honing.recipes.build_run as recipe_base
from honing.cli import main
from tests.cli.test_bad_input import _Collect, the_error_line

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = str(REPO / "configs" / "quickstart.yaml")
FEW = settings(
    max_examples=int(os.environ.get("HONING_PATH_FUZZ_EXAMPLES", "8")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    database=None,
)
# Names of files and folders as users make them: spaces, accents, quotes, YAML's and the shell's punctuation. Not
# ':' (a source path's ':split' and URLs' '://' are syntax), glob characters or '/' (a path's own syntax).
SEGMENT = st.text(alphabet=st.sampled_from("abcXYZ019 -_.,;'\"=()!@#$%^&+~`|<>ñé→"), min_size=1, max_size=10).filter(
    lambda name: name.strip(". ") != "" and not name.startswith("-")
)


class Reached(Exception):
    """The run got past its path checks: the next step would build the tokenizer and the model."""


@contextmanager
def offline_cli(cwd: str) -> Iterator[list[str]]:
    """Run ``honing`` in this process from ``cwd``, offline, with the run stopped after its path checks; yields the
    list that collects stderr."""
    err: list[str] = []
    real_check = recipe_base.check_run_paths

    def check_then_stop(config):
        real_check(config)
        raise Reached(config)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(recipe_base, "check_run_paths", check_then_stop)
        patch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
        patch.setattr(huggingface_hub, "get_token", lambda: None)
        patch.setenv("HF_HUB_OFFLINE", "1")
        patch.setenv("HF_DATASETS_OFFLINE", "1")
        patch.delenv("HF_TOKEN", raising=False)
        patch.setattr("sys.stderr", _Collect(err))
        patch.setattr("sys.stdout", _Collect([]))
        patch.chdir(cwd)
        yield err


def honing(argv: list[str]) -> int | Reached:
    """``honing ARGV``: its exit status, or the ``Reached`` of a run that passed its path checks."""
    try:
        return main(argv)
    except SystemExit as exit:
        return exit.code
    except Reached as reached:
        return reached


def one_line_naming(outcome: int | Reached, err: list[str], key: str) -> str:
    """The one error line of a refusal that names ``key`` (fails on a traceback, a run that went on, or exit != 2)."""
    assert not isinstance(outcome, Reached), f"{key}: the run went on to build its model"
    line = the_error_line("".join(err))
    assert outcome == 2, line
    assert key in line, line
    return line


def quoted(path: str) -> str:
    """``path`` as a YAML value that reads back as this very string (a JSON string is YAML)."""
    return json.dumps(path)


# --- trainer.save_folder ---------------------------------------------------------------------------------------
def make_place(root: Path, kind: str, name: str) -> str:
    """A path of ``kind`` under ``root`` whose last part is ``name``."""
    if kind == "missing":
        return str(root / "new" / name)
    if kind in ("empty", "folder"):
        (root / name).mkdir()
        if kind == "folder":
            (root / name / "a.txt").write_text("some text to read\n")
        return str(root / name)
    if kind == "file":
        (root / name).write_text("some text to read\n")
        return str(root / name)
    if kind == "below-file":
        (root / "a-file").write_text("x\n")
        return str(root / "a-file" / name)
    raise AssertionError(kind)


@FEW
@given(kind=st.sampled_from(["missing", "empty", "folder", "file", "below-file"]), name=SEGMENT)
def test_a_save_folder_that_is_or_lies_below_a_file_is_one_line_before_the_model(kind, name):
    with tempfile.TemporaryDirectory() as tmp, offline_cli(tmp) as err:
        save_folder = make_place(Path(tmp), kind, name)
        outcome = honing(["train", QUICKSTART, f"trainer.save_folder={quoted(save_folder)}"])
        event(f"{kind}: {'reached' if isinstance(outcome, Reached) else outcome}")
        if kind in ("missing", "empty", "folder"):
            assert isinstance(outcome, Reached), "".join(err)
            assert outcome.args[0].trainer.save_folder == save_folder
            assert os.listdir(tmp) == ([] if kind == "missing" else [name])  # the check leaves nothing behind
        else:
            line = one_line_naming(outcome, err, "trainer.save_folder")
            assert "a folder this user can write" in line


def unwritable_folder(tmp: Path) -> str | None:
    """A folder this process cannot create anything in (root ignores permission bits: then /sys, when it refuses)."""
    if os.geteuid() != 0:
        locked = tmp / "locked"
        locked.mkdir(mode=0o500)
        return str(locked)
    try:
        os.rmdir(tempfile.mkdtemp(dir="/sys"))
    except OSError:
        return "/sys"
    return None


def test_a_save_folder_that_cannot_be_written_is_one_line_before_the_model(tmp_path):
    parent = unwritable_folder(tmp_path)
    if parent is None:
        pytest.skip("no folder here refuses this user's writes")
    with offline_cli(str(tmp_path)) as err:
        outcome = honing(["train", QUICKSTART, f"trainer.save_folder={parent}/run"])
    line = one_line_naming(outcome, err, "trainer.save_folder")
    assert f"cannot write {parent}/run" in line


# --- trainer.load_path -----------------------------------------------------------------------------------------
def make_checkpoints(root: Path, kind: str, name: str) -> str:
    """A load path of ``kind``: a complete checkpoint, a run folder holding one, or one of ``make_place``'s."""
    if kind not in ("checkpoint", "run"):
        return make_place(root, kind, name)
    run = root / name
    (run / "step3").mkdir(parents=True)
    (run / "step3" / ".complete").write_text("")  # the marker a finished save leaves (honing.train.checkpoint)
    return str(run / "step3" if kind == "checkpoint" else run)


@FEW
@given(kind=st.sampled_from(["checkpoint", "run", "missing", "file", "empty", "folder"]), name=SEGMENT)
def test_a_load_path_that_holds_no_checkpoint_is_one_line_before_the_model(kind, name):
    with tempfile.TemporaryDirectory() as tmp, offline_cli(tmp) as err:
        load_path = make_checkpoints(Path(tmp), kind, name)
        save_folder = quoted(str(Path(tmp) / "save"))
        outcome = honing(
            ["train", QUICKSTART, f"trainer.save_folder={save_folder}", f"trainer.load_path={quoted(load_path)}"]
        )
        event(f"{kind}: {'reached' if isinstance(outcome, Reached) else outcome}")
        if kind in ("checkpoint", "run"):
            assert isinstance(outcome, Reached), "".join(err)
        else:
            line = one_line_naming(outcome, err, "trainer.load_path")
            assert "give a checkpoint (SAVE_FOLDER/stepN)" in line


def test_a_missing_load_path_is_not_read_when_the_save_folder_resumes(tmp_path):
    # the run resumes from its own checkpoint and never reads load_path: a load_path deleted since the first start
    # must not block the resume
    make_checkpoints(tmp_path, "run", "save")
    with offline_cli(str(tmp_path)) as err:
        outcome = honing(
            ["train", QUICKSTART, f"trainer.save_folder={tmp_path / 'save'}", f"trainer.load_path={tmp_path / 'gone'}"]
        )
    assert isinstance(outcome, Reached), "".join(err)


# --- data source paths -----------------------------------------------------------------------------------------
@FEW
@given(kind=st.sampled_from(["file", "folder", "glob", "missing", "empty", "glob-no-match"]), name=SEGMENT)
def test_a_data_path_that_names_no_file_is_one_line_before_the_model(kind, name):
    with tempfile.TemporaryDirectory() as tmp, offline_cli(tmp) as err:
        root = Path(tmp)
        if kind.startswith("glob"):
            make_place(root, "folder" if kind == "glob" else "empty", name)
            path = str(root / name / "*.txt")
        else:
            path = make_place(root, kind, name)
        overrides = [
            f"trainer.save_folder={quoted(str(root / 'save'))}",
            f"data.train.sources=[{{path: {quoted(path)}}}]",
        ]
        outcome = honing(["train", QUICKSTART, *overrides])
        event(f"{kind}: {'reached' if isinstance(outcome, Reached) else outcome}")
        if kind in ("file", "folder", "glob"):
            assert isinstance(outcome, Reached), "".join(err)
        else:
            line = one_line_naming(outcome, err, "data.train.sources[0].path")
            assert "no files match" in line


def test_a_relative_data_path_is_refused_naming_where_it_was_looked_for(tmp_path):
    with offline_cli(str(tmp_path)) as err:
        outcome = honing(["train", QUICKSTART, "trainer.save_folder=save", "data.train.sources=[{path: my.txt}]"])
    line = one_line_naming(outcome, err, "data.train.sources[0].path")
    assert f"(relative to {tmp_path})" in line


# --- hub model names -------------------------------------------------------------------------------------------
HUB_LIKE = st.builds(
    lambda owner, name: f"{owner}/{name}",
    st.text(alphabet="abcxyz0123-_.", min_size=1, max_size=8),
    st.text(alphabet="abcxyz0123-_.", min_size=1, max_size=8),
)


@FEW
@given(verb=st.sampled_from(["plan", "generate"]), name=st.one_of(HUB_LIKE, SEGMENT))
def test_a_hub_name_that_cannot_be_reached_is_one_line(verb, name):
    with tempfile.TemporaryDirectory() as tmp, offline_cli(tmp) as err:
        if verb == "plan":
            argv = ["plan", QUICKSTART, "model.config=null", f"model.name_or_path={quoted(name)}"]
            key = "model.name_or_path"
        else:
            argv = ["generate", name, "--prompt", "x"]
            key = "MODEL_OR_RUN"
        outcome = honing(argv)
        event(f"{verb}: {outcome}")
        one_line_naming(outcome, err, key)


# --- honing push -----------------------------------------------------------------------------------------------
def make_run(root: Path, kind: str) -> str:
    """A folder ``honing push`` is given: a run with an exported model and its card, or something less."""
    if kind in ("missing", "file", "empty"):
        return make_place(root, kind, "run")
    (root / "run" / "hf").mkdir(parents=True)
    (root / "run" / "hf" / "config.json").write_text("{}")
    if kind == "run":
        (root / "run" / "hf" / "README.md").write_text("a model card\n")
    return str(root / "run")


TOKENS = st.one_of(st.just("hf_abcdef0123456789"), st.text(min_size=1, max_size=12).filter(lambda t: t[0] != "-"))
REPO_IDS = st.one_of(st.just("me/model"), st.text(min_size=1, max_size=20).filter(lambda t: t[0] != "-"))


@FEW
@given(kind=st.sampled_from(["run", "run-without-card", "missing", "file", "empty"]), repo_id=REPO_IDS, token=TOKENS)
def test_push_offline_is_one_line_whatever_the_run_repo_and_token(kind, repo_id, token):
    with tempfile.TemporaryDirectory() as tmp, offline_cli(tmp) as err:
        outcome = honing(["push", make_run(Path(tmp), kind), repo_id, "--token", token])
        event(f"{kind}: {outcome}")
        line = one_line_naming(outcome, err, "")
        assert any(name in line for name in ("RUN", "REPO_ID", "push", "--token")), line


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize("where", ["offline", "unreachable"])
def test_push_to_a_hub_that_cannot_be_reached_is_one_line_naming_the_fix(tmp_path, where):
    run = make_run(tmp_path, "run")
    with offline_cli(str(tmp_path)) as err, pytest.MonkeyPatch.context() as patch:
        if where == "unreachable":  # huggingface_hub's requests go to a closed port: refused at once
            patch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
            patch.delenv("HF_HUB_OFFLINE")
            patch.setattr(huggingface_hub.constants, "ENDPOINT", f"http://127.0.0.1:{closed_port()}")
        outcome = honing(["push", run, "me/model", "--token", "hf_abcdef0123456789"])
    line = one_line_naming(outcome, err, "push: cannot reach the Hugging Face Hub to upload me/model")
    assert ("HF_HUB_OFFLINE is set" if where == "offline" else "check the network") in line
    assert "hf_abcdef0123456789" not in line  # a token is a secret: never echoed
