"""options.json read into a BiLMConfig: its checks (bad files refused as ModelFileError, a ValueError), and the size
and FLOP arithmetic the benchmarks and the ELMoForManyLangs loader take from it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import MICRO

from elmo.errors import ModelFileError
from elmo.formats.manylangs import load_manylangs
from elmo.model.bilm import BiLM
from elmo.model.flops import forward_flops_per_token, train_flops_per_token
from elmo.model.options import BiLMConfig, config_int, read_options

MANYLANGS = Path(__file__).parent / "fixtures" / "manylangs"
SMALL = {"lstm": {"dim": 8, "projection_dim": 4, "n_layers": 1},
         "char_cnn": {"embedding": {"dim": 4}, "filters": [[1, 4], [2, 4]], "n_highway": 1}}


def test_flops_per_token_by_hand():
    config = BiLMConfig.from_options(SMALL)
    # char CNN: 50 windows of width 1 and 49 of width 2, 4 filters each over 4 dims; one highway on 8
    # features; projection 8 -> 4; one LSTM layer each way: 4 gates of 8 over [x; h] (4 + 4) and h 8 -> 4.
    macs = 50 * 1 * 4 * 4 + 49 * 2 * 4 * 4 + 2 * 8 * 8 + 8 * 4 + 2 * (2 * 4 * 4 * 8 + 8 * 4)
    assert config.forward_flops_per_token == forward_flops_per_token(SMALL) == 2.0 * macs
    softmax = 2 * 2 * 4 * (7 + 1)  # both directions' logits for the target and 7 negatives
    assert config.train_flops_per_token(7) == train_flops_per_token(SMALL, 7) == 3.0 * (2.0 * macs + softmax)


def test_parameter_count_is_the_model_plus_the_character_padding_row():
    config = BiLMConfig.from_options(MICRO)
    parameters = sum(p.numel() for p in BiLM(config).parameters())
    assert config.parameter_count() == config.token_parameters + config.lstm_parameters
    assert config.parameter_count() == parameters + config.char_dim  # files may hold the zero row of padding


@pytest.mark.parametrize("name", ["char_only", "word_char", "word_only", "three_layers"])
def test_parameter_count_of_a_manylangs_model_counts_its_lexicons(name):
    bilm = load_manylangs(MANYLANGS / name)
    assert bilm.config.parameter_count() == sum(t.numel() for t in bilm.state_dict().values())


def test_config_int_names_the_key_and_the_range():
    assert config_int({"dim": 5}, "dim", "lstm", "o.json") == 5
    with pytest.raises(ModelFileError, match=r"o.json: 'lstm.dim' must be a positive integer below 2\*\*31, found 0"):
        config_int({"dim": 0}, "dim", "lstm", "o.json")
    with pytest.raises(ModelFileError, match=r"'encoder.dim' must be an integer from 1 to 8, found 9"):
        config_int({"dim": 9}, "dim", "encoder", "c.json", maximum=8)
    with pytest.raises(ModelFileError, match=r"missing key 'lstm.dim'"):
        config_int({}, "dim", "lstm", "o.json")


# ---- bad options.json files (moved from test_weights.py and test_reliability.py) ----------------------------------

@pytest.mark.parametrize(
    "text, message",
    [
        ("{not json", r"o\.json: options file is not valid JSON \(line 1, column 2"),
        ("[1, 2]", r"o\.json: expected a JSON object, found list"),
        ('{"lstm": {}}', r"o\.json: expected an object 'char_cnn'"),
        ('{"lstm": {"projection_dim": 4}, "char_cnn": {"embedding": {"dim": 4}, "filters": [[1, 4]]}}',
         r"o\.json: missing key 'lstm\.dim'"),
        ('{"lstm": {"dim": 8}, "char_cnn": {"embedding": {"dim": 4}, "filters": [[1, "x"]]}}',
         r"'char_cnn\.filters' must be a non-empty list of \[width, count\] pairs"),
        ('{"lstm": {"dim": 8}, "char_cnn": {"embedding": {"dim": 4}, "filters": [[1, 4]], "activation": "gelu"}}',
         r"'char_cnn\.activation' must be 'relu' or 'tanh', found 'gelu'"),
        ('{"lstm": {"dim": 8}, "char_cnn": {"embedding": {"dim": 4}, "filters": [[1, 4]], "n_characters": 300}}',
         r"'char_cnn\.n_characters' must be 261 or 262, found 300"),
    ],
)
def test_bad_options_files(tmp_path, text, message):
    path = tmp_path / "o.json"
    path.write_text(text)
    with pytest.raises(ModelFileError, match=message):
        read_options(path)


def test_options_not_utf8_or_missing(tmp_path):
    path = tmp_path / "o.json"
    path.write_bytes(b"\x89HDF\r\n\x1a\n\xff\xfe")
    with pytest.raises(ModelFileError, match=r"o\.json: options file is not UTF-8 text"):
        read_options(path)
    with pytest.raises(ModelFileError, match=r"missing\.json: options file not found") as caught:
        read_options(tmp_path / "missing.json")
    assert isinstance(caught.value, FileNotFoundError)



@pytest.mark.parametrize("section,key,value", [("lstm", "dim", 10**400), ("lstm", "n_layers", 2**40),
                                               ("char_cnn", "n_highway", 10**400),
                                               ("char_cnn", "filters", [[1, 10**400]])])
def test_absurd_numbers_in_options_are_one_line(tmp_path, section, key, value):
    options, raw = tmp_path / "options.json", json.loads(json.dumps(MICRO))
    raw[section][key] = value
    options.write_text(json.dumps(raw))
    with pytest.raises(ModelFileError, match=f"options.json: 'char_cnn.{key}|lstm.{key}' must be") as e:
        read_options(options)
    assert len(str(e.value)) < 300


def test_parsing_options_never_looks_at_the_host_building_the_model_does():
    """options.py only parses (#54 item 2): an architecture too big for this machine reads fine and is refused,
    with the source and its sizes, where its weights would be allocated."""
    huge = {**SMALL, "lstm": {"dim": 2_000_000_000, "projection_dim": 4, "n_layers": 1}}
    config = BiLMConfig.from_options(huge, source="huge.json")
    assert config.dim == 2_000_000_000 and config.source == "huge.json"
    with pytest.raises(ModelFileError, match=r"^huge\.json: this architecture has .* more than this machine's"):
        BiLM(config)
