"""``honing plan`` of a GRPO run whose groups span ranks (``grpo.completions_per_rank``) sizes the step the run takes
(``honing.plan.rollout_batch.shared_groups``, the arithmetic the recipe uses), not whole groups per rank, and
refuses a world size the run refuses at launch with the run's own line."""

import pytest
import yaml

from honing.config import validate
from honing.errors import ConfigError
from honing.parallel_dims import ParallelDims
from honing.plan.from_config import plan_inputs
from honing.plan.rollout_batch import shared_groups
from tests.recipes.test_grpo_groups_span_ranks import in_completions


def spanning(tmp_path):
    """The tiny GRPO run: groups of 4, 2 completions per rank (a group over 2 ranks), 1 per forward."""
    raw = in_completions(tmp_path, completions_per_rank=2, micro_batch_completions=1)
    path = tmp_path / "span.yaml"
    path.write_text(yaml.safe_dump(raw))
    return validate(raw), str(path)


def test_the_plan_of_groups_spanning_ranks_sizes_the_runs_step(tmp_path, capsys):
    from honing.cli import main

    config, path = spanning(tmp_path)
    shared = shared_groups(config, config.grpo, ParallelDims(world_size=2))
    assert (shared.prompts, shared.completions_per_rank) == (1, 2)  # 2 completions x 2 ranks = one group of 4
    plan, _ = plan_inputs(config, nproc=2, vocab_size=256)
    assert plan.generation_rows == shared.completions_per_rank  # not data.global_batch_size's prompts x 4
    assert plan.tokens == 1 * config.data.seq_len  # one completion a forward (grpo.micro_batch_completions)
    assert main(["plan", path, "--nproc", "2", "--budget", "4GiB"]) == 0
    out = capsys.readouterr().out
    assert (
        f"rollouts: {shared.prompts} of the step's {shared.prompts} prompt(s) on each rank, "
        f"{shared.completions_per_rank} completions sampled at once per rank, 1 per forward and backward"
    ) in out
    assert "completion(s) of at most 64 tokens (grpo.micro_batch_completions)" in out  # counted in completions


def test_a_world_size_the_run_refuses_is_refused_by_the_plan_in_the_runs_line(tmp_path, capsys):
    from honing.cli import main

    config, path = spanning(tmp_path)
    with pytest.raises(ConfigError) as launch:  # 2 completions x 3 ranks = 6: not whole groups of 4
        shared_groups(config, config.grpo, ParallelDims(world_size=3))
    assert main(["plan", path, "--nproc", "3"]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and error[0].endswith(str(launch.value))
