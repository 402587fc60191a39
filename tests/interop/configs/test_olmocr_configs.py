"""olmOCR's configs of both generations translated as olmOCR configs: every one in ``../shared/foreign-configs/olmocr``
(skipped where absent) becomes a ``vl_sft`` config reading olmOCR's data; pipeline steps become ``data.pdf_pages``
options, an unknown step is refused in one line naming it; batch keys stay per device."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from honing.config import validate
from honing.interop.configs import detect_dialect, translate

FOREIGN = Path(__file__).resolve().parents[3].parent / "shared" / "foreign-configs" / "olmocr"
needs_folder = pytest.mark.skipif(not FOREIGN.is_dir(), reason=f"{FOREIGN} is absent (olmOCR's published configs)")

PIPELINE = [
    {"name": "FrontMatterParser", "front_matter_class": "PageResponse"},
    {"name": "FilterOutRotatedDocuments"},
    {"name": "ReformatLatexBoldItalic"},
    {"name": "DatasetTextRuleFilter"},
    {"name": "TableTransformation", "transformation": "annotate_dims"},
    {"name": "PDFRenderer", "target_longest_image_dim": 1288},
    {"name": "RotationAugmentation", "probability": 0.05},
    {"name": "NewYamlFinetuningPromptWithNoAnchoring"},
    {"name": "FrontMatterOutputFormat"},
    {"name": "InstructUserMessages", "prompt_first": True},
    {"name": "Tokenizer", "masking_index": -100, "end_of_message_token": "<|im_end|>"},
]
TRAINER = {
    "run_name": "run",
    "model": {"name": "m/vl", "torch_dtype": "bfloat16", "use_lora": True, "lora_rank": 4},
    "dataset": {
        "train": [{"name": "a", "root_dir": "/data/a", "pipeline": PIPELINE}],
        "eval": [{"name": "held-out", "root_dir": "/data/b", "pipeline": PIPELINE}],
    },
    "training": {"output_dir": "/out", "per_device_train_batch_size": 2, "gradient_accumulation_steps": 8},
}


def all_configs() -> list[Path]:
    return sorted(FOREIGN.rglob("*.yaml"))


@needs_folder
def test_every_olmocr_config_of_both_generations_translates_to_a_valid_vl_sft_config():
    counts = {"current": [0, 0], "trainconfig-2025": [0, 0]}
    refused = {}
    for path in all_configs():
        generation = path.relative_to(FOREIGN).parts[0]
        translation = translate(yaml.safe_load(path.read_text()))
        counts[generation][0] += 1
        if translation.refused:
            refused[path.name] = translation.refused
            continue
        config = validate(translation.config)
        formats = {source.format for source in config.data.train.sources}
        assert config.method == "vl_sft" and formats == {"olmocr_batch" if "2025" in generation else "olmocr_pages"}
        counts[generation][1] += 1
    print(f"olmOCR configs translated: {counts}")  # [configs, translated] per generation
    assert refused == {}
    assert counts == {"current": [11, 11], "trainconfig-2025": [7, 7]}


def test_the_current_generation_is_its_own_dialect_and_its_pipeline_becomes_options():
    assert detect_dialect(TRAINER) == "olmocr_trainer"
    translation = translate(TRAINER)
    assert translation.refused == []
    config = validate(translation.config)
    assert config.data.pdf_pages.model_dump(exclude_defaults=True) == {
        "prompt_first": True,
        "skip_rotated": True,
        "text_rules": True,
        "latex_bold_italic": True,
        "tables": "annotate_dims",
        "rotation_probability": 0.05,
    }
    assert config.data.pdf_longest_side == 1288 and config.data.pdf_pages.anchor_text_len is None
    assert [source.name for source in config.data.validation.sources] == ["held-out"]
    assert config.trainer.save_folder == "/out/run" and config.model.lora.rank == 4


def test_anchor_text_and_the_plain_prompt_come_from_their_steps():
    raw = copy.deepcopy(TRAINER)
    steps = [step for step in PIPELINE if step["name"] != "NewYamlFinetuningPromptWithNoAnchoring"]
    steps[5:5] = [
        {"name": "StaticLengthDocumentAnchoring", "target_anchor_text_len": 3000},
        {"name": "FinetuningPrompt"},
    ]
    for split in ("train", "eval"):
        raw["dataset"][split][0]["pipeline"] = steps
    options = validate(translate(raw).config).data.pdf_pages
    assert (options.anchor_text_len, options.prompt) == (3000, "plain")


def test_an_eval_set_with_its_own_steps_gets_its_own_pdf_pages_and_a_different_render_size_is_refused():
    # an eval pipeline without the training set's augmentation and filters, as olmOCR lets each data set have
    raw = copy.deepcopy(TRAINER)
    drop = ("RotationAugmentation", "DatasetTextRuleFilter", "ReformatLatexBoldItalic")
    raw["dataset"]["eval"][0]["pipeline"] = [step for step in PIPELINE if step["name"] not in drop]
    translation = translate(raw)
    assert translation.refused == []
    config = validate(translation.config)
    assert config.data.pdf_pages.rotation_probability == 0.05 and config.data.train.sources[0].pdf_pages is None
    own = config.data.validation.sources[0].pdf_pages
    assert own.rotation_probability == 0.0 and not own.text_rules and not own.latex_bold_italic and own.skip_rotated
    raw["dataset"]["eval"][0]["pipeline"] = [
        {**step, "target_longest_image_dim": 1024} if step["name"] == "PDFRenderer" else step for step in PIPELINE
    ]
    assert translate(raw).refused == [
        "dataset.eval[0].pipeline: its PDFRenderer size (1024) differs from dataset.train[0].pipeline's (1288): honing "
        "renders every source's pages at one data.pdf_longest_side"
    ]


def test_an_unknown_step_is_refused_in_one_line_naming_it():
    raw = copy.deepcopy(TRAINER)
    raw["dataset"]["train"][0]["pipeline"] = [*PIPELINE, {"name": "SharpenText", "probability": 0.5}]
    refused = translate(raw).refused
    assert "dataset.train[0].pipeline[11]: pipeline step 'SharpenText' is not available" in refused[0]
    assert len(refused) == 1


def test_per_device_batch_keys_stay_per_device():
    trainer = validate(translate(TRAINER).config).data
    assert (trainer.micro_batch_size, trainer.batch_size_per_rank) == (2, 16)
    assert [trainer.rows_per_step(ranks) for ranks in (1, 2, 4)] == [16, 32, 64]
    old = {
        "model": {"name_or_path": "m/vl"},
        "train_data": {"sources": [{"response_glob_path": "/r/*.json", "target_anchor_text_len": [6000]}]},
        "hparams": {"batch_size": 1, "gradient_accumulation_steps": 4, "max_steps": 10},
    }
    data = validate(translate(old).config).data
    assert (data.micro_batch_size, data.batch_size_per_rank, data.rows_per_step(2)) == (1, 4, 8)
    assert data.pdf_pages.anchor_text_len == 6000 and data.pdf_pages.prompt == "plain"


def test_older_trainconfigs_read_their_requests_and_limits():
    old = {
        "model": {"name_or_path": "m/vl"},
        "format": {"instruction_template": "Original:"},
        "train_data": {
            "sources": [
                {
                    "name": "batch",
                    "query_glob_path": "/q/*.jsonl",
                    "response_glob_path": "/r/*.json",
                    "backend": ["openai"],
                    "size": 100,
                }
            ]
        },
        "hparams": {"max_steps": 10},
    }
    translation = translate(old)
    assert translation.refused == []
    data = validate(translation.config).data
    assert data.pdf_pages.queries == ["/q/*.jsonl"] and data.train.sources[0].max_samples == 100
    old["train_data"]["sources"][0]["backend"] = ["birr"]
    assert translate(old).refused == [
        "train_data.sources[0].backend: ['birr']: honing reads OpenAI batch responses only ('openai')"
    ]
