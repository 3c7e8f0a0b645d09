"""`Elmo` and `ScalarMix` semantics (AllenNLP's); the `Embedder` is tested in test_embedder.py."""

import pytest
import torch

from elmo import Elmo, ScalarMix, batch_to_ids, remove_sentence_boundaries

SENTENCES = [["The", "bank", "raised", "rates", "."], ["Hi"], [], ["We", "sat", "by", "the", "river", "bank"]]


def set_mix(mix: ScalarMix, weights: list[float], gamma: float) -> None:
    """Set a mix's pre-softmax weights and gamma (AllenNLP's layout: one (1,) Parameter per layer)."""
    with torch.no_grad():
        for w, value in zip(mix.scalar_parameters, weights, strict=True):
            w.fill_(value)
        mix.gamma.fill_(gamma)


@pytest.fixture
def elmo_files(allennlp_dir):
    return allennlp_dir / "options.json", allennlp_dir / "lm_weights.hdf5"


def test_two_representations_equal_hand_weighted_sums(elmo_files):
    elmo = Elmo(*elmo_files, num_output_representations=2, dropout=0.0)
    set_mix(elmo.scalar_mixes[0], [0.3, -1.0, 2.0], 1.7)
    set_mix(elmo.scalar_mixes[1], [-2.0, 1.0, 0.0], 0.4)
    ids = batch_to_ids(SENTENCES)
    out = elmo(ids)
    with torch.no_grad():
        raw = elmo.bilm(ids)
        layers = [remove_sentence_boundaries(t, raw.mask)[0] for t in raw.layers]
    for mix, rep in zip(elmo.scalar_mixes, out["elmo_representations"]):
        s = torch.softmax(torch.cat([w.detach() for w in mix.scalar_parameters]), 0)
        expected = mix.gamma.detach() * (s[0] * layers[0] + s[1] * layers[1] + s[2] * layers[2])
        torch.testing.assert_close(rep.detach(), expected, atol=1e-6, rtol=1e-6)
        assert rep.shape == (4, 6, 32)
    assert out["mask"].tolist() == [[True] * 5 + [False], [True] + [False] * 5, [False] * 6, [True] * 6]
    assert elmo.get_output_dim() == 32


@pytest.mark.parametrize("requires_grad", [False, True])
def test_gradients_reach_mix_and_bilm_only_when_asked(elmo_files, requires_grad):
    elmo = Elmo(*elmo_files, num_output_representations=1, dropout=0.0, requires_grad=requires_grad)
    elmo(batch_to_ids(SENTENCES))["elmo_representations"][0].sum().backward()
    mix = elmo.scalar_mixes[0]
    assert all(w.grad is not None for w in mix.scalar_parameters) and mix.gamma.grad is not None
    assert sum(w.grad.abs().sum() for w in mix.scalar_parameters) > 0
    bilm_grads = [p.grad for p in elmo.bilm.parameters()]
    if requires_grad:
        assert all(g is not None for g in bilm_grads) and sum(g.abs().sum() for g in bilm_grads) > 0
    else:
        assert all(g is None for g in bilm_grads) and not any(p.requires_grad for p in elmo.bilm.parameters())


def test_fixed_scalar_mix_parameters_select_a_layer_and_are_not_trained(elmo_files):
    elmo = Elmo(*elmo_files, 1, dropout=0.0, scalar_mix_parameters=[-9e10, 1.0, -9e10])
    ids = batch_to_ids(SENTENCES)
    rep = elmo(ids)["elmo_representations"][0]
    raw = elmo.bilm(ids)
    torch.testing.assert_close(rep, remove_sentence_boundaries(raw.layers[1], raw.mask)[0])
    assert not any(p.requires_grad for p in elmo.scalar_mixes[0].parameters())


def test_layer_norm_uses_unmasked_statistics_including_markers(elmo_files):
    elmo = Elmo(*elmo_files, 1, dropout=0.0, do_layer_norm=True, keep_sentence_boundaries=True)
    ids = batch_to_ids(SENTENCES)
    out = elmo(ids)
    raw = elmo.bilm(ids)
    m = raw.mask.unsqueeze(-1).float()
    expected = 0
    for t in raw.layers:
        n = m.sum() * t.shape[-1]
        mean = (t * m).sum() / n
        var = (((t * m) - mean) * m).pow(2).sum() / n
        expected = expected + (t - mean) / torch.sqrt(var + 1e-13) / 3
    torch.testing.assert_close(out["elmo_representations"][0], expected, atol=1e-5, rtol=1e-5)
    assert torch.equal(out["mask"], raw.mask)


def test_four_dimensional_input_is_flattened_and_restored(elmo_files):
    elmo = Elmo(*elmo_files, 1, dropout=0.0)
    ids = batch_to_ids(SENTENCES)
    out4 = elmo(ids.view(2, 2, *ids.shape[1:]))
    out3 = elmo(ids)
    assert out4["elmo_representations"][0].shape == (2, 2, 6, 32) and out4["mask"].shape == (2, 2, 6)
    torch.testing.assert_close(out4["elmo_representations"][0].reshape(4, 6, 32), out3["elmo_representations"][0])


def test_dropout_is_active_in_training_mode_only(elmo_files):
    elmo = Elmo(*elmo_files, 1)  # default dropout 0.5, as AllenNLP
    ids = batch_to_ids(SENTENCES)
    a, b = elmo(ids)["elmo_representations"][0], elmo(ids)["elmo_representations"][0]
    assert not torch.equal(a, b)
    elmo.eval()
    assert torch.equal(elmo(ids)["elmo_representations"][0], elmo(ids)["elmo_representations"][0])


def test_scalar_mix_rejects_wrong_sizes():
    with pytest.raises(ValueError, match="initial_scalar_parameters has 2 values, expected 3"):
        ScalarMix(3, initial_scalar_parameters=[0.0, 1.0])
    with pytest.raises(ValueError, match="expects 3 tensors, found 2"):
        ScalarMix(3)([torch.zeros(1), torch.zeros(1)])
