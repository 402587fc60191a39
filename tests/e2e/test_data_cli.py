import subprocess
import sys

import yaml


def test_honing_data_writes_text_and_png_report(tmp_path):
    config = {
        "method": "sft",
        "trainer": {"save_folder": str(tmp_path / "run")},
        "data": {
            "train": {"sources": [{"path": "generated:sort_digits?samples=40&seed=0"}]},
            "validation": {"sources": [{"path": "generated:sort_digits?samples=8&seed=1"}]},
            "chat_template": "chatml",
            "seq_len": 64,
            "global_batch_size": 2,
            "cache_dir": str(tmp_path / "cache"),
        },
        "model": {
            "config": {
                "model_type": "llama",
                "hidden_size": 32,
                "num_hidden_layers": 1,
                "num_attention_heads": 2,
                "intermediate_size": 64,
            }
        },
    }
    path = tmp_path / "sft.yaml"
    path.write_text(yaml.safe_dump(config))
    result = subprocess.run(
        [sys.executable, "-m", "honing", "data", str(path)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    report = (tmp_path / "run" / "data_report.txt").read_text()
    assert report.startswith("train data: 40 examples,") and "validation data: 8 examples," in report
    assert "packing efficiency" in report and "rejected 0" in report
    png = (tmp_path / "run" / "data_report.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    import matplotlib.image

    height, width = matplotlib.image.imread(tmp_path / "run" / "data_report.png").shape[:2]
    assert (width, height) == (1200, 400)  # two splits side by side, 6 x 4 inches each at 100 dpi

    missing = subprocess.run(
        [sys.executable, "-m", "honing", "data", str(tmp_path / "nope.yaml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode == 2 and len(missing.stderr.strip().splitlines()) == 1
