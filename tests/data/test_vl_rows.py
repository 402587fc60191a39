"""Labels of VL rows: the text's assistant labels carried onto the processor's expanded ids."""

import pytest

from honing.data.vision.processing import align_labels
from honing.errors import DataError
from honing.losses import IGNORE_INDEX as X

IMG = 99


def test_insertions_keep_labels_on_their_tokens():
    plain = [1, 2, IMG, 3, 4, 5]
    labels = [X, X, X, X, 4, 5]
    expanded = [0, 1, 2, IMG, IMG, IMG, IMG, 3, 4, 5]  # a BOS and three more image tokens
    assert align_labels(plain, labels, expanded) == [X, X, X, X, X, X, X, X, 4, 5]


def test_replaced_placeholder_is_aligned_by_sequence_matching():
    plain = [1, IMG, 3, 4, 5]
    labels = [X, X, X, 4, 5]
    expanded = [1, 70, 71, 71, 72, 3, 4, 5]  # the placeholder becomes start / patches / end tokens
    assert align_labels(plain, labels, expanded) == [X] * 6 + [4, 5]


def test_a_labelled_token_missing_from_the_expansion_is_refused():
    with pytest.raises(DataError, match="position 3"):
        align_labels([1, IMG, 3, 4], [X, X, X, 4], [1, IMG, IMG, 3, 8])
