"""int8 inference (`elmo.model.int8`): close to float32, batch-independent, refused where it cannot be honest.

Bounds: per layer, the cosine of each token's int8 vector to its float32 vector is >= 0.999 on
average and >= 0.995 at its worst, on both fixtures and the bundled model (measured when this was
written: means 0.9995-0.99999, minima 0.9983-0.99998).
"""

import h5py
import numpy as np
import pytest
import torch

import elmo.model.int8
from elmo import Elmo, Embedder, batch_to_ids, load_bilm
from elmo.cli import main as cli_main
from elmo.errors import InputError
from elmo.model.int8 import Int8Linear, Int8Unavailable, quantize_bilm, token_cosines, weight_bytes

MEAN_COSINE, MIN_COSINE = 0.999, 0.995


def layer_cosines(fp32: list[np.ndarray], int8: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Per layer, the mean and minimum over tokens of cos(int8 vector, float32 vector)."""
    cos = np.concatenate([token_cosines(a, b) for a, b in zip(fp32, int8)], axis=1)
    return cos.mean(axis=1), cos.min(axis=1)


def fixture_bilm(allennlp_dir, name):
    d = allennlp_dir.parent / name
    return load_bilm(d / "options.json", d / "lm_weights.hdf5")


@pytest.fixture(scope="module")
def sentences(fixture_sentences):
    return [s.split() for lst in fixture_sentences for s in lst]


@pytest.mark.parametrize("name", ["allennlp-elmo", "bilm-tf-model", "bundled"])
def test_int8_vectors_are_close_to_float32(name, allennlp_dir, sentences, one_thread):
    if name == "bundled":
        fp32, int8 = Embedder.from_model("default"), Embedder.from_model("default", int8=True)
    else:
        fp32, int8 = Embedder(fixture_bilm(allennlp_dir, name)), Embedder(fixture_bilm(allennlp_dir, name), int8=True)
    mean, worst = layer_cosines(list(fp32.embed_sentences(sentences)), list(int8.embed_sentences(sentences)))
    assert (mean >= MEAN_COSINE).all() and (worst >= MIN_COSINE).all(), (mean, worst)
    assert not np.array_equal(mean, np.ones_like(mean))  # int8 really ran: not float32 under another name


def test_int8_is_batch_independent(sentences, one_thread):
    """A sentence's vectors are the same bits alone and in any batch: every row is quantized by itself."""
    embedder = Embedder.from_model("default", int8=True)
    batched = list(embedder.embed_sentences(sentences, batch_size=16))
    for i in (0, 7, 19, 29):
        embedder.bilm.token_cache.clear()  # the char CNN recomputed in a batch of one sentence's tokens
        assert np.array_equal(embedder.embed_sentence(sentences[i]), batched[i])
    shuffled = list(embedder.embed_sentences(sentences[::-1], batch_size=5))[::-1]
    assert all(np.array_equal(a, b) for a, b in zip(shuffled, batched))


def test_int8_linear_is_exact_integer_arithmetic(one_thread):
    gen = torch.Generator().manual_seed(1)
    weight, bias = torch.randn(40, 24, generator=gen), torch.randn(24, generator=gen)
    x = torch.randn(9, 40, generator=gen) * torch.logspace(-3, 3, 9).unsqueeze(1)  # rows of very different sizes
    got = Int8Linear(weight, bias)(x)
    w_scale = weight.abs().amax(0) / 127
    w_q = torch.round(weight / w_scale)
    x_scale = x.abs().amax(1, keepdim=True) / 63
    expected = (torch.round(x / x_scale).double() @ w_q.double()) * w_scale.double() * x_scale.double() + bias.double()
    torch.testing.assert_close(got.double(), expected, rtol=1e-6, atol=1e-6)
    assert torch.equal(Int8Linear(weight, bias)(x[3:4])[0], got[3])


def test_float32_weights_and_results_are_unchanged(allennlp_dir, fixture_sentences, one_thread):
    """Converting keeps the float32 parameters as they were (nothing to write back); the fixture's
    stateful top layer from the float32 path still matches the original at 1e-6 after a conversion
    of another copy in the same process."""
    bilm = fixture_bilm(allennlp_dir, "allennlp-elmo")
    before = {k: v.clone() for k, v in bilm.state_dict().items()}
    quantize_bilm(bilm)
    assert all(torch.equal(before[k], v) for k, v in bilm.state_dict().items())
    fp32 = load_bilm(allennlp_dir / "options.json", allennlp_dir / "lm_weights.hdf5", stateful=True)
    batch = [lst[0].split() for lst in fixture_sentences]
    with torch.no_grad():
        top = fp32(batch_to_ids(batch)).layers[2][0, 1 : 1 + len(batch[0])].numpy()
    with h5py.File(allennlp_dir / "lm_embeddings_0.hdf5", "r") as f:
        expected = f["0"][...]
    np.testing.assert_allclose(np.stack([top[:, :16], top[:, 16:]]), expected, atol=1e-6, rtol=1e-5)


def test_weights_take_a_quarter(allennlp_dir):
    bilm = fixture_bilm(allennlp_dir, "allennlp-elmo")
    quantize_bilm(bilm)
    fp32, int8 = weight_bytes(bilm)
    assert int8 < 0.3 * fp32  # int8 weights plus a float32 scale per channel and the biases


def test_elmo_int8_keeps_a_float32_trainable_mix(allennlp_dir, fixture_sentences, one_thread):
    kwargs = dict(options_file=allennlp_dir / "options.json", weight_file=allennlp_dir / "lm_weights.hdf5",
                  num_output_representations=1, dropout=0.0)
    fp32, int8 = Elmo(**kwargs), Elmo(**kwargs, int8=True)
    ids = batch_to_ids([s.split() for s in fixture_sentences[0]])
    a, b = fp32(ids)["elmo_representations"][0], int8(ids)["elmo_representations"][0]
    cos = torch.nn.functional.cosine_similarity(a, b, dim=-1)[fp32(ids)["mask"]]
    assert cos.mean() >= MEAN_COSINE and cos.min() >= MIN_COSINE
    b.sum().backward()  # the mix trains; the biLM is frozen
    assert all(p.grad is not None for p in int8.scalar_mixes[0].parameters())
    assert int8.state_dict().keys() == fp32.state_dict().keys()


def test_refusals(allennlp_dir, tmp_path, capsys):
    with pytest.raises(InputError, match="CPU only"):
        Embedder(fixture_bilm(allennlp_dir, "allennlp-elmo"), device="cuda", int8=True)
    with pytest.raises(InputError, match="bf16"):
        Embedder(fixture_bilm(allennlp_dir, "allennlp-elmo"), bf16=True, int8=True)
    with pytest.raises(InputError, match="frozen"):
        Elmo(allennlp_dir / "options.json", allennlp_dir / "lm_weights.hdf5", 1, requires_grad=True, int8=True)
    bilm = fixture_bilm(allennlp_dir, "allennlp-elmo")
    quantize_bilm(bilm)  # a converted biLM whose weights are then trained: refused, not silently stale
    with pytest.raises(Int8Unavailable, match="inference"):
        bilm(batch_to_ids([["a", "b"]]))
    corpus = tmp_path / "in.txt"
    corpus.write_text("a b\n")
    for flags, message in ((["--device", "cuda"], "CPU only"), (["--bf16"], "bf16")):
        assert cli_main(["embed", str(corpus), str(tmp_path / "out.hdf5"), "--int8", *flags]) == 2
        assert message in capsys.readouterr().err


def test_no_int8_kernel_is_an_error_not_float32(monkeypatch, allennlp_dir):
    monkeypatch.setattr(elmo.model.int8, "_supported_engines", lambda: ["qnnpack"])
    with pytest.raises(Int8Unavailable, match="fbgemm"):
        Embedder(fixture_bilm(allennlp_dir, "allennlp-elmo"), int8=True)


def test_cli_int8_writes_vectors_close_to_float32(tmp_path, sentences, one_thread):
    corpus = tmp_path / "in.txt"
    corpus.write_text("\n".join(" ".join(s) for s in sentences[:8]) + "\n", encoding="utf-8")
    assert cli_main(["embed", str(corpus), str(tmp_path / "32.hdf5")]) == 0
    assert cli_main(["embed", str(corpus), str(tmp_path / "8.hdf5"), "--int8"]) == 0
    with h5py.File(tmp_path / "32.hdf5", "r") as f32, h5py.File(tmp_path / "8.hdf5", "r") as f8:
        mean, worst = layer_cosines([f32[str(i)][...] for i in range(8)], [f8[str(i)][...] for i in range(8)])
    assert (mean >= MEAN_COSINE).all() and (worst >= MIN_COSINE).all()
    assert not np.array_equal(mean, np.ones_like(mean))


def test_task_features_from_int8_have_their_own_cache(allennlp_dir, tmp_path, sentences, one_thread):
    from elmo.model.int8 import is_quantized
    from elmo.tasks import ElmoSpec, build_cache

    files = dict(options=str(allennlp_dir / "options.json"), weights=str(allennlp_dir / "lm_weights.hdf5"))
    fp32, int8 = ElmoSpec.resolve(**files), ElmoSpec.resolve(**files, int8=True)
    assert fp32.fingerprint() != int8.fingerprint() and is_quantized(int8.embedder().bilm)
    a, b = (build_cache(spec, sentences[:4], tmp_path, "ner-train") for spec in (fp32, int8))
    assert a.path != b.path
    mean, worst = layer_cosines([a[i] for i in range(4)], [b[i] for i in range(4)])
    assert (mean >= MEAN_COSINE).all() and (worst >= MIN_COSINE).all() and (mean < 1).any()


def test_int8_cells_tanh_is_torchs_within_a_float32_rounding(one_thread):
    """int8 steps take numpy's tanh (faster than torch's here); it differs from torch's by at most a
    few units in the last place, on strided gate views as on whole tensors."""
    from elmo.model.int8 import _Int8Steps

    gates = torch.randn(33, 4 * 50, generator=torch.Generator().manual_seed(3)) * 4
    for x in (gates.chunk(4, dim=1)[1], gates):
        got, expected = _Int8Steps.tanh(x), torch.tanh(x)
        assert got.dtype == torch.float32 and got.shape == x.shape
        torch.testing.assert_close(got, expected, rtol=3e-7, atol=3e-7)
        assert torch.equal(_Int8Steps.tanh(x[5:6]), got[5:6])  # elementwise: a row's result is its own
