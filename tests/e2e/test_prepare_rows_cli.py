"""``honing prepare CONFIG --out DIR`` for a fine-tuning method: the split's rows into a folder, a re-run reads it
as it is, and what cannot be prepared fails with one line and exit code 2."""

import yaml

from honing.cli import main
from tests.recipes.test_dpo import dpo_config


def test_prepare_dpo_rows_then_rerun_is_a_no_op(tmp_path, capsys):
    config = tmp_path / "dpo.yaml"
    config.write_text(yaml.safe_dump(dpo_config(tmp_path).model_dump(mode="json", exclude_unset=True)))
    out = tmp_path / "rows"
    assert main(["prepare", str(config), "--out", str(out), "--workers", "2"]) == 0
    assert capsys.readouterr().out.strip() == (
        f"{out}: prepared; 32 dpo rows of 1 source(s) (0 rejected), whole; train with "
        f"data.train.sources=[{{path: {out}}}]"
    )
    assert main(["prepare", str(config), "--out", str(out)]) == 0
    assert capsys.readouterr().out.startswith(f"{out}: up to date; 32 dpo rows")
    assert main(["prepare", str(config), "--out", str(tmp_path / "held_out"), "--split", "validation"]) == 0
    printed = capsys.readouterr().out
    assert "; 8 dpo rows" in printed and f"data.validation.sources=[{{path: {tmp_path / 'held_out'}}}]" in printed
    assert main(["prepare", str(config), "--out", "s3://bucket/rows"]) == 2
    assert capsys.readouterr().err.strip() == (
        "honing: error: --out 's3://bucket/rows': prepared rows are read memory-mapped; give a local folder"
    )
