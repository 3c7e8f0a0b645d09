"""The fast biLM against the plain reference, on odd architectures; state and boundary handling."""

import pytest
import torch
import torch.nn.functional as F
from conftest import make_config
from reference import bilm_sentence, char_encoder

from elmo import batch_to_ids, remove_sentence_boundaries
from elmo.model import bilm as bilm_module
from elmo.model import lstm_kernels
from elmo.model.bilm import BiLM

SENTENCES = [
    "The bank raised interest rates .".split(),
    [],
    "We sat on the bank of the river and watched the water for a long while".split(),
    ["a•", "ünïcödé", "x" * 70, "日本語"],
    ["one"],
]


ARCHITECTURES = {
    "default": {},
    "no_skip": {"lstm.use_skip_connections": False},
    "tanh_no_highway": {"char_cnn.activation": "tanh", "char_cnn.n_highway": 0},
    "no_projections": {"lstm.projection_dim": 24, "lstm.dim": 24, "char_cnn.filters": [[1, 10], [3, 14]]},
    "three_layers_no_clip": {"lstm.n_layers": 3, "lstm.cell_clip": None, "lstm.proj_clip": None},
}


@pytest.mark.parametrize("row_major_rows", [0, None, 10**6], ids=["transposed", "default", "row_major"])
@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_fast_path_equals_reference(arch, row_major_rows, monkeypatch):
    if row_major_rows is not None:  # force every step's products into one form (the default mixes both here)
        monkeypatch.setattr(lstm_kernels, "RECURRENT_ROW_MAJOR_MAX_ROWS", row_major_rows)
        monkeypatch.setattr(lstm_kernels, "PROJECTION_ROW_MAJOR_MAX_ROWS", row_major_rows)
    torch.manual_seed(0)
    bilm = BiLM(make_config(**ARCHITECTURES[arch])).double().eval()  # float64: same math, not same rounding
    with torch.no_grad():
        for p in bilm.parameters():  # exercise the clips and gates with large values
            p.mul_(3.0)
        out = bilm(batch_to_ids(SENTENCES))
        for row, sentence in enumerate(SENTENCES):
            expected = bilm_sentence(bilm, batch_to_ids([sentence])[0, : len(sentence)])
            n = len(sentence) + 2
            for k, layer in enumerate(out.layers):
                torch.testing.assert_close(layer[row, :n], expected[k], atol=1e-9, rtol=1e-9)
                assert (layer[row, n:] == 0).all()


def test_char_cnn_gemm_equals_conv1d():
    torch.manual_seed(1)
    bilm = BiLM(make_config()).double()
    ids = batch_to_ids([["a", "bb", "x" * 49, "", "<S>", "</S>", "ok"]])[0]
    with torch.no_grad():
        torch.testing.assert_close(bilm.char_encoder(ids, chunk=3), char_encoder(bilm.char_encoder, ids), atol=1e-12, rtol=1e-12)


def test_char_cnn_skips_padding_windows_exactly():
    """Windows wholly in a token's padding are computed once; maxima, where they are, and gradients agree
    with the full convolution over all 50 positions, also when the padding window wins."""
    torch.manual_seed(3)
    enc = BiLM(make_config()).double().char_encoder
    with torch.no_grad():
        enc.char_embed[260].fill_(2.0)  # the padding code (stored +1) scores high, so padding maxima occur
    ids = batch_to_ids([["a", "bb", "x" * 49, "", "<S>", "medium-length", "ok", "yes"]])[0]
    odd = ids[[2, 0, 1]].clone()
    odd[0, 5:] = 261  # a long token cut to its first five codes
    odd[1] = 261  # only padding
    odd[2] = 0  # an empty slot (id 0, the zero row)
    ids = torch.cat([ids, odd])
    x = F.embedding(ids, enc.embedding_table()).transpose(1, 2)
    full = [F.conv1d(x, w.permute(2, 1, 0), b).max(dim=2) for w, b in zip(enc.conv_weights, enc.conv_biases)]
    values, positions = enc.filter_maxima(ids)
    torch.testing.assert_close(values, torch.cat([f.values for f in full], dim=1), atol=1e-12, rtol=0)
    assert torch.equal(positions, torch.cat([f.indices for f in full], dim=1))
    extents = bilm_module.padding_start(ids)
    assert extents.tolist()[:3] == [3, 4, 50] and extents.tolist()[-3:] == [5, 0, 50]
    assert (positions >= extents.unsqueeze(1)).any() and (positions < extents.unsqueeze(1)).any()

    weights = torch.randn(ids.shape[0], enc.config.projection_dim, dtype=torch.float64)
    grads = []
    for encode in (lambda: enc(ids, chunk=3), lambda: char_encoder(enc, ids)):
        enc.zero_grad()
        (encode() * weights).sum().backward()
        grads.append([p.grad.clone() for p in enc.parameters()])
    for fast, plain in zip(*grads):
        torch.testing.assert_close(fast, plain, atol=1e-10, rtol=1e-10)
    only_padding = torch.full((2, 50), 261)
    torch.testing.assert_close(enc(only_padding), char_encoder(enc, only_padding), atol=1e-12, rtol=0)
    assert enc(ids[:0]).shape == (0, enc.config.projection_dim)


def test_stateless_vectors_do_not_depend_on_batch_neighbours_or_order():
    torch.manual_seed(2)
    bilm = BiLM(make_config()).eval()
    with torch.no_grad():
        together = bilm(batch_to_ids(SENTENCES))
        top, _ = remove_sentence_boundaries(together.layers[2], together.mask)
        for row, sentence in enumerate(SENTENCES):
            alone = bilm(batch_to_ids([sentence]))
            alone_top, _ = remove_sentence_boundaries(alone.layers[2], alone.mask)
            torch.testing.assert_close(top[row, : len(sentence)], alone_top[0], atol=1e-6, rtol=0)
        reordered = bilm(batch_to_ids(SENTENCES[::-1]))
        rtop, _ = remove_sentence_boundaries(reordered.layers[2], reordered.mask)
        torch.testing.assert_close(rtop.flip(0)[:, : top.shape[1]], top, atol=1e-6, rtol=0)
        again = bilm(batch_to_ids(SENTENCES))
        assert torch.equal(again.layers[2], together.layers[2])


def test_stateful_rows_carry_state_and_reset():
    torch.manual_seed(3)
    bilm = BiLM(make_config(), stateful=True).eval()
    ids = batch_to_ids(SENTENCES[:3])
    with torch.no_grad():
        first = bilm(ids).layers[2]
        second = bilm(ids).layers[2]
        assert not torch.allclose(first, second)  # the state carried over
        # a smaller batch leaves the higher rows' state alone; a larger one resumes them
        stored = [s.clone() for s in bilm._states.by_direction["forward"][0]]
        bilm(batch_to_ids(SENTENCES[:1]))
        assert torch.equal(bilm._states.by_direction["forward"][0][0][1:], stored[0][1:])
        bilm.reset_states()
        assert torch.equal(bilm(ids).layers[2], first)


def test_stateful_row_equals_its_own_stream():
    """Row r of a stateful batch depends only on row r's history (rows never interact)."""
    torch.manual_seed(4)
    batched = BiLM(make_config(), stateful=True).eval()
    alone = BiLM(make_config(), stateful=True).eval()
    alone.load_state_dict(batched.state_dict())
    batches = [SENTENCES[:3], SENTENCES[2:5], SENTENCES[1:4]]
    with torch.no_grad():
        outs = [batched(batch_to_ids(b)).layers[1] for b in batches]
        for i, b in enumerate(batches):
            got = alone(batch_to_ids([b[0]])).layers[1]
            n = got.shape[1]
            torch.testing.assert_close(outs[i][0, :n], got[0], atol=1e-6, rtol=0)


def test_all_empty_batch_gives_zero_length_outputs():
    bilm = BiLM(make_config()).eval()
    with torch.no_grad():
        out = bilm(batch_to_ids([[], []]))
    assert out.layers[0].shape == (2, 2, 16) and out.mask.sum().item() == 4
    top, mask = remove_sentence_boundaries(out.layers[2], out.mask)
    assert top.shape == (2, 0, 16) and mask.shape == (2, 0)


def test_wrong_input_shape_is_refused():
    bilm = BiLM(make_config())
    with pytest.raises(ValueError, match=r"expected character ids of shape \(batch, tokens, 50\)"):
        bilm(torch.zeros(2, 3, 49, dtype=torch.long))


def test_token_cache_is_exact_and_follows_weight_changes():
    torch.manual_seed(5)
    bilm = BiLM(make_config()).eval()
    ids = batch_to_ids(SENTENCES)
    with torch.no_grad():
        first = bilm(ids).layers[2]
        assert len(bilm.token_cache._rows) > 0
        cached = bilm(ids).layers[2]  # every token now comes from the cache
        torch.testing.assert_close(cached, first, atol=1e-6, rtol=0)
        bilm.char_encoder.proj_b.add_(1.0)  # a weight change empties the cache
        changed = bilm(ids).layers[0]
        fresh = BiLM(make_config()).eval()
        fresh.load_state_dict(bilm.state_dict())
        torch.testing.assert_close(changed, fresh(ids).layers[0], atol=1e-6, rtol=0)
    bilm.token_cache._rows.clear()
    bilm(ids).layers[0].sum().backward()  # training: no cache, gradients reach the encoder
    assert len(bilm.token_cache._rows) == 0 and bilm.char_encoder.char_embed.grad is not None


@pytest.mark.skipif(not lstm_kernels._onednn_available(), reason="this torch build has no oneDNN")
@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_onednn_inference_path_equals_reference(arch, monkeypatch):
    """float32 inference on CPU takes oneDNN's packed recurrent product; same values as the plain math."""
    packed = []
    real_packed = lstm_kernels._onednn_packed
    monkeypatch.setattr(lstm_kernels, "_onednn_packed", lambda *a: packed.append(real_packed(*a)) or packed[-1])
    monkeypatch.setattr(lstm_kernels, "ONEDNN_RECURRENCE", True)
    monkeypatch.setattr(lstm_kernels, "ONEDNN_MIN_WEIGHT", 0)  # these test weights are tiny
    torch.manual_seed(0)
    bilm = BiLM(make_config(**ARCHITECTURES[arch])).eval()
    with torch.no_grad():
        for p in bilm.parameters():
            p.mul_(3.0)
        out = bilm(batch_to_ids(SENTENCES))
        assert packed and all(p is not None for p in packed)
        monkeypatch.setattr(lstm_kernels, "ONEDNN_RECURRENCE", False)
        plain = bilm(batch_to_ids(SENTENCES))
        reference = bilm.double()
        for row, sentence in enumerate(SENTENCES):
            expected = bilm_sentence(reference, batch_to_ids([sentence])[0, : len(sentence)])
            n = len(sentence) + 2
            for k, layer in enumerate(out.layers):
                torch.testing.assert_close(layer[row, :n].double(), expected[k], atol=1e-5, rtol=1e-5)
                torch.testing.assert_close(layer[row, :n], plain.layers[k][row, :n], atol=1e-5, rtol=1e-5)
                assert (layer[row, n:] == 0).all()


def test_training_never_takes_the_inference_only_product():
    bilm = BiLM(make_config()).train()
    ids = batch_to_ids(SENTENCES)
    x = bilm.char_encoder(ids.view(-1, ids.shape[-1])).view(ids.shape[0], ids.shape[1], -1)
    layer = bilm.forward_lstm.layers[0]
    assert lstm_kernels._onednn_packed(layer.W_0[8:], 5, x, layer.zero_state(5, x), list(layer.parameters())) is None


def test_onednn_product_only_for_steps_and_weights_that_gain(monkeypatch):
    bilm = BiLM(make_config()).eval()
    layer = bilm.forward_lstm.layers[0]
    x = torch.zeros(5, 4, 8)
    with torch.no_grad():
        assert lstm_kernels._onednn_packed(layer.W_0[8:], 5, x, layer.zero_state(5, x), []) is None  # 8 x 96: too small
        monkeypatch.setattr(lstm_kernels, "ONEDNN_MIN_WEIGHT", 0)
        rows = lstm_kernels.RECURRENT_ROW_MAJOR_MAX_ROWS  # every step of such a call runs row-major: packing would be wasted
        assert lstm_kernels._onednn_packed(layer.W_0[8:], rows, x, layer.zero_state(rows, x), []) is None


def test_a_trainable_projection_keeps_the_recurrence_on_autograd(monkeypatch):
    """oneDNN's product has no autograd: with only W_P_0 trainable, its gradient still flows through time."""
    monkeypatch.setattr(lstm_kernels, "ONEDNN_MIN_WEIGHT", 0)
    layer = BiLM(make_config()).forward_lstm.layers[0]
    layer.W_0.requires_grad_(False)
    layer.B.requires_grad_(False)
    x = torch.randn(5, 4, 8)
    assert lstm_kernels._onednn_packed(layer.W_0[8:], 5, x, layer.zero_state(5, x), list(layer.parameters())) is None
