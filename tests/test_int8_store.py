"""The int8 store (`elmo.formats.int8_store`): an int8 load reads the weights quantized by an earlier load, the
same bits as quantizing again; a damaged, stale or foreign stored file is never used."""

import os
import shutil

import numpy as np
import pytest
import torch

import elmo.formats.int8_store
import elmo.formats.weights
from elmo import Embedder, load_bilm, save_bilm
from elmo.formats.int8_store import store_path
from elmo.model.int8 import weight_bytes
from elmo.models import BUNDLED_DIR


@pytest.fixture(autouse=True)
def _store_in_tmp(tmp_path, monkeypatch):
    if "fbgemm" not in torch.backends.quantized.supported_engines:
        pytest.skip("int8 needs torch's fbgemm kernels, absent from this torch build")
    monkeypatch.setenv("ELMO_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("ELMO_INT8_STORE", raising=False)


@pytest.fixture
def model(allennlp_dir, tmp_path):
    """A copy of the allennlp fixture's files, free to be rewritten."""
    d = tmp_path / "model"
    d.mkdir()
    shutil.copy(allennlp_dir / "options.json", d / "options.json")
    shutil.copy(allennlp_dir / "lm_weights.hdf5", d / "weights.hdf5")
    return d / "options.json", d / "weights.hdf5"


@pytest.fixture
def sentences(fixture_sentences):
    return [s.split() for batch in fixture_sentences for s in batch]


def _vectors(options, weights, sentences):
    return list(Embedder.from_files(options, weights, int8=True).embed_sentences(sentences))


def _quantized_at_load(options, weights, sentences, monkeypatch):
    monkeypatch.setenv("ELMO_INT8_STORE", "0")
    try:
        return _vectors(options, weights, sentences)
    finally:
        monkeypatch.delenv("ELMO_INT8_STORE")


def _no_quantizing(monkeypatch):
    """From here on an int8 load that reads the float32 file fails: it must come from the store."""
    def refuse(*args, **kwargs):
        raise AssertionError("quantized from the float32 file")
    monkeypatch.setattr(elmo.formats.weights, "_read_int8", refuse)


def _assert_same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("name", ["allennlp-elmo", "bundled"])
def test_store_round_trip_equals_quantizing_at_load(name, allennlp_dir, sentences, monkeypatch, one_thread):
    d = BUNDLED_DIR / "default" if name == "bundled" else allennlp_dir
    options, weights = d / "options.json", d / ("weights.hdf5" if name == "bundled" else "lm_weights.hdf5")
    expected = _quantized_at_load(options, weights, sentences, monkeypatch)
    assert not store_path(weights).exists()
    _assert_same(_vectors(options, weights, sentences), expected)  # quantizes, and stores
    assert store_path(weights).is_file()
    _no_quantizing(monkeypatch)
    stored = load_bilm(options, weights, int8=True)
    assert stored.float32_released
    assert weight_bytes(stored) == weight_bytes(load_bilm(options, weights, int8=True))
    _assert_same(_vectors(options, weights, sentences), expected)


def test_a_tampered_store_is_rebuilt_with_one_line(model, sentences, monkeypatch, capsys, one_thread):
    expected = _vectors(*model, sentences)
    path = store_path(model[1])
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01  # one bit of the int8 weights
    path.write_bytes(bytes(data))
    _assert_same(_vectors(*model, sentences), expected)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "damaged" in err[0] and "checksum" in err[0] and str(path) in err[0]
    _no_quantizing(monkeypatch)  # the store was written again, whole
    _assert_same(_vectors(*model, sentences), expected)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("damage", ["truncated", "header", "not a store"])
def test_a_damaged_store_is_never_used(damage, model, sentences, capsys, one_thread):
    expected = _vectors(*model, sentences)
    path = store_path(model[1])
    data = path.read_bytes()
    data = {"truncated": data[: len(data) - 100], "header": data[:20] + b"{" + data[21:],
            "not a store": b"PK\x03\x04" + data[4:]}[damage]
    path.write_bytes(data)
    _assert_same(_vectors(*model, sentences), expected)
    assert "damaged" in capsys.readouterr().err


def test_other_weights_under_the_same_path_make_the_store_stale(model, sentences, monkeypatch, capsys, one_thread):
    _vectors(*model, sentences)
    bilm = load_bilm(*model)
    with torch.no_grad():
        bilm.forward_lstm.layers[0].W_0.mul_(0.5)
    save_bilm(bilm, *model)
    expected = _quantized_at_load(*model, sentences, monkeypatch)
    _assert_same(_vectors(*model, sentences), expected)
    err = capsys.readouterr().err
    assert "stale" in err and "fingerprint" in err


def test_the_same_bytes_under_a_new_identity_keep_the_store(model, sentences, monkeypatch, capsys, one_thread):
    expected = _vectors(*model, sentences)
    weights = model[1]
    copy = weights.with_suffix(".copy")
    shutil.copy(weights, copy)
    os.replace(copy, weights)  # another inode and change time, the same bytes
    _no_quantizing(monkeypatch)
    _assert_same(_vectors(*model, sentences), expected)
    assert capsys.readouterr().err == ""
    header = store_path(weights).read_bytes()[16:4000]
    assert str(os.stat(weights).st_ino).encode() in header  # stored again with the new identity


def test_an_unwritable_cache_is_said_once_and_loads_still_work(model, sentences, tmp_path, monkeypatch, capsys,
                                                               one_thread):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setenv("ELMO_CACHE", str(blocker))
    monkeypatch.setattr(elmo.formats.int8_store, "_unwritable_said", False)
    expected = _quantized_at_load(*model, sentences, monkeypatch)
    _assert_same(_vectors(*model, sentences), expected)
    _assert_same(_vectors(*model, sentences), expected)
    assert capsys.readouterr().err.count("cannot store int8 weights") == 1


def test_the_store_can_be_turned_off(model, monkeypatch):
    monkeypatch.setenv("ELMO_INT8_STORE", "0")
    load_bilm(*model, int8=True)
    assert not store_path(model[1]).exists()


def test_stores_of_weights_that_are_gone_are_removed(model, allennlp_dir, tmp_path):
    load_bilm(*model, int8=True)
    gone = store_path(model[1])
    model[1].unlink()
    foreign = gone.parent / "not-ours.int8"
    foreign.write_bytes(b"something else")
    load_bilm(allennlp_dir / "options.json", allennlp_dir / "lm_weights.hdf5", int8=True)
    assert not gone.exists() and foreign.exists() and store_path(allennlp_dir / "lm_weights.hdf5").is_file()
