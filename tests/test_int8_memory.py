"""int8 holds int8 (issue #62 item 2): a model loaded for int8 inference keeps only the weights that stay
float32 beside its int8 copies, is read one part at a time, and gives the same vectors as the int8 copy of
the float32 model, bit for bit."""

import numpy as np
import pytest
import torch

import elmo.model.int8
from elmo import Embedder, load_bilm, save_bilm
from elmo.errors import ModelFileError
from elmo.model.int8 import held_bytes, quantize_bilm, weight_bytes
from elmo.models import BUNDLED_DIR


@pytest.fixture(autouse=True)
def _needs_fbgemm():
    if "fbgemm" not in torch.backends.quantized.supported_engines:
        pytest.skip("int8 needs torch's fbgemm kernels, absent from this torch build")


def _files(allennlp_dir, name):
    d = BUNDLED_DIR / "default" if name == "bundled" else allennlp_dir.parent / name
    weights = d / "lm_weights.hdf5" if (d / "lm_weights.hdf5").is_file() else d / "weights.hdf5"
    return d / "options.json", weights


@pytest.mark.parametrize("name", ["allennlp-elmo", "bilm-tf-model", "bundled"])
def test_int8_only_model_gives_the_int8_vectors_bit_for_bit(name, allennlp_dir, fixture_sentences, one_thread):
    options, weights = _files(allennlp_dir, name)
    kept = Embedder.from_files(options, weights)  # float32 model, then its int8 copy beside it
    quantize_bilm(kept.bilm)
    lean = Embedder.from_files(options, weights, int8=True)
    sentences = [s.split() for batch in fixture_sentences for s in batch]
    for a, b in zip(kept.embed_sentences(sentences), lean.embed_sentences(sentences)):
        np.testing.assert_array_equal(a, b)
    assert lean.bilm.float32_released and not getattr(kept.bilm, "float32_released", False)
    assert weight_bytes(lean.bilm) == weight_bytes(kept.bilm)


def test_int8_only_model_holds_about_a_third_of_the_float32_bytes(allennlp_dir):
    options, weights = _files(allennlp_dir, "bundled")
    fp32 = load_bilm(options, weights)
    lean = load_bilm(options, weights, int8=True)
    # int8 weights and scales, plus what stays float32 (biases, the char embedding and convolutions)
    assert held_bytes(lean) < 0.35 * held_bytes(fp32)


def test_steps_in_blocks_give_the_numbers_of_all_steps_at_once(allennlp_dir, fixture_sentences, monkeypatch, one_thread):
    options, weights = _files(allennlp_dir, "allennlp-elmo")
    embedder = Embedder.from_files(options, weights, int8=True)
    sentences = [s.split() for batch in fixture_sentences for s in batch]
    monkeypatch.setattr(elmo.model.int8._Int8Steps, "ROWS_PER_BLOCK", 1_000_000)
    whole = embedder.embed_sentences(sentences)
    monkeypatch.setattr(elmo.model.int8._Int8Steps, "ROWS_PER_BLOCK", 5)  # one step a block where a step has 5+ rows
    for a, b in zip(whole, embedder.embed_sentences(sentences)):
        np.testing.assert_array_equal(a, b)


def test_an_int8_only_model_refuses_to_be_saved(allennlp_dir, tmp_path):
    options, weights = _files(allennlp_dir, "allennlp-elmo")
    lean = load_bilm(options, weights, int8=True)
    with pytest.raises(ModelFileError, match="int8 weights only"):
        save_bilm(lean, tmp_path / "options.json", tmp_path / "weights.hdf5")
    assert not (tmp_path / "weights.hdf5").exists()
    quantize_bilm(lean)  # converting again is a no-op, not a rebuild from released weights
    assert lean.float32_released


def test_other_formats_release_after_loading(tmp_path, one_thread):
    """A format without a part-by-part reader (here a bilm passed through Model.load_int8's default)
    still ends holding int8 only."""
    from elmo.models import Model

    class Loaded(Model):
        name = "in-memory"

        def load(self, stateful=False):
            return load_bilm(*_files(None, "bundled"))

    bilm = Loaded().load_int8()
    assert bilm.float32_released
    assert held_bytes(bilm) < 0.35 * held_bytes(load_bilm(*_files(None, "bundled")))


def test_columns_are_quantized_as_torch_quantizes_them():
    """quantize_columns rounds exactly as torch.quantize_per_channel (which it replaces for speed)."""
    torch.manual_seed(3)
    for rows, cols in ((512, 2048), (1000, 77), (3, 5)):
        w = torch.randn(rows, cols) * torch.rand(1, cols) * 4
        w[0, 0] = 0.0
        scale = torch.maximum(w.amax(0), w.amin(0).neg()).div_(127).clamp_(min=torch.finfo(torch.float32).tiny)
        reference = torch.quantize_per_channel(w, scale.double(), torch.zeros(cols, dtype=torch.long), 1, torch.qint8)
        assert torch.equal(elmo.model.int8.quantize_columns(w, scale, rows_per_block=64), reference.int_repr())
