"""Inference holds each padded batch once (issue #62): without autograd, `LstmLayer` writes every step's
output into one buffer, a skip connection adds in place, and `join_directions` gathers the backward half
straight into its place. These are copies of the same numbers, so the vectors must equal those of the
autograd path, whatever the architecture, the stateful mode or the input.

Equal to 1e-6, not bit for bit: a frozen char CNN runs on each distinct token once, so its products have other
row counts than the autograd path's, and MKL's AVX-512 kernels round such products differently (seen on the
bilm-tf fixture: 1.5e-8 in layer 0, 3.6e-7 in layer 2, on a 2-core AMD EPYC with AVX-512; bit for bit with AVX2)."""

import pytest
import torch
from conftest import make_config

from elmo import BiLM, load_bilm
from elmo.model.boundaries import join_directions, reverse_index


def _both_paths(bilm: BiLM, ids: torch.Tensor):
    with torch.no_grad():
        lean = bilm(ids)
    with torch.enable_grad():
        for p in bilm.parameters():
            p.requires_grad_(True)
        kept = bilm(ids)
        for p in bilm.parameters():
            p.requires_grad_(False)
    return lean, kept


def _assert_same(lean, kept):
    assert torch.equal(lean.mask, kept.mask)
    assert len(lean.layers) == len(kept.layers)
    for a, b in zip(lean.layers, kept.layers):
        assert a.dtype == b.dtype and a.shape == b.shape
        torch.testing.assert_close(a, b.detach(), rtol=0, atol=1e-6)


@pytest.mark.parametrize("overrides", [{}, {"lstm.use_skip_connections": False}, {"lstm.n_layers": 3},
                                       {"char_cnn.activation": "tanh"}],
                         ids=["skip", "no-skip", "three-layers", "tanh"])
def test_no_grad_layers_equal_the_autograd_layers_bit_for_bit(overrides):
    torch.manual_seed(0)
    bilm = BiLM(make_config(**overrides)).eval()
    # rows of different lengths, one empty, unsorted: padding, reversal and reordering all take part
    sentences = [["a", "longer", "sentence", "than", "the", "rest", "."], [], ["short", "one"], ["mid", "size", "row"]]
    lean, kept = _both_paths(bilm, bilm.batch_to_ids(sentences))
    _assert_same(lean, kept)


@pytest.mark.parametrize("name", ["allennlp-elmo", "bilm-tf-model"])
def test_no_grad_layers_equal_the_autograd_layers_on_the_fixtures(name, allennlp_dir, fixture_sentences):
    d = allennlp_dir.parent / name
    weights = d / "lm_weights.hdf5" if (d / "lm_weights.hdf5").is_file() else d / "weights.hdf5"
    bilm = load_bilm(d / "options.json", weights).eval()
    for batch in fixture_sentences:
        sentences = [s.split() for s in batch]
        _assert_same(*_both_paths(bilm, bilm.batch_to_ids(sentences)))


def test_stateful_no_grad_calls_equal_autograd_calls():
    torch.manual_seed(1)
    lean_bilm = BiLM(make_config(), stateful=True).eval()
    kept_bilm = BiLM(make_config(), stateful=True).eval()
    kept_bilm.load_state_dict(lean_bilm.state_dict())
    for sentences in ([["one", "two", "three"], ["four"]], [["five"], ["six", "seven", "eight", "nine"], ["ten"]]):
        ids = lean_bilm.batch_to_ids(sentences)
        with torch.no_grad():
            lean = lean_bilm(ids)
        for p in kept_bilm.parameters():
            p.requires_grad_(True)
        _assert_same(lean, kept_bilm(ids))


def test_join_directions_writes_the_gathered_half_in_place_of_a_cat():
    torch.manual_seed(2)
    f, b = torch.randn(3, 6, 4), torch.randn(3, 6, 4)
    rev = reverse_index(torch.tensor([6, 4, 1]), 6)
    expected = torch.cat([f, torch.gather(b, 1, rev.unsqueeze(-1).expand_as(b))], dim=-1)
    with torch.no_grad():
        assert torch.equal(join_directions(f, b, rev), expected)
    assert torch.equal(join_directions(f, b, rev), expected)  # the autograd form
    assert torch.equal(expected[1, :4, 4:], b[1, :4].flip(0)) and torch.equal(expected[1, 4:, 4:], b[1, 4:])
