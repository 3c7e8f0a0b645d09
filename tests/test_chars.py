import pytest
import torch

from elmo import batch_to_ids
from elmo.model.chars import token_to_ids


def test_multibyte_token_matches_documented_ids():
    assert token_to_ids("a•")[:8] == [259, 98, 227, 129, 163, 260, 261, 261]
    assert len(token_to_ids("a•")) == 50


def test_sentence_markers_are_single_special_characters():
    assert token_to_ids("<S>")[:4] == [259, 257, 260, 261]
    assert token_to_ids("</S>")[:4] == [259, 258, 260, 261]
    # <UNK> has no special treatment: its five bytes
    assert token_to_ids("<UNK>")[:7] == [259, 61, 86, 79, 76, 63, 260]


def test_empty_token_and_truncation_at_48_bytes():
    assert token_to_ids("")[:3] == [259, 260, 261]
    long = "x" * 60
    ids = token_to_ids(long)
    assert ids[0] == 259 and ids[1:49] == [ord("x") + 1] * 48 and ids[49] == 260
    # the cut is byte-wise, so it may split a multi-byte character
    ids = token_to_ids("é" * 30)
    assert ids[1:49] == [0xC3 + 1, 0xA9 + 1] * 24 and ids[49] == 260


def test_unencodable_characters_are_dropped():
    assert token_to_ids("a\ud800b")[:4] == [259, 98, 99, 260]


def test_batch_layout_right_padding_with_zero_rows():
    ids = batch_to_ids([["The", "cat"], [], ["a"]])
    assert ids.shape == (3, 2, 50) and ids.dtype == torch.long
    assert (ids[1] == 0).all() and (ids[2, 1] == 0).all() and (ids[0] > 0).all()
    assert batch_to_ids([[], []]).shape == (2, 0, 50)


def test_training_codes_are_unshifted():
    assert token_to_ids("a", shift=0)[:3] == [258, 97, 259]


def test_bad_input_is_refused_with_a_clear_message():
    with pytest.raises(TypeError, match="list of tokenized sentences"):
        batch_to_ids(["not", "tokenized"])
    with pytest.raises(TypeError, match="must be a str"):
        batch_to_ids([["ok", 3]])
