import json

import pytest

from honing.recipes.sft import SFTRecipe
from tests.recipes.test_sft import sft_config

pytestmark = pytest.mark.slow


def test_lora_run_to_s3_uploads_every_output_and_copies_to_save_path(tmp_path, s3):
    copies = tmp_path / "copies"
    config = sft_config(
        tmp_path,
        trainer={"save_folder": s3.url},
        storage={"work_folder": str(tmp_path / "work"), "retry_initial_seconds": 0.1},
        model={"lora": {"rank": 4, "alpha": 8, "modules_to_save": ["embed_tokens", "lm_head"]}},
        callbacks={
            "upload": {"save_path": str(copies)},
            "generation_eval": {"enabled": True, "num_prompts": 2, "max_new_tokens": 2},
        },
    )
    SFTRecipe(config).run()
    remote = s3.keys()
    for key in [
        "config.yaml",
        "metrics.jsonl",
        "generation_eval.jsonl",
        "step4/.complete",
        "hf/config.json",
        "hf/model.safetensors",
        "adapter/adapter_config.json",
        "best/config.json",
    ]:
        assert key in remote, key
    assert not any(key.startswith("s3:") for key in remote)
    assert not (tmp_path / "s3:").exists()  # nothing written to a local folder named like the URL
    lines = s3.server.client.get_object(Bucket="honing-tests", Key=f"{s3.prefix}/metrics.jsonl")["Body"].read()
    steps = [json.loads(line)["step"] for line in lines.decode().splitlines()]
    assert steps[-1] == 4 and 1 in steps
    assert (copies / "step4" / ".complete").exists() and (copies / "hf" / "config.json").exists()
