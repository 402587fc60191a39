"""The rows of an on-policy step: each row's prompt (before its last assistant turn), left-padded for the sampler,
and rows rebuilt from prompts and sampled completions with labels on the completion only; the step's coin."""

import torch

from honing.losses import IGNORE_INDEX as X
from honing.methods.distill import DATASET, STUDENT, TEACHER, DistillTrainModule, sampling_seed
from honing.methods.distill_batches import completion_starts, left_padded_prompts, rows_with_completions

PAD = 0


def padded_batch():
    # row 0: prompt 5 6, answer 7 8; row 1: two turns (3 | 4 | 5 | 9 9), the last turn's answer 9 9; row 2: no answer
    input_ids = torch.tensor([[5, 6, 7, 8, PAD, PAD], [3, 4, 5, 9, 9, PAD], [1, 2, PAD, PAD, PAD, PAD]])
    labels = torch.tensor([[X, X, 7, 8, X, X], [X, 4, X, 9, 9, X], [X, X, X, X, X, X]])
    attention_mask = (input_ids != PAD).long()
    return {"input_ids": input_ids, "labels": labels, "attention_mask": attention_mask}


def test_a_rows_prompt_ends_where_its_last_assistant_turn_starts():
    batch = padded_batch()
    assert completion_starts(batch["labels"], batch["attention_mask"]).tolist() == [2, 3, 2]
    prompt_ids, prompt_mask = left_padded_prompts(batch, PAD)
    assert prompt_ids.tolist() == [[PAD, 5, 6], [3, 4, 5], [PAD, 1, 2]]
    assert prompt_mask.tolist() == [[0, 1, 1], [1, 1, 1], [0, 1, 1]]


def test_rows_with_completions_are_right_padded_with_labels_on_the_completion_only():
    prompt_ids, prompt_mask = left_padded_prompts(padded_batch(), PAD)
    completion_ids = torch.tensor([[11, 12, 13], [14, PAD, PAD], [15, 16, PAD]])
    completion_mask = torch.tensor([[1, 1, 1], [1, 0, 0], [1, 1, 0]])
    rows = rows_with_completions(prompt_ids, prompt_mask, completion_ids, completion_mask, PAD)
    assert rows["input_ids"].tolist() == [[5, 6, 11, 12, 13], [3, 4, 5, 14, PAD], [1, 2, 15, 16, PAD]]
    assert rows["labels"].tolist() == [[X, X, 11, 12, 13], [X, X, X, 14, X], [X, X, 15, 16, X]]
    assert rows["attention_mask"].tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 1, 0], [1, 1, 1, 1, 0]]
    assert rows["num_real_tokens"].tolist() == [5, 4, 4]


def coin(lmbda, seq_kd=False, seed=0):
    module = DistillTrainModule.__new__(DistillTrainModule)  # the coin reads only these three settings
    module.lmbda, module.seq_kd, module.seed = lmbda, seq_kd, seed
    return [module.completion_source(step) for step in range(1, 201)]


def test_the_steps_coin_follows_lmbda_and_repeats_for_a_seed():
    assert set(coin(0.0)) == {DATASET} and set(coin(1.0)) == {STUDENT}
    assert set(coin(0.0, seq_kd=True)) == {TEACHER}
    quarter = coin(0.25)
    assert quarter == coin(0.25) and quarter != coin(0.25, seed=1)
    assert 30 <= quarter.count(STUDENT) <= 70  # about 50 of 200
    assert sampling_seed(0, 3, 0, 1) == sampling_seed(0, 3, 0, 1) != sampling_seed(0, 3, 1, 1)
