"""SIGTERM to one of 2 ranks just before an evaluation: every rank skips that evaluation together (they agree
before each batch, so none waits in a forward the other left), the run stops after one more step, saves it, and
exits 0, with no partial evaluation recorded."""

import json

import pytest

from tests.distributed.runs import CONFIG, honing_train, metrics

pytestmark = pytest.mark.slow

EVALUATOR = "  evaluator: {{enabled: false}}\n"
VALIDATING = "  evaluator: {{interval: 2}}\n"


def test_sigterm_on_one_rank_before_an_evaluation_stops_it_on_both(tmp_path):
    assert EVALUATOR in CONFIG
    config = CONFIG.replace(EVALUATOR, VALIDATING).replace(
        "  seq_len: 32\n", '  seq_len: 32\n  validation: {{sources: [{{path: "{{stdlib}}/csv.py"}}]}}\n'
    )
    save_folder = tmp_path / "run"
    term = {"import_path": "tests.faults.signals:TermBeforeEvaluation", "kwargs": {"rank": 1, "step": 4}}
    path = tmp_path / "run.yaml"
    path.write_text(config.format(save_folder=save_folder, steps=12, save_interval=100, custom=json.dumps([term])))

    result = honing_train(str(path), nproc=2, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    output = result.stderr + result.stdout
    assert "skipping the evaluation at step 4 (received SIGTERM)" in output  # rank 1's words
    assert "skipping the evaluation at step 4 (another rank received a signal)" in output  # rank 0's
    logged = metrics(save_folder)
    assert "eval/loss" in logged[2] and "eval/loss" not in logged[4]
    # cancel_check_interval 1: the request reaches rank 0 with the next step's exchange; that step is saved
    assert [p.name for p in save_folder.glob("step*")] == ["step5"]
    assert max(logged) == 5 and not any("eval/loss" in logged[step] for step in (5,))
