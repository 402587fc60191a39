"""The first losses of every example config, from two trees side by side: a refactor must not change one bit.

Runs every config of ``configs/`` (and examples/tool_grpo.py's SFT stage, which grpo-tools starts from) for
``--steps`` steps with the working tree's honing and with a git revision's (checked out into a temporary worktree),
each in a fresh process with one torch thread and its own cache folder (so a changed row builder cannot hide behind
rows the other tree cached), and prints each config's ``train/loss`` values and whether they and the gradient norms
(``optim/grad_norm``) are equal bit for bit.

    python benchmarks/first_losses.py --before main~3            # the working tree against main~3
    python benchmarks/first_losses.py --before b498dde --only dpo,grpo

Configs that start from another run's export (LoRA and QLoRA from the quickstart's ``hf/``, GRPO, RLOO and the
distillation teacher from SFT's, the reward model from SimPO's, VL-GRPO from VL-SFT's, grpo-tools from the tool
example's SFT) get that run's export from the same tree after its own ``--steps`` steps. Exit code 1 when any loss
differs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from common import OFFLINE, machine_summary  # noqa: E402

#: config → (the key that names another run's export, that run) for the configs that start from one, in run order;
#: ``tool-sft`` is examples/tool_grpo.py's SFT stage (its data and starting policy), which grpo-tools starts from
EXAMPLES: dict[str, tuple[str, str] | None] = {
    "quickstart": None,
    "sft-full": None,
    "sft-lora": ("model.name_or_path", "quickstart"),
    "sft-qlora": ("model.name_or_path", "quickstart"),
    "dpo": None,
    "kto": None,
    "orpo": None,
    "simpo": None,
    "reward": ("model.name_or_path", "simpo"),
    "grpo": ("model.name_or_path", "sft-full"),
    "rloo": ("model.name_or_path", "sft-full"),
    "distill": ("distill.teacher_model_name_or_path", "sft-full"),
    "ppo": None,
    "online-dpo-letters": None,
    "vl-sft": None,
    "vl-grpo": ("model.name_or_path", "vl-sft"),
    "tool-sft": None,
    "grpo-tools": ("model.name_or_path", "tool-sft"),
}
#: what slows a run without touching its losses: evaluation, sampling, checkpoints between steps
QUIET = [
    "callbacks.console.enabled=false",
    "callbacks.sample.enabled=false",
    "callbacks.generation_eval.enabled=false",
    "callbacks.evaluator.enabled=false",
    "trainer.num_threads=1",
    "trainer.metrics_collect_interval=1",
]

#: what `honing train CONFIG OVERRIDES` runs, as both trees have it (their CLIs may differ in other verbs)
RUN = (
    "import sys; from honing.config import load_config; from honing.recipes import recipe_for; "
    "recipe_for(load_config(sys.argv[1], sys.argv[2:])).run()"
)
#: examples/tool_grpo.py's data and SFT stage in folder argv[1] for argv[2] steps (one thread, no sampling)
TOOL_SFT = (
    "import sys; from pathlib import Path; sys.path.insert(0, 'examples'); import tool_grpo as t; "
    "from honing.config import validate; from honing.recipes import recipe_for; "
    "f, n = Path(sys.argv[1]), int(sys.argv[2]); data = t.sft_conversations(f / 'data' / 'sft.jsonl', 32 * n, 0, 0.5); "
    "t.prompts(f / 'data' / 'prompts.jsonl', 8 * n, seed=1); t.prompts(f / 'data' / 'held_out.jsonl', 64, seed=2); "
    "raw = t.sft_config(f, data, n, 1); raw['trainer']['metrics_collect_interval'] = 1; "
    "recipe_for(validate(raw)).run()"
)
#: keys of QUIET an example's method refuses (pretraining has no generation eval, the RL methods no validation loss)
NOT_READ = {
    "quickstart": ("callbacks.generation_eval",),
    "reward": ("callbacks.sample", "callbacks.generation_eval"),
    "grpo": ("callbacks.evaluator",),
    "grpo-tools": ("callbacks.evaluator",),
    "vl-grpo": ("callbacks.evaluator",),
    "ppo": ("callbacks.evaluator",),
    "online-dpo-letters": ("callbacks.evaluator",),
    "rloo": ("callbacks.evaluator",),
}
#: the RL methods read held-out prompts only to sample and score them, which QUIET turns off: without it, none
EXTRA = {
    "grpo": ["data.validation=null"],
    "rloo": ["data.validation=null"],
    "vl-grpo": ["data.validation=null"],
    "ppo": ["data.validation=null"],
    "online-dpo-letters": ["data.validation=null"],
}


def run_tree(tree: str, names: list[str], steps: int, work: str) -> dict[str, dict[str, list[float]]]:
    """``train/loss`` then ``optim/grad_norm`` of each example's first ``steps`` steps with the honing of ``tree``."""
    env = {**os.environ, **OFFLINE, "PYTHONPATH": tree, "HONING_CACHE_DIR": os.path.join(work, "cache")}
    losses: dict[str, dict[str, list[float]]] = {}
    for name in names:
        folder = os.path.join(work, name)
        if name == "tool-sft":
            command = [sys.executable, "-c", TOOL_SFT, folder, str(steps)]
            losses[name] = train_losses(name, tree, command, env, folder)
            continue
        overrides = [f"trainer.save_folder={folder}", f"trainer.hard_stop={steps}steps", *QUIET]
        if EXAMPLES[name] is not None:
            key, source = EXAMPLES[name]
            overrides.append(f"{key}={os.path.join(work, source, 'hf')}")
        if name == "grpo-tools":  # the prompts the tool example wrote beside its SFT run
            prompts = os.path.join(work, "tool-sft", "data")
            overrides += [
                f"data.train.sources[0].path={os.path.join(prompts, 'prompts.jsonl')}",
                f"data.validation.sources[0].path={os.path.join(prompts, 'held_out.jsonl')}",
            ]
        for key in NOT_READ.get(name, ()):  # a key its method does not read is refused, not ignored
            overrides = [o for o in overrides if not o.startswith(key)]
        overrides += EXTRA.get(name, [])
        command = [sys.executable, "-c", RUN, os.path.join(tree, "configs", f"{name}.yaml"), *overrides]
        losses[name] = train_losses(name, tree, command, env, folder)
    return losses


def train_losses(name: str, tree: str, command: list[str], env: dict[str, str], folder: str) -> dict[str, list[float]]:
    """Run ``command`` in ``tree``; the ``train/loss`` then ``optim/grad_norm`` values its run wrote to ``folder``'s
    metrics."""
    done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-12:])
        raise SystemExit(f"{name} failed in {tree} (exit {done.returncode}):\n{tail}")
    with open(os.path.join(folder, "metrics.jsonl"), encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle]
    # the gradient norm beside the loss: a policy-gradient loss is often exactly 0 at the first steps (ratio 1, the
    # advantages' mean 0) while its gradient is not, so equal losses alone would prove little there
    return {key: [row[key] for row in rows if key in row] for key in ("train/loss", "optim/grad_norm")}


def with_dependencies(names: list[str]) -> list[str]:
    """``names`` and the examples whose exports they start from, in run order."""
    wanted = set(names) | {dependency[1] for name in names if (dependency := EXAMPLES[name])}
    return [name for name in EXAMPLES if name in wanted]


def main() -> int:
    """Run both trees, print the comparison, exit 1 on any difference."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True, help="the git revision to compare the working tree against")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--only", default="", help="comma-separated example names (default: every example)")
    parser.add_argument("--out", help="write both sides' losses to this JSON file")
    args = parser.parse_args()
    names = with_dependencies([n for n in args.only.split(",") if n] or list(EXAMPLES))
    root = tempfile.mkdtemp(prefix="honing-first-losses-")
    before_tree = os.path.join(root, "before-tree")
    subprocess.run(["git", "worktree", "add", "--detach", before_tree, args.before], cwd=REPO, check=True)
    try:
        before = run_tree(before_tree, names, args.steps, os.path.join(root, "before"))
        after = run_tree(REPO, names, args.steps, os.path.join(root, "after"))
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", before_tree], cwd=REPO, check=False)
        shutil.rmtree(root, ignore_errors=True)
    print(machine_summary())
    print(f"first {args.steps} train/loss and optim/grad_norm values, {args.before} vs the working tree")
    differ = 0
    for name in names:
        loss, norm = (
            (before[name]["train/loss"], after[name]["train/loss"]),
            (
                before[name]["optim/grad_norm"],
                after[name]["optim/grad_norm"],
            ),
        )
        same = before[name] == after[name] and len(loss[0]) == args.steps
        differ += not same
        worst = max((abs(a - b) for pair in (loss, norm) for a, b in zip(*pair)), default=float("nan"))
        verdict = (
            f"bit-identical ({len(loss[0])} losses, {len(norm[0])} gradient norms)"
            if same
            else f"DIFFER (max |diff| {worst:.3g}, steps {len(loss[0])}/{len(loss[1])})"
        )
        print(f"  {name:18s} {verdict}  loss first {loss[0][0]:.6f} last {loss[0][-1]:.6f}")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as handle:
            json.dump({"before": before, "after": after, "revision": args.before}, handle, indent=1)
    print(f"{len(names) - differ} of {len(names)} examples bit-identical")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
