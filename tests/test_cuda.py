"""The same code on a GPU: fixtures, embedder and a training step on CUDA against the CPU path.

Skipped where torch sees no CUDA device (CI has none); run on a GPU machine with
`python -m pytest tests/test_cuda.py`.
"""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest
import torch
from test_golden_outputs import top_layer_halves

from elmo import Embedder, batch_to_ids, load_bilm, remove_sentence_boundaries
from elmo.formats.lm_vocab import Vocab, write_vocab
from elmo.model.options import BiLMConfig
from elmo.training.batchers import StreamBatcher
from elmo.training.corpus import SentenceSource
from elmo.training.model import LanguageModel
from elmo.training.settings import TrainSettings
from elmo.training.trainer import train
from elmo.training.vocab import build_vocab, count_tokens

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

SENTENCES = [
    "The bank raised its interest rates .".split(),
    "They sat on the bank of the river and watched the boats .".split(),
    ["Hi"],
    "A much longer sentence , with punctuation ; numbers like 1,024 and words such as antidisestablishmentarianism ."
    .split(),
]


@pytest.fixture(autouse=True)
def _full_precision():
    """fp32 products in full precision (no TF32), as the CPU computes them."""
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


@pytest.mark.parametrize("fixture", ["allennlp-elmo", "bilm-tf-model"])
def test_stateful_top_layer_matches_original_on_cuda(fixture, allennlp_dir, fixture_sentences):
    d = allennlp_dir.parent / fixture
    bilm = load_bilm(d / "options.json", d / "lm_weights.hdf5", stateful=True).cuda()
    with torch.no_grad():
        for i in range(10):
            batch = [lst[i].split() for lst in fixture_sentences]
            out = bilm(batch_to_ids(batch).cuda())
            top, _ = remove_sentence_boundaries(out.layers[2], out.mask)
            for k, sentence in enumerate(batch):
                with h5py.File(d / f"lm_embeddings_{k}.hdf5", "r") as f:
                    expected = f[str(i)][...]
                got = top_layer_halves(top[k, : len(sentence)].cpu().numpy(), 16)
                np.testing.assert_allclose(got, expected, atol=1e-6, rtol=1e-5)


def test_embedder_on_cuda_matches_cpu_and_bf16_stays_close():
    cpu = Embedder(batch_size=2)  # the bundled default model
    gpu = Embedder(device="cuda", batch_size=2)
    half = Embedder(gpu.bilm, device="cuda", bf16=True, batch_size=2)
    expected = list(cpu.embed_sentences(SENTENCES))
    got = list(gpu.embed_sentences(SENTENCES))
    got_half = list(half.embed_sentences(SENTENCES))
    for e, g, h in zip(expected, got, got_half):
        assert g.dtype == h.dtype == np.float32 and g.shape == e.shape
        np.testing.assert_allclose(g, e, atol=1e-5, rtol=1e-4)
        cos = (h * e).sum(-1) / (np.linalg.norm(h, axis=-1) * np.linalg.norm(e, axis=-1) + 1e-12)
        assert cos.min() > 0.98, cos.min()


def _corpus(tmp_path):
    """A small corpus, its vocabulary file and micro biLM options."""
    text = tmp_path / "corpus.txt"
    text.write_text("\n".join(" ".join(s) for s in SENTENCES * 8) + "\n", encoding="utf-8")
    vocab_file = tmp_path / "vocab.txt"
    write_vocab(build_vocab(count_tokens([str(text)]), 1, None), vocab_file)
    options = {
        "lstm": {"dim": 32, "projection_dim": 16, "n_layers": 2, "cell_clip": 3, "proj_clip": 3,
                 "use_skip_connections": True},
        "char_cnn": {"activation": "relu", "embedding": {"dim": 8}, "filters": [[1, 8], [2, 8], [3, 16]],
                     "n_highway": 2, "max_characters_per_token": 50, "n_characters": 262},
    }
    return text, vocab_file, options


def test_training_loss_and_gradients_on_cuda_match_cpu(tmp_path):
    text, vocab_file, options = _corpus(tmp_path)
    vocab = Vocab.load(str(vocab_file))
    torch.manual_seed(0)
    model = LanguageModel(BiLMConfig.from_options(options), len(vocab))
    batch = StreamBatcher(SentenceSource([str(text)], seed=0), vocab, 4, 7).next_batch()
    results = []
    for device in ("cpu", "cuda"):
        m = model.to(device)
        m.zero_grad(set_to_none=True)
        loss_f, loss_b, _ = m(batch.to(device))
        loss = 0.5 * (loss_f.mean() + loss_b.mean())
        loss.backward()
        grads = {n: p.grad.detach().cpu().clone() for n, p in m.named_parameters() if p.grad is not None}
        results.append((loss.item(), grads))
    (loss_cpu, grads_cpu), (loss_gpu, grads_gpu) = results
    assert abs(loss_cpu - loss_gpu) < 1e-5
    assert grads_cpu.keys() == grads_gpu.keys()
    for name in grads_cpu:
        torch.testing.assert_close(grads_gpu[name], grads_cpu[name], atol=1e-5, rtol=1e-4, msg=name)


def test_train_command_runs_on_cuda_with_bf16(tmp_path):
    text, vocab_file, options = _corpus(tmp_path)
    out = tmp_path / "run"
    train(TrainSettings(out=str(out), train=[str(text)], vocab=str(vocab_file), options=options,
                                  batch_size=4, unroll_steps=5, negatives=10, max_steps=20, device="cuda", bf16=True,
                                  progress=False, log_every=1))
    lines = (out / "metrics.jsonl").read_text().splitlines()
    assert len(lines) >= 20
    first, last = json.loads(lines[0]), json.loads(lines[-1])
    assert np.isfinite(last["loss"]) and last["loss"] < first["loss"]
