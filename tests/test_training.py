"""Training pieces in isolation: vocabulary, corpus streams, the sampled softmax, bad input."""

from __future__ import annotations

import gzip
import json
import math
from collections import Counter

import numpy as np
import pytest
import torch
from conftest import BILM_TF, MICRO, need

from elmo.cli import main as cli_main
from elmo.errors import InputError, ModelFileError
from elmo.formats.lm_vocab import Vocab, write_vocab
from elmo.model.bilm import BiLM
from elmo.model.chars import PAD_CHAR
from elmo.model.devices import cpu_has_bf16
from elmo.model.options import BiLMConfig
from elmo.training import TrainingError
from elmo.training.batchers import OrderedBatcher, SentenceBatcher, StreamBatcher
from elmo.training.checkpoint import list_checkpoints, load_checkpoint
from elmo.training.corpus import MAX_LINE_BYTES, SentenceSource, expand_corpus, read_sentences
from elmo.training.model import LanguageModel, kim_initialise_
from elmo.training.presets import preset_options
from elmo.training.settings import TrainSettings
from elmo.training.softmax import LogUniformSampler, Sample, Softmax, softmax_nll
from elmo.training.trainer import train
from elmo.training.vocab import build_vocab

pytestmark = pytest.mark.usefixtures("keep_threads")


def write(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def settings(tmp_path, corpus, vocab, **kw) -> TrainSettings:
    base = {"out": str(tmp_path / "run"), "train": [str(corpus)], "vocab": str(vocab), "options": MICRO, "batch_size": 4,
            "unroll_steps": 5, "negatives": 10, "max_steps": 3, "threads": 1, "progress": False, "log_every": 1}
    return TrainSettings(**{**base, **kw})


@pytest.fixture
def fixture_corpus(tmp_path):
    """bilm-tf's own training text and a vocabulary built from it by `elmo vocab`."""
    data = need(BILM_TF / "train" / "data.txt")
    vocab = tmp_path / "vocab.txt"
    assert cli_main(["vocab", str(data), "-o", str(vocab)]) == 0
    return data, vocab


# --- vocabulary -----------------------------------------------------------------------------------


def test_vocab_order_specials_ties_and_limits():
    counts = Counter({"b": 3, "a": 3, "c": 5, "d": 1, "<S>": 9})
    assert build_vocab(counts) == ["<S>", "</S>", "<UNK>", "c", "a", "b", "d"]
    assert build_vocab(counts, min_count=2) == ["<S>", "</S>", "<UNK>", "c", "a", "b"]
    assert build_vocab(counts, max_size=5) == ["<S>", "</S>", "<UNK>", "c", "a"]


def test_elmo_vocab_on_fixture_matches_counts(fixture_corpus):
    data, vocab = fixture_corpus
    tokens = Vocab.load(vocab).tokens
    counts = Counter(w for _, words in read_sentences(str(data)) for w in words)
    assert tokens[:3] == ["<S>", "</S>", "<UNK>"]
    assert sorted(tokens[3:]) == sorted(counts)
    assert [counts[t] for t in tokens[3:]] == sorted(counts.values(), reverse=True)
    # bilm-tf's bundled vocabulary is the same set of tokens seen at least twice
    reference = Vocab.load(BILM_TF / "train" / "vocab.txt").tokens
    assert set(reference) == {t for t in tokens if t in ("<S>", "</S>", "<UNK>") or counts[t] >= 2}


def test_vocab_errors(tmp_path):
    with pytest.raises(ModelFileError, match=r"missing: </S>, <UNK>"):
        Vocab.load(write(tmp_path / "v1.txt", ["<S>", "the"]))
    with pytest.raises(ModelFileError, match=r"v2.txt, line 5: token 'the' repeats line 4"):
        Vocab.load(write(tmp_path / "v2.txt", ["<S>", "</S>", "<UNK>", "the", "the"]))
    with pytest.raises(ModelFileError, match=r"v3.txt, line 4: expected a token, found a blank line"):
        Vocab.load(write(tmp_path / "v3.txt", ["<S>", "</S>", "<UNK>", "", "a"]))
    with pytest.raises(ModelFileError, match="vocabulary file not found"):
        Vocab.load(tmp_path / "nope.txt")
    assert Vocab.load(write(tmp_path / "v4.txt", ["!!!MAXTERMID", "</S>", "<S>", "<UNK>", "x"])).encode(["x", "y"]) == [3, 2]


def test_objective_sum_doubles_the_step_and_forward_leaves_the_backward_lstm(tmp_path, fixture_corpus):
    """One SGD update without clipping or dropout: `sum` moves every weight twice as far as `mean`;
    `forward` moves the forward LSTM as `sum` does and leaves the backward LSTM as initialised."""
    data, vocab = fixture_corpus
    from elmo.training.settings import fresh_run
    from elmo.training.trainer import _build_model, _model_options

    moved = {}
    for objective in ("mean", "sum", "forward"):
        s = settings(tmp_path, data, vocab, out=str(tmp_path / objective), objective=objective, optimizer="sgd", lr=0.5,
                     clip_norm=1e9, dropout=0.0, sampled=False, max_steps=1)
        options, run, lm_vocab = fresh_run(s, _model_options)
        torch.manual_seed(run.seed)  # the weights the run starts from, drawn as `train` draws them
        before = _build_model(options, lm_vocab, run, rank=0)[0].state_dict()
        train(s)
        after = load_checkpoint(list_checkpoints(s.out)[-1][1])["model"]
        moved[objective] = {name: after[name] - before[name] for name in after}
    for name, step in moved["mean"].items():
        torch.testing.assert_close(moved["sum"][name], 2 * step, rtol=1e-4, atol=1e-6)
        if name.startswith("bilm.backward_lstm."):
            assert torch.count_nonzero(moved["forward"][name]) == 0, name
        elif name.startswith("bilm.forward_lstm."):
            torch.testing.assert_close(moved["forward"][name], moved["sum"][name], rtol=1e-4, atol=1e-6)
    assert json.loads((tmp_path / "forward" / "run.json").read_text())["objective"] == "forward"
    for objective in ("mean", "forward"):  # the logged loss is the trained one's
        record = json.loads((tmp_path / objective / "metrics.jsonl").read_text().splitlines()[-1])
        trained = record["loss_forward"] if objective == "forward" else (record["loss_forward"] + record["loss_backward"]) / 2
        assert record["loss"] == pytest.approx(trained) and record["ppl"] == pytest.approx(math.exp(trained))
        assert record["loss_forward"] != pytest.approx(record["loss_backward"])


def test_weight_init_kim_starts_from_kims_draw_and_stays_with_the_run(tmp_path, fixture_corpus):
    """`--weight-init kim`: every trained weight U(-0.05, 0.05) but Kim's constants; kept on resume."""
    data, vocab = fixture_corpus
    out = tmp_path / "kim"
    train(settings(tmp_path, data, vocab, out=str(out), weight_init="kim", optimizer="sgd", lr=1e-30, max_steps=1))
    weights = load_checkpoint(list_checkpoints(out)[-1][1])["model"]
    cell = MICRO["lstm"]["dim"]
    for name, value in weights.items():
        if "highway_carry_b" in name:
            assert (value == -2).all(), name
        elif name.endswith("_lstm.layers.0.B") or name.endswith("_lstm.layers.1.B"):
            forget = value[2 * cell : 3 * cell]  # gates i, j, f, o; the LSTM adds TensorFlow's +1 to f
            assert ((forget + 1).abs() <= 0.05).all() and (torch.cat([value[: 2 * cell], value[3 * cell :]]).abs() <= 0.05).all()
        else:
            assert value.abs().max() <= 0.05, name
    assert weights["bilm.char_encoder.char_embed"][PAD_CHAR].abs().max() < 1e-30  # zero, then one step at lr 1e-30
    assert weights["softmax.W"].abs().max() > 0.04  # drawn, not left at zero
    bilm_tf = tmp_path / "bilm-tf"
    train(settings(tmp_path, data, vocab, out=str(bilm_tf), optimizer="sgd", lr=1e-30, max_steps=1))
    assert load_checkpoint(list_checkpoints(bilm_tf)[-1][1])["model"]["bilm.char_encoder.char_embed"].abs().max() > 0.9
    assert json.loads((out / "run.json").read_text())["weight_init"] == "kim"
    with pytest.raises(InputError, match=r"--weight-init bilm-tf: the run in .* was started with kim"):
        train(settings(tmp_path, data, vocab, out=str(out), weight_init="bilm-tf", resume=True, max_steps=2))
    with pytest.raises(InputError, match="--init-from starts from that model's weights; drop --weight-init"):
        train(settings(tmp_path, data, vocab, out=str(tmp_path / "both"), options=None, init_from=str(BILM_TF),
                       weight_init="kim"))
    with pytest.raises(ValueError, match="training table of 261 byte codes, found 262 rows"):
        kim_initialise_(BiLM(BiLMConfig.from_options(MICRO), char_rows=262))


def test_unsorted_vocab_is_refused_for_the_sampled_softmax(tmp_path, fixture_corpus):
    data, vocab = fixture_corpus
    tokens = Vocab.load(vocab).tokens
    backwards = tmp_path / "backwards.txt"
    write_vocab(tokens[:3] + tokens[3:][::-1], backwards)
    with pytest.raises(ModelFileError, match="not sorted by descending frequency"):
        train(settings(tmp_path, data, backwards))
    # the full softmax does not care about the order
    assert train(settings(tmp_path, data, backwards, out=str(tmp_path / "full"), sampled=False))["step"] == 3


# --- corpus streams -------------------------------------------------------------------------------


def test_stream_batches_are_bilm_tf_windows(tmp_path):
    corpus = write(tmp_path / "c.txt", ["a b c", "", "d e"])
    vocab = Vocab(["<S>", "</S>", "<UNK>", "a", "b", "c", "d"])
    batcher = StreamBatcher(SentenceSource([str(corpus)], shuffle=False, loop=False), vocab, rows=1, unroll=4)

    def words(batch, which):
        names = {i + 1: t for i, t in enumerate(_decode_types(batch))}
        return [names.get(int(i), "-") for i in getattr(batch, which)[0]]

    first = batcher.next_batch()
    assert words(first, "fwd_inputs") == ["<S>", "a", "b", "c"]
    assert first.fwd_targets[0].tolist() == [3, 4, 5, 1]  # a b c </S>
    assert words(first, "bwd_inputs") == ["</S>", "c", "b", "a"]
    assert first.bwd_targets[0].tolist() == [5, 4, 3, 0]  # c b a <S>
    second = batcher.next_batch()
    assert words(second, "fwd_inputs")[:3] == ["<S>", "d", "e"]
    assert second.fwd_targets[0, :3].tolist() == [6, 2, 1]  # d <UNK> </S>
    assert second.lengths.tolist() == [3] and second.mask[0].tolist() == [True, True, True, False]
    assert batcher.next_batch() is None


def _decode_types(batch):
    """Token text of each row of batch.char_ids (ids are UTF-8 bytes + 1 between the markers)."""
    out = []
    for ids in batch.char_ids.tolist():
        if ids[1] == 257:
            out.append("<S>")
        elif ids[1] == 258:
            out.append("</S>")
        else:
            body = [i - 1 for i in ids[1:] if i - 1 < 256]
            out.append(bytes(body).decode())
    return out


def test_stream_state_restores_exactly_and_shards_partition(tmp_path):
    lines = [" ".join(f"w{i}_{j}" for j in range(1 + i % 7)) for i in range(50)]
    corpus = tmp_path / "c.txt.gz"
    with gzip.open(corpus, "wt", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    vocab = Vocab(["<S>", "</S>", "<UNK>"] + sorted({w for line in lines for w in line.split()}))

    def make():
        return StreamBatcher(SentenceSource([str(corpus)], seed=3, chunk_lines=8), vocab, rows=3, unroll=4)

    a = make()
    for _ in range(7):
        a.next_batch()
    state = a.state()
    expected = [a.next_batch() for _ in range(30)]  # crosses chunks and epochs
    b = make()
    b.restore(state)
    for want in expected:
        got = b.next_batch()
        assert torch.equal(got.fwd_targets, want.fwd_targets) and torch.equal(got.bwd_targets, want.bwd_targets)
        assert torch.equal(got.char_ids, want.char_ids) and torch.equal(got.fwd_inputs, want.fwd_inputs)

    shards = [list(SentenceSource([str(corpus)], seed=1, loop=False, shard=(r, 2), chunk_lines=8)) for r in (0, 1)]
    assert sorted(map(" ".join, shards[0] + shards[1])) == sorted(lines)
    assert abs(len(shards[0]) - len(shards[1])) <= 4


def test_ordered_batches_read_the_corpus_in_order_both_ways(tmp_path):
    """Kim et al.'s streams: forward rows read contiguous stretches front to back; backward rows read
    the reversed corpus (each sentence reversed, last sentence first) the same way."""
    corpus = write(tmp_path / "c.txt", ["a b", "c", "", "d e f g"])
    vocab = Vocab(["<S>", "</S>", "<UNK>", "a", "b", "c", "d", "e", "f"])
    # 10 (input, target) pairs each way, so two rows of 5, read in windows of 3 and 2
    batcher = OrderedBatcher([str(corpus)], vocab, rows=2, unroll=3, loop=False)

    def rows(batch, which):
        names = {i + 1: t for i, t in enumerate(_decode_types(batch))}
        return [[names[int(i)] for i in row] for row in getattr(batch, which)]

    first, second = batcher.next_batch(), batcher.next_batch()
    assert batcher.next_batch() is None and batcher.windows_per_epoch == 2
    assert rows(first, "fwd_inputs") == [["<S>", "a", "b"], ["<S>", "d", "e"]]
    assert first.fwd_targets.tolist() == [[3, 4, 1], [6, 7, 8]]  # a b </S> | d e f
    assert rows(second, "fwd_inputs") == [["<S>", "c"], ["f", "g"]] and second.lengths.tolist() == [2, 2]
    assert second.fwd_targets.tolist() == [[5, 1], [2, 1]]  # c </S> | <UNK> </S>
    assert rows(first, "bwd_inputs") == [["</S>", "g", "f"], ["</S>", "c", "</S>"]]
    assert first.bwd_targets.tolist() == [[2, 8, 7], [5, 0, 4]]  # <UNK> f e | c <S> b
    assert rows(second, "bwd_inputs") == [["e", "d"], ["b", "a"]]
    assert second.bwd_targets.tolist() == [[6, 0], [3, 0]]  # d <S> | a <S>


def test_ordered_state_restores_exactly_and_ranks_split_the_streams(tmp_path):
    lines = [" ".join(f"w{i}_{j}" for j in range(1 + i % 5)) for i in range(40)]
    corpus = write(tmp_path / "c.txt", lines)
    vocab = Vocab(["<S>", "</S>", "<UNK>"] + sorted({w for line in lines for w in line.split()}))
    a = OrderedBatcher([str(corpus)], vocab, rows=4, unroll=3)
    for _ in range(5):
        a.next_batch()
    state = a.state()
    expected = [a.next_batch() for _ in range(20)]  # crosses the epoch end
    b = OrderedBatcher([str(corpus)], vocab, rows=4, unroll=3)
    b.restore(state)
    for want in expected:
        got = b.next_batch()
        assert torch.equal(got.fwd_targets, want.fwd_targets) and torch.equal(got.bwd_targets, want.bwd_targets)
        assert torch.equal(got.char_ids[got.fwd_inputs - 1], want.char_ids[want.fwd_inputs - 1])
    whole = OrderedBatcher([str(corpus)], vocab, rows=4, unroll=3).next_batch()
    halves = [OrderedBatcher([str(corpus)], vocab, rows=2, unroll=3, shard=(r, 2)).next_batch() for r in (0, 1)]
    assert torch.equal(torch.cat([h.fwd_targets for h in halves]), whole.fwd_targets)
    assert torch.equal(torch.cat([h.bwd_targets for h in halves]), whole.bwd_targets)
    with pytest.raises(InputError, match="cannot fill 400 ordered streams"):
        OrderedBatcher([str(corpus)], vocab, rows=400, unroll=3)


def test_sentence_batches_sorted_with_zero_padding(tmp_path):
    corpus = write(tmp_path / "c.txt", ["a", "a b c", "b c"])
    vocab = Vocab(["<S>", "</S>", "<UNK>", "a", "b", "c"])
    batch = SentenceBatcher(SentenceSource([str(corpus)], shuffle=False, loop=False), vocab, rows=8).next_batch()
    assert batch.lengths.tolist() == [4, 3, 2]
    assert batch.fwd_targets[2].tolist() == [3, 1, 0, 0] and batch.fwd_inputs[2, 2:].tolist() == [0, 0]


def test_corpus_errors(tmp_path):
    with pytest.raises(InputError, match="no corpus file found"):
        expand_corpus([str(tmp_path / "missing*.txt")])
    with pytest.raises(InputError, match=r"missing\.txt: corpus file not found"):
        list(read_sentences(str(tmp_path / "missing.txt")))
    long_line = tmp_path / "long.txt"
    long_line.write_bytes(b"ok line\n" + b"x " * (MAX_LINE_BYTES // 2 + 1) + b"\n")
    with pytest.raises(InputError, match=r"long.txt, line 2: longer than 100,000 bytes"):
        list(read_sentences(str(long_line)))
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"fine\nnot \xff utf8\n")
    with pytest.raises(InputError, match=r"bad.txt, line 2: invalid UTF-8"):
        list(SentenceSource([str(bad)], loop=False))
    empty = write(tmp_path / "empty.txt", ["", "   "])
    with pytest.raises(InputError, match="no sentences"):
        SentenceSource([str(empty)]).next()


def test_training_input_errors_through_the_cli(tmp_path, fixture_corpus, capsys):
    data, vocab = fixture_corpus
    empty = write(tmp_path / "empty.txt", [""])
    common = ["train", "--vocab", str(vocab), "--preset", "tiny", "--max-steps", "1", "--no-progress"]
    assert cli_main(common + ["--train", str(tmp_path / "none*.txt"), "--out", str(tmp_path / "a")]) == 2
    assert "none*.txt: no corpus file found" in capsys.readouterr().err
    assert cli_main(common + ["--train", str(empty), "--out", str(tmp_path / "b")]) == 2
    assert "empty.txt: no sentences (the corpus is empty or only blank lines)" in capsys.readouterr().err
    no_specials = write(tmp_path / "v.txt", ["the", "a"])
    assert cli_main(["train", "--vocab", str(no_specials), "--train", str(data), "--preset", "tiny", "--out", str(tmp_path / "c")]) == 2
    assert "missing: <S>, </S>, <UNK>" in capsys.readouterr().err
    assert cli_main(["perplexity", str(tmp_path / "nothing"), "--test", str(data)]) == 2
    assert "neither a model directory nor a bundled model" in capsys.readouterr().err


def test_nan_loss_stops_and_keeps_the_last_good_checkpoint(tmp_path, fixture_corpus):
    data, vocab = fixture_corpus
    s = settings(tmp_path, data, vocab, lr=1e30, max_steps=50, checkpoint_every=1, keep_checkpoints=50)
    with pytest.raises(TrainingError, match=r"step (\d+): the (loss|gradient norm|model's weights) (is|are) not finite") as err:
        train(s)
    saved = list_checkpoints(s.out)
    assert saved, "the steps before the blow-up were checkpointed"
    assert f"the last good checkpoint, {saved[-1][1]}, is kept" in str(err.value)
    assert all(torch.isfinite(v).all() for v in load_checkpoint(saved[-1][1])["model"].values())


def test_resume_refuses_changed_settings(tmp_path, fixture_corpus):
    data, vocab = fixture_corpus
    train(settings(tmp_path, data, vocab))
    with pytest.raises(InputError, match="already holds a training run"):
        train(settings(tmp_path, data, vocab))
    with pytest.raises(InputError, match=r"--batch-size 8: the run in .* was started with 4"):
        train(TrainSettings(out=str(tmp_path / "run"), resume=True, batch_size=8, max_steps=4, progress=False))
    # a new learning rate is the one change a resumed run accepts (e.g. after a NaN stop)
    train(TrainSettings(out=str(tmp_path / "run"), resume=True, lr=0.05, max_steps=4, progress=False, threads=1))
    saved = load_checkpoint(list_checkpoints(tmp_path / "run")[-1][1])
    assert saved["step"] == 4 and [g["lr"] for g in saved["optimizer"]["param_groups"]] == [0.05]


def test_first_layer_dropout_can_spare_the_token_vectors():
    """bilm-tf drops out every LSTM layer's input; --no-first-layer-dropout (Kim et al. 2016) spares layer 1's."""
    config = BiLMConfig.from_options(preset_options("tiny"))
    for spare in (False, True):
        model = LanguageModel(config, 10, dropout=0.9, first_layer_dropout=not spare).train()
        stack = model.bilm.forward_lstm
        seen = []
        hooks = [layer.register_forward_pre_hook(lambda _, args, seen=seen: seen.append(args[0])) for layer in stack.layers]
        x = torch.rand(2, 3, config.projection_dim) + 0.1
        stack(x, torch.tensor([3, 3]))
        for hook in hooks:
            hook.remove()
        assert torch.equal(seen[0], x) == spare
        assert (seen[1] == 0).any()  # the layers above are dropped out either way


def test_first_layer_dropout_is_kept_with_the_run(tmp_path, fixture_corpus):
    data, vocab = fixture_corpus
    train(settings(tmp_path, data, vocab, first_layer_dropout=False))
    assert json.loads((tmp_path / "run" / "run.json").read_text())["first_layer_dropout"] is False
    with pytest.raises(InputError, match=r"first_layer_dropout=True: the run .* was started with --no-first-layer-dropout"):
        train(TrainSettings(out=str(tmp_path / "run"), resume=True, first_layer_dropout=True, max_steps=4, progress=False))


# --- softmax --------------------------------------------------------------------------------------


def test_log_uniform_sampler_matches_tf_distribution():
    sampler = LogUniformSampler(1000, 50, torch.Generator().manual_seed(0))
    draws = sampler.draw(200_000).numpy()
    p = (np.log(np.arange(1000) + 2) - np.log(np.arange(1000) + 1)) / np.log(1001)
    observed = np.bincount(draws, minlength=1000) / len(draws)
    assert np.abs(observed[:10] - p[:10]).max() < 0.004
    sample = sampler.sample()
    assert len(sample.ids) == 50 and len(set(sample.ids.tolist())) == 50 and sample.num_tries >= 50


def test_sampled_softmax_equals_direct_reference():
    """TF's sampled_softmax_loss computed by hand in float64: log-Q correction, accidental hits removed."""
    torch.manual_seed(0)
    vocab_size, dim = 40, 5
    softmax = Softmax(vocab_size, dim)
    with torch.no_grad():
        softmax.b.normal_()
    sample = LogUniformSampler(vocab_size, 12, torch.Generator().manual_seed(1)).sample()
    ids = sample.ids.tolist()
    targets = torch.tensor([ids[0], ids[3], 39, 0 if 0 not in ids else 38, ids[5], 17])
    h = torch.randn(len(targets), dim)
    got = softmax.sampled_nll(h, targets, sample)

    W, b = softmax.W.detach().double().numpy(), softmax.b.detach().double().numpy()
    x = h.double().numpy()

    def expected_count(k):
        p = (math.log(k + 2) - math.log(k + 1)) / math.log(vocab_size + 1)
        if sample.num_tries == len(ids):
            return p * len(ids)
        return 1.0 - (1.0 - p) ** sample.num_tries

    hits = 0
    for row, t in enumerate(targets.tolist()):
        true = x[row] @ W[t] + b[t] - math.log(expected_count(t))
        negatives = [x[row] @ W[k] + b[k] - math.log(expected_count(k)) for k in ids if k != t]
        hits += len(ids) - len(negatives)
        want = -true + math.log(math.exp(true) + sum(math.exp(v) for v in negatives))
        assert got[row].item() == pytest.approx(want, rel=1e-5, abs=1e-5)
    assert hits == 3  # the case covers accidental hits


def test_sparse_softmax_gradient_updates_as_the_dense_one(fixture_corpus):
    """Three Adagrad (and SGD) steps with clipping on the sampled softmax: the sparse gradient of the
    rows read (`Softmax.sparse_grad`, what `elmo train` uses on a CPU) moves every weight as the dense
    gradient does, the rows no sample read not at all."""
    from elmo.training.trainer import apply_gradients
    data, vocab_file = fixture_corpus
    vocab = Vocab.load(vocab_file)
    config = BiLMConfig.from_options(MICRO)
    for make_optimizer in (lambda ps: torch.optim.Adagrad(ps, lr=0.2, initial_accumulator_value=1.0),
                           lambda ps: torch.optim.SGD(ps, lr=0.5)):
        finals = []
        for sparse in (False, True):
            torch.manual_seed(0)
            sampler = LogUniformSampler(len(vocab), 4, torch.Generator().manual_seed(1))
            model = LanguageModel(config, len(vocab), sampler=sampler)
            model.softmax.sparse_grad = sparse
            kinds = []
            model.softmax.W.register_hook(lambda g, kinds=kinds: kinds.append(g.is_sparse))
            start = {k: v.clone() for k, v in model.state_dict().items()}
            params = list(model.parameters())
            optimizer = make_optimizer(params)
            batcher = SentenceBatcher(SentenceSource([str(data)], seed=0, shuffle=True, loop=True), vocab, 2)
            for _ in range(3):
                loss_f, loss_b, _ = model(batcher.next_batch(), None, streaming=False)
                apply_gradients(loss_f.mean(), loss_b.mean(), 5, params, clip_norm=1.0, optimizer=optimizer)
            assert kinds == [sparse] * 3
            finals.append((start, model.state_dict()))
        (start, dense), (_, sparse_state) = finals
        for name in dense:
            torch.testing.assert_close(sparse_state[name], dense[name], rtol=0, atol=1e-6, msg=name)
        untouched = (dense["softmax.W"] == start["softmax.W"]).all(dim=1)
        assert untouched.any() and not untouched.all()


def test_fused_softmax_nll_matches_plain_autograd():
    """softmax_nll (chunked, gradient formed in the forward pass) against the plain expression, in float64:
    values and the gradients of h, W, bias and the extra logit, under a non-uniform upstream gradient."""
    torch.manual_seed(0)
    n, dim, vocab_size = 70, 6, 50
    h = torch.randn(n, dim, dtype=torch.float64, requires_grad=True)
    W = torch.randn(vocab_size, dim, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(vocab_size, dtype=torch.float64, requires_grad=True)
    extra = torch.randn(n, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, vocab_size, (n,))
    hit_rows = torch.tensor([3, 15, 16, 40, 69])  # on both sides of the 16-row chunk boundaries
    hit_cols = torch.tensor([0, 7, 49, 7, 22])
    upstream = torch.rand(n, dtype=torch.float64)
    chunk = 16 * vocab_size * 8  # 16 rows of float64 logits: five chunks

    def plain_full():
        return torch.nn.functional.cross_entropy(h @ W.t() + bias, targets, reduction="none")

    def plain_extra():
        logits = (h @ W.t() + bias).index_put((hit_rows, hit_cols), torch.tensor(float("-inf"), dtype=torch.float64))
        return torch.logaddexp(torch.logsumexp(logits, 1), extra) - extra

    cases = [(plain_full, lambda: softmax_nll(h, W, bias, targets=targets, chunk_bytes=chunk)),
             (plain_extra, lambda: softmax_nll(h, W, bias, extra=extra, hits=(hit_rows, hit_cols), chunk_bytes=chunk))]
    for plain, fused in cases:
        results = []
        for f in (plain, fused):
            inputs = (h, W, bias, extra)
            value = f()
            grads = torch.autograd.grad((value * upstream).sum(), inputs, allow_unused=True)
            results.append((value.detach(), grads))
        (want, want_grads), (got, got_grads) = results
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
        for g, w in zip(got_grads, want_grads):
            if w is None:
                assert g is None or not g.any()
            else:
                torch.testing.assert_close(g, w, rtol=0, atol=1e-12)
        with torch.no_grad():
            torch.testing.assert_close(fused(), want, rtol=0, atol=1e-12)  # evaluation: no gradient kept
    with pytest.raises(ValueError, match="exactly one"):
        softmax_nll(h, W, bias)


def test_fused_softmax_nll_under_bf16_autocast_stays_close_to_float32():
    """Under autocast the fused softmax runs its GEMMs in bfloat16 and the softmax in float32: the values
    and every gradient stay within bfloat16's rounding of the float32 ones, with float32 outputs."""
    torch.manual_seed(0)
    n, dim, vocab_size = 300, 64, 5000
    h = torch.randn(n, dim, requires_grad=True)
    W = (0.3 * torch.randn(vocab_size, dim)).requires_grad_()
    bias = (0.1 * torch.randn(vocab_size)).requires_grad_()
    extra = torch.randn(n, requires_grad=True)
    targets = torch.randint(0, vocab_size, (n,))
    hits = (torch.tensor([0, 7, 299]), torch.tensor([3, 4999, 10]))
    upstream = torch.rand(n)
    for kind in ({"targets": targets}, {"extra": extra, "hits": hits}):
        results = []
        for low in (False, True):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=low):
                value = softmax_nll(h, W, bias, **kind)
            grads = torch.autograd.grad((value * upstream).sum(), (h, W, bias, extra), allow_unused=True)
            results.append((value.detach(), grads))
        (want, want_grads), (got, got_grads) = results
        assert got.dtype == torch.float32
        torch.testing.assert_close(got, want, rtol=0, atol=0.02 * want.abs().max().item())
        assert not torch.equal(got, want)  # the GEMMs really ran in bfloat16
        for g, w in zip(got_grads, want_grads):
            if w is not None:
                assert g.dtype == w.dtype
                torch.testing.assert_close(g, w, rtol=0, atol=0.02 * w.abs().max().item())


@pytest.mark.skipif(not cpu_has_bf16(), reason="this CPU has no native bfloat16 (AVX512-BF16 or AMX)")
def test_bf16_training_on_cpu_keeps_float32_weights_and_follows_float32(tmp_path, fixture_corpus):
    """`elmo train --bf16` on a CPU with native bfloat16: the same first steps as float32 to within
    bfloat16 rounding, float32 weights in the checkpoint."""
    data, vocab = fixture_corpus
    losses = {}
    for bf16 in (False, True):
        out = tmp_path / f"bf16-{bf16}"
        train(settings(tmp_path, data, vocab, out=str(out), bf16=bf16, dropout=0.0, max_steps=4))
        records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        losses[bf16] = np.array([[r["loss_forward"], r["loss_backward"]] for r in records])
        model = load_checkpoint(list_checkpoints(out)[-1][1])["model"]
        assert all(t.dtype == torch.float32 for t in model.values() if t.is_floating_point())
    np.testing.assert_allclose(losses[True], losses[False], rtol=0.01)


def test_bf16_training_is_refused_on_a_cpu_without_native_bf16(tmp_path, fixture_corpus, monkeypatch):
    data, vocab = fixture_corpus
    monkeypatch.setattr("elmo.training.trainer.cpu_has_bf16", lambda: False)
    with pytest.raises(InputError, match=r"--bf16 needs a GPU .* or a CPU with native bfloat16"):
        train(settings(tmp_path, data, vocab, bf16=True))


def test_lstm_under_autocast_keeps_its_cell_state_in_float32():
    """bfloat16 products, float32 cell state: the state a bf16 run carries is never rounded to 8 bits."""
    from elmo.model.bilm import LstmLayer
    config = BiLMConfig.from_options(MICRO)
    layer = LstmLayer(8, config)
    x = torch.randn(3, 5, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        state = layer.zero_state(3, x.to(torch.bfloat16))
        out, (c, _) = layer(x, torch.tensor([5, 4, 2]), state)
    assert state[0].dtype == torch.float32 and c.dtype == torch.float32
    want, _ = layer(x, torch.tensor([5, 4, 2]), layer.zero_state(3, x))
    torch.testing.assert_close(out.float(), want, rtol=0, atol=0.05)


def test_sample_expected_counts_without_rejections():
    sample = Sample(torch.tensor([0, 5]), num_tries=2, vocab_size=9)
    p5 = (math.log(7) - math.log(6)) / math.log(10)
    assert sample.log_expected(torch.tensor([5])).item() == pytest.approx(math.log(2 * p5), rel=1e-6)
