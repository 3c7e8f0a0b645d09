"""options.json + weights.hdf5 both ways, and clear errors for broken or mismatched files."""

import json
import shutil

import h5py
import numpy as np
import pytest
import torch

from elmo import ModelFileError, batch_to_ids, load_bilm, save_bilm
from elmo.formats.weights import dataset_map

SENTENCES = [["The", "cat", "sat", "."], ["Hello", "world"], []]


def outputs(bilm):
    with torch.no_grad():
        return [t.clone() for t in bilm.eval()(batch_to_ids(SENTENCES)).layers]


@pytest.mark.parametrize("fixture", ["allennlp-elmo", "bilm-tf-model"])
def test_load_save_load_is_bit_identical(tmp_path, allennlp_dir, fixture):
    d = allennlp_dir.parent / fixture
    first = load_bilm(d / "options.json", d / "lm_weights.hdf5")
    save_bilm(first, tmp_path / "options.json", tmp_path / "weights.hdf5")
    second = load_bilm(tmp_path / "options.json", tmp_path / "weights.hdf5")
    for a, b in zip(outputs(first), outputs(second)):
        assert torch.equal(a, b)
    with h5py.File(d / "lm_weights.hdf5", "r") as orig, h5py.File(tmp_path / "weights.hdf5", "r") as saved:
        names = []
        orig.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
        for name in names:  # same names, shapes, dtype and values as the original file
            assert saved[name].dtype == np.float32 and saved[name].shape == orig[name].shape
            assert np.array_equal(saved[name][...], orig[name][...]), name
            assert len(saved[name].attrs) == 0
    assert json.loads((tmp_path / "options.json").read_text()) == json.loads((d / "options.json").read_text())


def test_fresh_model_from_options_saves_and_loads(tmp_path, allennlp_dir):
    torch.manual_seed(0)
    fresh = load_bilm(allennlp_dir / "options.json", None)
    save_bilm(fresh, tmp_path / "o.json", tmp_path / "w.hdf5")
    again = load_bilm(tmp_path / "o.json", tmp_path / "w.hdf5")
    for a, b in zip(outputs(fresh), outputs(again)):
        assert torch.equal(a, b)


def test_262_row_char_table_loads_and_equals_261(tmp_path, allennlp_dir):
    shutil.copy(allennlp_dir / "options.json", tmp_path / "options.json")
    with h5py.File(allennlp_dir / "lm_weights.hdf5", "r") as src, h5py.File(tmp_path / "w262.hdf5", "w") as dst:
        for name in dataset_map(load_bilm(allennlp_dir / "options.json", None)):
            data = src[name][...]
            if name == "char_embed":
                data = np.concatenate([np.zeros((1, data.shape[1]), np.float32), data])
            dst.create_dataset(name, data=data)
    a = load_bilm(allennlp_dir / "options.json", allennlp_dir / "lm_weights.hdf5")
    b = load_bilm(tmp_path / "options.json", tmp_path / "w262.hdf5")
    assert b.char_encoder.char_embed.shape[0] == 262
    for x, y in zip(outputs(a), outputs(b)):
        assert torch.equal(x, y)


def test_n_characters_261_in_options_is_accepted(tmp_path, allennlp_dir):
    options = json.loads((allennlp_dir / "options.json").read_text())
    options["char_cnn"]["n_characters"] = 261
    (tmp_path / "o.json").write_text(json.dumps(options))
    bilm = load_bilm(tmp_path / "o.json", allennlp_dir / "lm_weights.hdf5")
    assert outputs(bilm)[2].shape == (3, 6, 32)


# ---- bad input ---------------------------------------------------------------------------------

def copy_weights(src, dst, drop=None, replace=None):
    with h5py.File(src, "r") as s, h5py.File(dst, "w") as d:
        names = []
        s.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
        for name in names:
            if name == drop:
                continue
            d.create_dataset(name, data=(replace[1] if replace and name == replace[0] else s[name][...]))


def test_missing_dataset_names_file_and_dataset(tmp_path, allennlp_dir):
    bad = tmp_path / "w.hdf5"
    copy_weights(allennlp_dir / "lm_weights.hdf5", bad, drop="CNN_high_1/W_carry")
    with pytest.raises(ModelFileError, match=r"w\.hdf5: missing dataset 'CNN_high_1/W_carry' \(expected shape \(124, 124\)\)"):
        load_bilm(allennlp_dir / "options.json", bad)


def test_wrong_shape_names_expected_and_found(tmp_path, allennlp_dir):
    bad = tmp_path / "w.hdf5"
    name = "RNN_1/RNN/MultiRNNCell/Cell0/LSTMCell/W_P_0"
    copy_weights(allennlp_dir / "lm_weights.hdf5", bad, replace=(name, np.zeros((64, 15), np.float32)))
    with pytest.raises(ModelFileError, match=rf"'{name}' has shape \(64, 15\), expected \(64, 16\)"):
        load_bilm(allennlp_dir / "options.json", bad)


def test_options_that_disagree_with_weights(tmp_path, allennlp_dir):
    options = json.loads((allennlp_dir / "options.json").read_text())
    options["lstm"]["dim"] = 128
    (tmp_path / "o.json").write_text(json.dumps(options))
    with pytest.raises(ModelFileError, match=r"LSTMCell/W_0' has shape \(32, 256\), expected \(32, 512\) from the options"):
        load_bilm(tmp_path / "o.json", allennlp_dir / "lm_weights.hdf5")
    options = json.loads((allennlp_dir / "options.json").read_text())
    options["char_cnn"]["n_highway"] = 1
    (tmp_path / "o.json").write_text(json.dumps(options))
    with pytest.raises(ModelFileError, match=r"dataset 'CNN_high_1/W_carry' is not part of the model the options describe"):
        load_bilm(tmp_path / "o.json", allennlp_dir / "lm_weights.hdf5")


def test_bad_char_table_rows(tmp_path, allennlp_dir):
    bad = tmp_path / "w.hdf5"
    copy_weights(allennlp_dir / "lm_weights.hdf5", bad, replace=("char_embed", np.zeros((260, 4), np.float32)))
    with pytest.raises(ModelFileError, match=r"'char_embed' has 260 rows, expected 261 .* or 262"):
        load_bilm(allennlp_dir / "options.json", bad)


def test_not_hdf5_and_missing_and_directory(tmp_path, allennlp_dir):
    junk = tmp_path / "weights.hdf5"
    junk.write_text("this is not hdf5")
    with pytest.raises(ModelFileError, match=r"weights\.hdf5: not an HDF5 weight file"):
        load_bilm(allennlp_dir / "options.json", junk)
    with pytest.raises(ModelFileError, match=r"nope\.hdf5: weight file not found"):
        load_bilm(allennlp_dir / "options.json", tmp_path / "nope.hdf5")
    with pytest.raises(ModelFileError, match=r"is a directory, expected a weights\.hdf5 file"):
        load_bilm(allennlp_dir / "options.json", tmp_path)


def test_nan_weights_are_refused(tmp_path, allennlp_dir):
    bad = tmp_path / "w.hdf5"
    data = np.full((16,), np.nan, np.float32)
    copy_weights(allennlp_dir / "lm_weights.hdf5", bad, replace=("CNN_proj/b_proj", data))
    with pytest.raises(ModelFileError, match=r"'CNN_proj/b_proj' contains NaN"):
        load_bilm(allennlp_dir / "options.json", bad)


def test_save_bilm_creates_its_folder(allennlp_dir, tmp_path):
    """The README's `save_bilm(bilm, "copy/options.json", "copy/weights.hdf5")`, pasted as written."""
    bilm = load_bilm(allennlp_dir / "options.json", allennlp_dir / "lm_weights.hdf5")
    save_bilm(bilm, tmp_path / "copy" / "options.json", tmp_path / "copy" / "weights.hdf5")
    again = load_bilm(tmp_path / "copy" / "options.json", tmp_path / "copy" / "weights.hdf5")
    ids = batch_to_ids([["The", "bank"]])
    assert torch.equal(bilm(ids).layers[2], again(ids).layers[2])
