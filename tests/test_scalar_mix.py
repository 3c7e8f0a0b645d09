"""`ScalarMix` with AllenNLP's parameter layout: what code written against AllenNLP reads and sets."""

import numpy as np
import pytest
import torch

from elmo import ScalarMix


def set_scalars(mix: ScalarMix, weights: list[float], gamma: float) -> None:
    """Through `scalar_parameters[k]` and `gamma`, as AllenNLP users do."""
    with torch.no_grad():
        for k, value in enumerate(weights):
            mix.scalar_parameters[k].fill_(value)
        mix.gamma.fill_(gamma)


def test_parameters_are_one_scalar_each_under_allennlps_names():
    mix = ScalarMix(3)
    assert len(mix.scalar_parameters) == 3
    assert all(p.shape == (1,) and p.requires_grad for p in mix.scalar_parameters)
    assert mix.gamma.shape == (1,)
    assert list(mix.state_dict()) == ["gamma", "scalar_parameters.0", "scalar_parameters.1", "scalar_parameters.2"]


def test_forward_is_gamma_times_softmax_weighted_sum():
    gen = torch.Generator().manual_seed(0)
    tensors = [torch.randn(2, 5, 4, generator=gen) for _ in range(3)]
    weights, gamma = [0.7, -0.4, 1.9], 0.6
    mix = ScalarMix(3)
    set_scalars(mix, weights, gamma)
    s = np.exp(weights) / np.exp(weights).sum()
    expected = gamma * sum(s[k] * tensors[k].numpy() for k in range(3))
    np.testing.assert_allclose(mix(tensors).detach().numpy(), expected, atol=1e-6, rtol=0)
    np.testing.assert_allclose(mix.weights().detach().numpy(), s, atol=1e-7)


def test_layer_norm_uses_the_masked_mean_and_std_of_each_tensor():
    gen = torch.Generator().manual_seed(1)
    tensors = [torch.randn(3, 6, 4, generator=gen) * (k + 1) + k for k in range(3)]
    mask = torch.ones(3, 6, dtype=torch.bool)
    mask[0, 4:] = False
    mask[2, 1:] = False
    weights, gamma = [-0.5, 0.2, 1.1], 1.3
    mix = ScalarMix(3, do_layer_norm=True)
    set_scalars(mix, weights, gamma)
    s = np.exp(weights) / np.exp(weights).sum()
    keep = mask.numpy()
    expected = 0.0
    for k, t in enumerate(tensors):
        x = t.numpy().astype(np.float64)
        expected = expected + s[k] * (x - x[keep].mean()) / x[keep].std()  # all positions normalised
    np.testing.assert_allclose(mix(tensors, mask).detach().numpy(), gamma * expected, atol=1e-5, rtol=0)


def test_wrong_number_of_tensors_or_initial_values_is_an_error():
    with pytest.raises(ValueError, match="expects 3 tensors, found 5"):
        ScalarMix(3)([torch.zeros(2, 2)] * 5)
    with pytest.raises(ValueError, match="initial_scalar_parameters has 2 values, expected 3"):
        ScalarMix(3, initial_scalar_parameters=[0.0, 0.0])
    with pytest.raises(ValueError, match="needs the mask"):
        ScalarMix(2, do_layer_norm=True)([torch.zeros(2, 2)] * 2)


def test_fixed_initial_values_are_kept_and_not_trained():
    mix = ScalarMix(3, initial_scalar_parameters=[1.0, 2.0, 3.0], trainable=False)
    assert [p.item() for p in mix.scalar_parameters] == [1.0, 2.0, 3.0]
    assert not any(p.requires_grad for p in mix.parameters())


def test_gradients_reach_every_scalar_and_gamma():
    mix = ScalarMix(3)
    mix([torch.full((2, 3), v) for v in (0.0, 1.0, 5.0)]).sum().backward()
    assert all(p.grad is not None and p.grad.abs().item() > 0 for p in mix.scalar_parameters)
    assert mix.gamma.grad is not None


def test_checkpoints_in_the_earlier_layout_still_load():
    """Task models saved before the switch hold one (N,) `scalar_parameters`."""
    old = {"scalar_parameters": torch.tensor([0.5, -1.0, 2.0]), "gamma": torch.tensor([1.5])}
    mix = ScalarMix(3)
    mix.load_state_dict(old, strict=True)
    assert [p.item() for p in mix.scalar_parameters] == [0.5, -1.0, 2.0] and mix.gamma.item() == 1.5
    outer = torch.nn.Sequential(ScalarMix(3))
    outer.load_state_dict({f"0.{k}": v for k, v in old.items()}, strict=True)
    assert torch.equal(outer[0].raw_weights().detach(), old["scalar_parameters"])
