"""TRL's ``dataset_kwargs.skip_prepare_dataset`` (rows already prepared; honing builds its own rows either way): a
note, the same one, under ``training.trainer_kwargs`` and under a data set's own ``dataset_kwargs``, where users
copy it; the config is unchanged."""

from __future__ import annotations

from tests.interop.configs.test_oumi_options import noted, translated


def test_skip_prepare_dataset_is_the_same_note_on_both_paths():
    base = translated()
    under_trainer = translated(**{"training.trainer_kwargs": {"dataset_kwargs": {"skip_prepare_dataset": True}}})
    under_dataset = translated(**{"data.train.datasets.0.dataset_kwargs": {"skip_prepare_dataset": True}})
    assert under_trainer.config == base.config and under_dataset.config == base.config
    trainer_note = noted(under_trainer, "training.trainer_kwargs.dataset_kwargs.skip_prepare_dataset")
    dataset_note = noted(under_dataset, "data.train.datasets[0].dataset_kwargs.skip_prepare_dataset")
    assert trainer_note.partition(": ")[2] == dataset_note.partition(": ")[2]
    assert dataset_note.partition(": ")[2].startswith("not needed: ")
