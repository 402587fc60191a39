"""Every verb of ``honing`` answers bad input with one line on stderr naming the argument or key, and exit status 2:
unreachable hub names, folders that are not runs or checkpoints, generation lengths past the model's context, missing
config and task files, bad flags, bad override syntax and wrong value types. Never a traceback.

The cases run ``honing.cli.main`` in this process; two run the installed command, as a user types it."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import huggingface_hub
import huggingface_hub.constants
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from honing.cli import VERBS, main
from honing.cli_arguments import one_line
from tests.infer.conftest import train_example

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = str(REPO / "configs" / "quickstart.yaml")
GSM8K = str(REPO / "configs" / "eval" / "gsm8k_local.yaml")
QLORA = str(REPO / "configs" / "sft-qlora.yaml")
VL_SFT = str(REPO / "configs" / "vl-sft.yaml")
REVERSE = str(REPO / "configs" / "eval" / "reverse.yaml")
HUB_NAME = "no-such-org/no-such-model"
HUB_MODEL = ["model.config=null", f"model.name_or_path={HUB_NAME}"]
HONING = os.path.join(os.path.dirname(sys.executable), "honing")  # the installed console script
FUZZ = settings(
    max_examples=int(os.environ.get("HONING_FUZZ_EXAMPLES", "40")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    database=None,
)


@dataclass(frozen=True)
class Case:
    """``honing VERB ARGS...`` and what its one error line must name; ``{run}``, ``{ckpt}``, ``{empty}``, ``{file}``,
    ``{junk}``, ``{missing}`` and ``{tmp}`` in them stand for the paths of the ``folders`` and ``trained_run``
    fixtures; ``needs``: the optional extra's module the case reaches (skipped without it)."""

    verb: str
    args: tuple[str, ...]
    names: str
    needs: str | None


def case(verb: str, *args: str, names: str, needs: str | None = None) -> Case:
    return Case(verb, args, names, needs or ("lm_eval" if verb == "eval" else None))


CASES = [
    case("train", QUICKSTART, "trainer.nosuch=1", names="trainer.nosuch"),
    case("train", QUICKSTART, "trainer.seed=abc", names="trainer.seed"),
    case("train", QUICKSTART, "trainer.max_duration=[", names="trainer.max_duration"),
    case("train", QUICKSTART, "trainer.max_duration=12parsecs", names="trainer.max_duration"),
    case("train", QUICKSTART, "a..b=1", names="a..b"),
    case("train", QUICKSTART, "foo", names="'foo'"),
    case("train", "{missing}.yaml", names="{missing}.yaml"),
    case("train", "{empty}", names="{empty}"),
    case("train", "{tmp}/bad.yaml", names="{tmp}/bad.yaml"),
    case("train", QUICKSTART, "--nproc", "x", names="--nproc"),
    case("train", QUICKSTART, "--nproc", "0", names="--nproc"),
    case("train", QUICKSTART, "--bogus", names="--bogus"),
    case("train", QUICKSTART, *HUB_MODEL, "trainer.save_folder={tmp}/train", names="model.name_or_path"),
    case(
        "train",
        QLORA,
        f"model.name_or_path={HUB_NAME}",
        "tokenizer.path={run}/hf",  # a tokenizer that loads: the quantizing load is what meets the hub name
        "trainer.save_folder={tmp}/qlora",
        names="model.name_or_path",
        needs="torchao",
    ),
    case("train", VL_SFT, *HUB_MODEL, "trainer.save_folder={tmp}/vl", names="model.name_or_path", needs="torchvision"),
    case("export", "{missing}", "{tmp}/out", names="CHECKPOINT"),
    case("export", "{empty}", "{tmp}/out", names="CHECKPOINT"),
    case("export", "{file}", "{tmp}/out", names="CHECKPOINT"),
    case("export", "{junk}", "{tmp}/out", names="CHECKPOINT"),
    case("export", "{run}", "{tmp}/out", names="{ckpt}"),
    case("export", "{ckpt}", "{file}", names="OUT_DIR"),
    case("export", "{ckpt}", "{junk}", names="OUT_DIR"),
    case("export", names="checkpoint, out_dir"),
    case("export", "{ckpt}", "{tmp}/out", "--outtype", "f16", names="--outtype"),  # a GGUF option without --gguf
    case("export", "{junk}", "{tmp}/model.gguf", "--gguf", names="CHECKPOINT", needs="gguf"),
    case("export", "{missing}", "{tmp}/model.gguf", "--gguf", names="CHECKPOINT", needs="gguf"),
    case("export", "{run}", "{empty}", "--gguf", names="OUT_DIR", needs="gguf"),
    case("export", "{run}", "{file}", "--gguf", names="OUT_DIR", needs="gguf"),  # a file that is not GGUF
    case("export", "{run}", "{tmp}/model.gguf", "--gguf", "--outtype", "q4_0", names="--outtype", needs="gguf"),
    case("merge", "{empty}", "{tmp}/out", names="CHECKPOINT"),
    case("merge", "{run}", "{tmp}/out", names="{ckpt}"),
    case("merge", "{ckpt}", "{junk}", names="OUT_DIR"),
    case("merge", "{ckpt}", names="out_dir"),
    case("plot", "{missing}", names="{missing}"),
    case("plot", "{empty}", names="{empty}"),
    case("plot", "{file}", names="{file}"),
    case("plot", "{run}", "--x", "bogus", names="--x"),
    case("plot", "{run}", "--smooth", "0", names="--smooth"),
    case("plot", "{run}", "--metric", "nosuch", "-o", "{tmp}/plot.png", names="--metric"),
    case("data", "{missing}.yaml", names="{missing}.yaml"),
    case("data", QUICKSTART, "trainer.nosuch=1", names="trainer.nosuch"),
    case("data", QUICKSTART, "-o", "{tmp}/data", "optim.lr=1", names="optim.lr=1"),
    case("data", QUICKSTART, *HUB_MODEL, "tokenizer.kind=pretrained", names="model.name_or_path"),
    case("data", str(REPO / "configs" / "dpo.yaml"), *HUB_MODEL, names="model.name_or_path"),
    case("plan", "{missing}.yaml", names="{missing}.yaml"),
    case("plan", QUICKSTART, "--budget", "lots", names="--budget"),
    case("plan", QUICKSTART, "--budget=-1GiB", names="--budget"),
    case("plan", QUICKSTART, "--nproc", "0", names="--nproc"),
    case("plan", QUICKSTART, "--nprocs", "2", names="--nprocs"),
    case("plan", QUICKSTART, "optim.betas=[1", names="optim.betas"),
    case("plan", QUICKSTART, *HUB_MODEL, names="model.name_or_path"),
    case("prepare", QUICKSTART, names="--out"),
    case("prepare", QUICKSTART, "--out", "{file}", names="--out"),
    case("prepare", QUICKSTART, "--out", "{tmp}/shards", "--shard-mb", "-1", names="--shard-mb"),
    case("prepare", QUICKSTART, "--out", "{tmp}/shards", "--workers", "0", names="--workers"),
    case("prepare", QUICKSTART, "--out", "{tmp}/shards", "--split", "bogus", names="--split"),
    case("prepare", QUICKSTART, "--out", "{tmp}/shards", *HUB_MODEL, "tokenizer.kind=pretrained", names="model.name"),
    case("generate", "{missing}", "--prompt", "x", names="MODEL_OR_RUN"),
    case("generate", "{empty}", "--prompt", "x", names="MODEL_OR_RUN"),
    case("generate", "{file}", "--prompt", "x", names="MODEL_OR_RUN"),
    case("generate", "{junk}", "--prompt", "x", names="MODEL_OR_RUN"),
    case("generate", HUB_NAME, "--prompt", "x", names="MODEL_OR_RUN"),
    case("generate", "{run}", names="--prompt"),
    case("generate", "{run}", "--file", "{missing}.jsonl", names="--file"),
    case("generate", "{run}", "--prompt", "x", "--max-new-tokens", "1000", names="--max-new-tokens"),
    case("generate", "{run}", "--prompt", "x", "--max-new-tokens", "256", names="--max-new-tokens"),
    case("generate", "{run}", "--prompt", "x", "--max-new-tokens", "abc", names="--max-new-tokens"),
    case("generate", "{run}", "--prompt", "x", "--device", "tpu", names="--device"),
    case("generate", "{run}", "--prompt", "x", "--device", "meta", names="--device"),
    case("generate", "{run}", "--prompt", "x", "--dtype", "int3", names="--dtype"),
    case("generate", "{run}", "--prompt", "x", "--temperature", "-1", names="--temperature"),
    case("chat", "{missing}", names="MODEL_OR_RUN"),
    case("chat", "{junk}", names="MODEL_OR_RUN"),
    case("chat", HUB_NAME, names="MODEL_OR_RUN"),
    case("chat", "{run}", "--max-new-tokens", "1000", names="--max-new-tokens"),
    case("chat", "{run}", "\x85", names="unrecognized arguments: \\x85"),  # a line break of str.splitlines
    case("chat", "{run}", names="--no-chat-template"),  # the quickstart continues text: it has no chat template
    case("eval", "{run}", "--tasks", GSM8K, names="--max-new-tokens"),  # 256 new tokens in 256 positions
    case("eval", "{run}", "--tasks", GSM8K, "--max-new-tokens", "300", names="--max-new-tokens"),
    case("eval", "{run}", "--tasks", "{missing}.yaml", names="--tasks"),
    case("eval", "{run}", "--tasks", "{tmp}/no_task.yaml", names="--tasks"),
    case("eval", "{run}", "--tasks", "{tmp}/missing_data.yaml", "--max-new-tokens", "8", names="data_files"),
    case("eval", "{run}", "--tasks", REVERSE, "--limit", "-1", names="--limit"),
    case("eval", "{run}", "--tasks", REVERSE, "--batch-size", "0", names="--batch-size"),
    case("eval", "{run}", "--tasks", REVERSE, "--num-fewshot", "-2", names="--num-fewshot"),
    case("eval", "{run}", "--tasks", REVERSE, "--include", "{missing}", names="--include"),
    case("eval", "{run}", names="--tasks"),
    case("eval", "{empty}", "--tasks", REVERSE, names="MODEL_OR_RUN"),
    case("eval", HUB_NAME, "--tasks", REVERSE, names="MODEL_OR_RUN"),
    case("serve", "{missing}", names="MODEL_OR_RUN"),
    case("serve", HUB_NAME, names="MODEL_OR_RUN"),
    case("serve", "{run}", names="chat template"),  # the quickstart continues text: no template to render messages
    case("serve", "{run}", "--port", "70000", names="--port"),
    case("serve", "{run}", "--temperature", "-1", names="--temperature"),
    case("serve", "{run}", "--max-new-tokens", "0", names="--max-new-tokens"),
    case("push", "{missing}", "me/model", names="RUN"),
    case("push", "{file}", "me/model", names="RUN"),
    case("push", "{run}", "not a repo id!", names="REPO_ID"),
    case("push", "{run}", "me/model", names="--token"),
    case("push", "{run}", "me/model", "--adapter", names="adapter"),
    case("push", "{run}", names="REPO_ID"),
    case("convert", "{missing}.yaml", names="{missing}.yaml"),
    case("convert", "{empty}", names="{empty}"),
    case("convert", "{tmp}/bad.yaml", names="{tmp}/bad.yaml"),
    case("convert", "{tmp}/list.yaml", names="{tmp}/list.yaml"),
    case("convert", QUICKSTART, names=QUICKSTART),
    case("config", names="show,schema,keys"),
    case("config", "bogus", names="bogus"),
    case("config", "show", "{missing}.yaml", names="{missing}.yaml"),
    case("config", "show", "{empty}", names="{empty}"),
    case("config", "show", QUICKSTART, "optim.betas=[1", names="optim.betas"),
    case("config", "show", QUICKSTART, "trainer.seed=abc", names="trainer.seed"),
    case("config", "show", QUICKSTART, "~nosuch.key", names="nosuch"),
    case("config", "keys", "nosuch", names="nosuch"),
    case("config", "keys", "--method", "x", names="--method"),
    case("", "bogus-verb", names="bogus-verb"),
    case("", names="verb"),
]


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory) -> Path:
    """The quickstart's model after 3 steps: a run folder with hf/ and its step3/ checkpoint."""
    return train_example(
        "quickstart.yaml",
        tmp_path_factory.mktemp("bad-input") / "run",
        "trainer.max_duration=3steps",
        'data.train.sources=[{path: "{stdlib}/json/*.py"}]',
        "data.global_batch_size=4",
        "data.micro_batch_size=4",
        "callbacks.evaluator.max_batches=1",
        "callbacks.sample.enabled=false",
    )


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, str]:
    """Paths that are not what a verb expects: an empty folder, a file, a folder of other files, a missing path,
    and config and task files that are broken."""
    tmp = tmp_path_factory.mktemp("bad-input-places")
    (tmp / "empty").mkdir()
    (tmp / "a-file").write_text("hello\n")
    (tmp / "junk").mkdir()
    (tmp / "junk" / "notes.txt").write_text("x\n")
    (tmp / "junk" / "blob.bin").write_bytes(b"\0\1")
    (tmp / "bad.yaml").write_text("method: [sft\n  x: :\n")
    (tmp / "list.yaml").write_text("- a\n- b\n")
    (tmp / "no_task.yaml").write_text("foo: 1\n")
    missing_data = Path(GSM8K).read_text().replace("task: gsm8k_local", "task: gsm8k_missing_data")
    (tmp / "missing_data.yaml").write_text(missing_data.replace("../shared/data/gsm8k", str(tmp / "nowhere")))
    return {
        "tmp": str(tmp),
        "empty": str(tmp / "empty"),
        "file": str(tmp / "a-file"),
        "junk": str(tmp / "junk"),
        "missing": str(tmp / "missing"),
    }


@pytest.fixture(autouse=True)
def no_hub(monkeypatch):
    """No network and no saved Hub login, here and in the subprocesses."""
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: None)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.delenv("HF_TOKEN", raising=False)


def run_honing(argv: list[str]) -> int:
    """``honing ARGV`` in this process; its exit status (argparse's mistakes exit through SystemExit)."""
    try:
        return main(argv)
    except SystemExit as exit:
        return exit.code


def the_error_line(stderr: str) -> str:
    """The one error line of ``stderr``; fails when there is a traceback, more than one error line, or anything but
    log lines before it."""
    assert "Traceback (most recent call last)" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert lines, "no error line on stderr"
    errors = [line for line in lines if ": error: " in line]
    assert errors == [lines[-1]], stderr  # exactly one, and last
    assert all(line.startswith(("INFO ", "WARNING ")) for line in lines[:-1]), stderr  # only log lines before it
    return lines[-1]


def test_every_verb_has_bad_input_cases():
    assert {verb.name for verb in VERBS} <= {case.verb for case in CASES}


@pytest.mark.parametrize("bad", CASES, ids=[f"{c.verb or 'honing'}-{' '.join(c.args)[-60:]}" for c in CASES])
def test_bad_input_is_one_line_naming_the_argument_and_exit_2(bad, folders, request, capsys):
    if bad.needs:
        pytest.importorskip(bad.needs)
    places = dict(folders)
    if any("{run}" in arg or "{ckpt}" in arg for arg in bad.args):
        run = request.getfixturevalue("trained_run")
        places.update(run=str(run), ckpt=str(run / "step3"))
        capsys.readouterr()  # what training the run printed
    argv = ([bad.verb] if bad.verb else []) + [arg.format(**places) for arg in bad.args]
    code = run_honing(argv)
    line = the_error_line(capsys.readouterr().err)
    assert code == 2
    assert bad.names.format(**places) in line
    assert line.startswith("honing")


# Overrides as users mistype them: real keys and sections, list indices, removals, YAML fragments, and noise.
KEYS = st.sampled_from(
    ["trainer.seed", "trainer.max_duration", "optim.lr", "optim.betas", "optim.name", "data.seq_len", "model.config",
     "data.train.sources[0].path", "data.train.sources.5", "callbacks.checkpointer", "scheduler", "nosuch.key"]
)  # fmt: skip
VALUES = st.one_of(
    st.sampled_from(["", "null", "[", "]", "{a: 1}", "[1, 2", "-1", "1e999", "abc", "3steps", "~", ": :", "'"]),
    st.text(max_size=12),
)
OVERRIDES = st.one_of(
    st.builds(lambda key, value: f"{key}={value}", KEYS, VALUES),
    st.builds(lambda key: f"~{key}", KEYS),
    st.text(max_size=20).filter(lambda text: not text.startswith("-")),  # a flag is the flag fuzz's job
)


@FUZZ
@given(overrides=st.lists(OVERRIDES, min_size=1, max_size=3))
def test_random_overrides_to_config_show_load_or_are_one_line(overrides):
    with pytest.MonkeyPatch.context() as patch:
        err = []
        patch.setattr(sys, "stderr", _Collect(err))
        patch.setattr(sys, "stdout", _Collect([]))
        code = run_honing(["config", "show", QUICKSTART, *overrides])
    event(f"exit status {code}")
    if code == 0:
        return
    assert code == 2
    line = the_error_line("".join(err))
    sections = [one_line(override.lstrip("~").split("=")[0].split(".")[0]) for override in overrides]
    assert "override" in line or any(section in line for section in sections), line  # as printed: escaped


FLAGS = st.one_of(
    st.sampled_from(["--nproc", "--budget", "--nprocs", "-o", "--help-me", "--", "-1", "--budget=", "--nproc="]),
    st.builds(lambda n: str(n), st.integers(min_value=-3, max_value=9)),
    st.sampled_from(["20GiB", "0", "-5MiB", "lots", "1e3", "nan", "1.5GB", "optim.lr=1", "x"]),
)


@FUZZ
@given(flags=st.lists(FLAGS, min_size=1, max_size=4))
def test_random_flags_to_plan_plan_or_are_one_line(flags):
    with pytest.MonkeyPatch.context() as patch:
        err = []
        patch.setattr(sys, "stderr", _Collect(err))
        patch.setattr(sys, "stdout", _Collect([]))
        code = run_honing(["plan", QUICKSTART, *flags])
    event(f"exit status {code}")
    if code == 0:
        return
    assert code == 2
    line = the_error_line("".join(err))
    assert any(name in line for name in ("--nproc", "--budget", "unrecognized arguments", "override", "optim")), line


class _Collect:
    """A text stream that keeps what is written (hypothesis runs many examples in one test: no capsys)."""

    def __init__(self, parts: list[str]):
        self.parts = parts

    def write(self, text: str) -> int:
        self.parts.append(text)
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


@pytest.mark.parametrize(
    "args, names",
    [
        (["eval", "{run}", "--tasks", GSM8K], "--max-new-tokens"),  # issue 37's case: lm-eval's AssertionError before
        (["plan", QUICKSTART, *HUB_MODEL], "model.name_or_path"),  # issue 37's air-gapped plan: an OSError before
    ],
    ids=["eval-past-the-context", "plan-unreachable-hub"],
)
def test_the_installed_command_prints_one_line(args, names, trained_run):
    if args[0] == "eval":
        pytest.importorskip("lm_eval")
    argv = [arg.format(run=trained_run) for arg in args]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    result = subprocess.run([HONING, *argv], capture_output=True, text=True, timeout=120, env=env, cwd=REPO)
    assert result.returncode == 2, result.stderr
    assert names in the_error_line(result.stderr)
