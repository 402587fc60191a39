"""The dict form of VeOmni's ``build_data_collate_info``: per batch key ``(pack_dim, sp_slice, sp_pad_value,
sp_pad_scale)``, applied to each micro-batch the method's collator cuts, as VeOmni's packing and sequence-parallel
collators define them: rows concatenated along ``pack_dim`` (-1: end to end in one row, without their padding),
each key padded with its own value to a multiple of its scale, the keys the dict does not name stacked as before."""

from __future__ import annotations

import pytest
import torch
import yaml

from honing.config import ConfigError, validate
from honing.data.collate import pad_collate
from honing.interop.veomni import BaseTrainer, DataCollateInfo
from honing.interop.veomni_collate import CollateInfoCollator, collate_infos, collator_from_info
from honing.losses import IGNORE_INDEX
from honing.recipes.pretrain import PretrainRecipe
from tests.distributed.runs import CONFIG

ROWS = [{"input_ids": torch.tensor([1, 2, 3]), "labels": torch.tensor([1, 2, 3])}, {"input_ids": torch.tensor([4, 5])}]
ROWS[1]["labels"] = torch.tensor([4, 5])


def collator(info):
    return collator_from_info(info, pad_collate(0), owner="T.build_data_collate_info", sp_size=1)


def test_rows_are_packed_padded_and_stacked_as_veomni_defines_it():
    packed = collator(
        {
            "input_ids": (-1, True, 0, 1),
            "labels": (-1, True, IGNORE_INDEX, 4),  # padded to a multiple of 4 with ignored labels
            "attention_mask": DataCollateInfo(-1, False, 1, 1),
        }
    )
    batch = packed(ROWS)  # the method's batch: right-padded rows, as before
    assert batch["input_ids"].tolist() == [[1, 2, 3], [4, 5, 0]]
    (micro,) = packed.split(batch, 2)
    # end to end in one row, each row's padding dropped; the second row's first label is ignored
    assert micro["input_ids"].tolist() == [[1, 2, 3, 4, 5]]
    assert micro["labels"].tolist() == [[1, 2, 3, IGNORE_INDEX, 5, IGNORE_INDEX, IGNORE_INDEX, IGNORE_INDEX]]
    assert micro["attention_mask"].tolist() == [[1, 1, 1, 1, 1]]
    assert packed.num_tokens(batch) == 5 and packed.model_input_keys == pad_collate(0).model_input_keys

    # along dim 0: one flat sequence (no unsqueeze); input_ids padded with 7 to an even length, the others not padded
    concatenated = collator(
        {"input_ids": (0, False, 7, 2), "labels": (0, False, None, None), "attention_mask": (0, False, None, None)}
    )
    (micro,) = concatenated.split(concatenated(ROWS), 2)
    assert micro["input_ids"].tolist() == [1, 2, 3, 4, 5, 7]
    assert micro["labels"].tolist() == [1, 2, 3, IGNORE_INDEX, 5]

    stacked = collator({"pixel_values": (0, False, 0, 2)})  # keys it does not name keep the method's layout
    pixels = {"pixel_values": torch.ones(3, 4), "input_ids": torch.zeros(2, 3, dtype=torch.long)}
    micro = stacked.collate(pixels)
    assert micro["input_ids"].shape == (2, 3) and micro["pixel_values"].shape == (4, 4)  # 3 patches padded to 4
    assert micro["pixel_values"][3].tolist() == [0, 0, 0, 0]


def test_bad_collate_infos_are_refused_in_one_line():
    with pytest.raises(ConfigError, match=r"T.build_data_collate_info: key 'labels': sp_pad_value and sp_pad_scale"):
        collate_infos({"labels": (-1, False, -100, None)}, "T.build_data_collate_info")
    with pytest.raises(ConfigError, match=r"key 'input_ids': expected \(pack_dim, sp_slice, sp_pad_value"):
        collate_infos({"input_ids": "packed"}, "T.build_data_collate_info")
    half = collator({"input_ids": (-1, False, 0, 1)})
    with pytest.raises(ConfigError, match=r"input_ids laid end to end \(pack_dim -1\) but the batch's other per-token"):
        half.split(half(ROWS), 2)
    image = collator({"pixel_values": (1, False, None, None)})
    with pytest.raises(ConfigError, match=r"key 'pixel_values': pack_dim 1 on a field honing already concatenates"):
        image.collate({"pixel_values": torch.ones(3, 4), "input_ids": torch.zeros(2, 3, dtype=torch.long)})
    with pytest.raises(ConfigError, match=r"a dict of per-key collate settings with parallel.cp=2"):
        collator_from_info({}, pad_collate(0), owner="T", sp_size=2)


class PackedRows(BaseTrainer, PretrainRecipe):
    """The document's step: a dict of per-key settings, the rows of each micro-batch packed into one."""

    def build_data_collate_info(self):
        return {
            "input_ids": (-1, False, 0, 1),
            "labels": (-1, False, IGNORE_INDEX, 1),
            "position_ids": (-1, False, 0, 1),
        }

    def preforward(self, micro_batch):
        self.shapes.append(tuple(micro_batch["input_ids"].shape))
        return super().preforward(micro_batch)


def test_a_recipe_returning_the_dict_trains_on_its_micro_batches(tmp_path):
    raw = yaml.safe_load(CONFIG.format(save_folder=tmp_path / "run", steps=2, save_interval=100, custom="[]"))
    raw["callbacks"]["sample"] = {"enabled": False}
    recipe = PackedRows(validate(raw))
    recipe.shapes = []
    trainer = recipe.train()
    assert isinstance(recipe.collator, CollateInfoCollator) and trainer.global_step == 2
    assert recipe.shapes == [(1, 2 * 32)] * 8  # micro-batches of 2 rows of 32 tokens, each laid end to end
