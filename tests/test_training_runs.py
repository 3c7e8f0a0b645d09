"""Whole training runs: learning, SIGKILL + resume, export -> embed, torchrun vs one process."""

from __future__ import annotations

import gzip
import itertools
import json
import math
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from conftest import BILM_TF, DATA, MICRO_RUN, need, subprocess_env

from elmo.cli import main as cli_main
from elmo.errors import ModelFileError
from elmo.formats.lm_vocab import Vocab
from elmo.formats.weights import dataset_map, load_bilm
from elmo.model.chars import batch_to_ids
from elmo.training import trainer
from elmo.training.batchers import Batch, StreamBatcher, make_batcher
from elmo.training.checkpoint import (
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
)
from elmo.training.corpus import SentenceSource, expand_corpus
from elmo.training.export import load_run
from elmo.training.model import detach_states
from elmo.training.perplexity import perplexity
from elmo.training.settings import RunConfig, TrainSettings
from elmo.training.trainer import _build_model, _make_optimizer, train

ELMO = Path(sys.executable).parent / "elmo"  # the console script of this environment


pytestmark = pytest.mark.usefixtures("keep_threads")


@pytest.fixture
def fixture_run(tmp_path):
    """bilm-tf's training text, its vocabulary (by `elmo vocab`), and the train flags used below."""
    data = need(BILM_TF / "train" / "data.txt")
    vocab = tmp_path / "vocab.txt"
    assert cli_main(["vocab", str(data), "-o", str(vocab)]) == 0
    options = tmp_path / "micro.json"
    options.write_text(json.dumps(MICRO_RUN))
    flags = ["--train", str(data), "--vocab", str(vocab), "--options", str(options), "--batch-size", "6",
             "--unroll-steps", "8", "--negatives", "16", "--threads", "1", "--no-progress", "--seed", "5"]
    return data, vocab, flags


@pytest.mark.slow  # end-to-end training
def test_tiny_model_beats_unigram_perplexity(tmp_path):
    """300 steps (one sentence per row, the default) on 2,000 sentences of a small language (each word is usually the successor of the
    previous one): held-out perplexity in both directions far below the unigram model's.

    Real text needs far more steps than a unit test can afford before context pays off;
    benchmarks/ptb_char_small.py measures that on PTB.
    """
    rng = random.Random(0)

    def sentence() -> str:
        words = [rng.randrange(60)]
        for _ in range(rng.randint(1, 9)):
            words.append((words[-1] + 1) % 60 if rng.random() < 0.8 else rng.randrange(60))
        return " ".join(f"t{w:02d}" for w in words)

    train_lines = [sentence() for _ in range(2000)]
    seen = set(train_lines)
    held_out = [s for s in (sentence() for _ in range(300)) if s not in seen][:150]
    train_txt, valid_txt, vocab_file = tmp_path / "train.txt", tmp_path / "valid.txt", tmp_path / "vocab.txt"
    train_txt.write_text("\n".join(train_lines) + "\n")
    valid_txt.write_text("\n".join(held_out) + "\n")
    assert cli_main(["vocab", str(train_txt), "-o", str(vocab_file)]) == 0
    settings = TrainSettings(out=str(tmp_path / "run"), train=[str(train_txt)], vocab=str(vocab_file), options=MICRO_RUN,
                             batch_size=16, unroll_steps=20, optimizer="adam", lr=0.02, dropout=0.0, sampled=False,
                             max_steps=300, threads=1, progress=False, log_every=50)
    train(settings)
    model, vocab, _ = load_run(settings.out)
    result = perplexity(model, vocab, [str(valid_txt)], mode="sentence")

    counts = Counter(i for line in train_lines for i in vocab.encode(line.split() + ["</S>"]))
    total = sum(counts.values())
    targets = [i for line in held_out for i in vocab.encode(line.split() + ["</S>"])]
    unigram = math.exp(-sum(math.log((counts[i] + 1) / (total + len(vocab))) for i in targets) / len(targets))
    assert result["tokens"] == len(targets) and unigram > 40
    assert result["forward"] < 0.3 * unigram and result["backward"] < 0.3 * unigram, (result, unigram)


@pytest.mark.slow  # kill and resume
def test_sigkill_and_resume_equals_uninterrupted(tmp_path, fixture_run):
    _, _, flags = fixture_run
    steps = ["--max-steps", "40", "--checkpoint-every", "5", "--log-every", "5"]
    straight, broken = tmp_path / "straight", tmp_path / "broken"
    assert cli_main(["train", *flags, *steps, "--out", str(straight)]) == 0

    proc = subprocess.Popen([str(ELMO), "train", *flags, *steps, "--out", str(broken)], env=subprocess_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        saved = list_checkpoints(broken)
        if saved and saved[-1][0] >= 10:
            break
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read().decode()
    killed_at = list_checkpoints(broken)[-1][0]
    assert 10 <= killed_at < 40

    assert cli_main(["train", "--out", str(broken), "--resume", "--threads", "1", "--no-progress"]) == 0
    a, b = load_checkpoint(latest_checkpoint(straight)), load_checkpoint(latest_checkpoint(broken))
    assert a["step"] == b["step"] == 40
    for name, value in a["model"].items():
        assert torch.equal(value, b["model"][name]), name
    for key, state in a["optimizer"]["state"].items():
        assert torch.equal(state["sum"], b["optimizer"]["state"][key]["sum"])
    records = [json.loads(line) for line in (broken / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == list(range(5, 41, 5))  # the killed run's extra records were dropped
    assert records == [dict(r, tok_s=records[i]["tok_s"], elapsed_s=records[i]["elapsed_s"])
                       for i, r in enumerate(json.loads(line) for line in (straight / "metrics.jsonl").read_text().splitlines())]


def _wait_for(condition, proc: subprocess.Popen, what: str, seconds: float = 120.0) -> None:
    deadline = time.time() + seconds
    while not condition():
        assert proc.poll() is None, f"training exited ({proc.returncode}) before {what}: {proc.stderr.read().decode()}"
        assert time.time() < deadline, f"no {what} within {seconds:.0f} s"
        time.sleep(0.02)


@pytest.mark.slow  # signals a training process
def test_sigusr1_saves_and_goes_on_sigterm_saves_and_stops(tmp_path, fixture_run):
    """A scheduler's SIGTERM (or torchrun's, forwarded on shutdown) must not lose the steps since the
    last checkpoint; SIGUSR1 takes a checkpoint on demand. Only the signals save here."""
    _, _, flags = fixture_run
    run = tmp_path / "signalled"
    rare = ["--max-steps", "100000", "--checkpoint-every", "100000", "--checkpoint-minutes", "600", "--log-every", "1"]
    proc = subprocess.Popen([str(ELMO), "train", *flags, *rare, "--out", str(run)], env=subprocess_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        metrics = run / "metrics.jsonl"
        _wait_for(lambda: metrics.exists() and len(metrics.read_text().splitlines()) >= 3, proc, "third logged step")
        proc.send_signal(signal.SIGUSR1)
        _wait_for(lambda: list_checkpoints(run), proc, "checkpoint after SIGUSR1")
        saved_at = list_checkpoints(run)[0][0]
        _wait_for(lambda: json.loads(metrics.read_text().splitlines()[-1])["step"] > saved_at + 2, proc,
                  "step after the SIGUSR1 checkpoint")
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 0, err.decode()
    stopped_at = json.loads(metrics.read_text().splitlines()[-1])["step"]
    assert [step for step, _ in list_checkpoints(run)] == [saved_at, stopped_at]
    assert stopped_at > saved_at + 2
    assert f"stopped by SIGTERM at step {stopped_at}" in err.decode() and "--resume" in err.decode()
    assert cli_main(["train", "--out", str(run), "--resume", "--max-steps", str(stopped_at + 2), "--threads", "1",
                     "--no-progress"]) == 0
    assert load_checkpoint(latest_checkpoint(run))["step"] == stopped_at + 2


def test_signals_in_process_save_and_stop_and_the_handlers_come_back(tmp_path, fixture_run, monkeypatch):
    """SIGUSR1 after step 1 saves at step 2, SIGTERM after step 3 saves and stops at step 4; without the
    trainer's handlers the signals would reach the ones set here and the run would go on to step 10."""
    data, vocab, _ = fixture_run
    reached = []
    original = {sig: signal.signal(sig, lambda signum, frame: reached.append(signum)) for sig in (signal.SIGTERM, signal.SIGUSR1)}
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGUSR1)
    step = trainer.train_step

    def signalling_step(state, *args):
        done = step(state, *args)
        if state.step in (1, 3):
            signal.raise_signal(signal.SIGUSR1 if state.step == 1 else signal.SIGTERM)
        return done

    monkeypatch.setattr(trainer, "train_step", signalling_step)
    try:
        run = tmp_path / "run"
        summary = train(TrainSettings(out=str(run), train=[str(data)], vocab=str(vocab), options=MICRO_RUN, batch_size=6,
                                      unroll_steps=8, negatives=16, threads=1, progress=False, seed=5, max_steps=10,
                                      checkpoint_every=100, checkpoint_minutes=600.0))
        after = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGUSR1)
    finally:
        for sig, handler in original.items():
            signal.signal(sig, handler)
    assert reached == []  # the trainer's handlers took both
    assert summary["stopped_by"] == "SIGTERM" and summary["step"] == 4
    assert [s for s, _ in list_checkpoints(run)] == [2, 4]
    assert after == before


@pytest.mark.slow  # resume
@pytest.mark.parametrize("batching", ["sentence", "stream", "ordered"])
def test_resume_equals_uninterrupted_for_each_batching(tmp_path, fixture_run, batching):
    _, _, flags = fixture_run
    flags = [*flags, "--batching", batching, "--log-every", "3"]
    straight, split = tmp_path / "straight", tmp_path / "split"
    assert cli_main(["train", *flags, "--max-steps", "12", "--out", str(straight)]) == 0
    assert cli_main(["train", *flags, "--max-steps", "5", "--out", str(split)]) == 0
    assert cli_main(["train", "--out", str(split), "--resume", "--max-steps", "12", "--threads", "1", "--no-progress"]) == 0
    a, b = load_checkpoint(latest_checkpoint(straight)), load_checkpoint(latest_checkpoint(split))
    assert a["step"] == b["step"] == 12 and a["tokens"] == b["tokens"]
    for name, value in a["model"].items():
        assert torch.equal(value, b["model"][name]), name


@pytest.mark.slow
def test_default_recipe_works_from_zero_state_in_both_directions(tmp_path):
    """The README's recipe at a small scale (wiki text, `--preset tiny`, default flags): both LMs
    score held-out sentences from zero state far below a uniform guess, and close to each other.

    With bilm-tf's stream batching instead, this run's backward LM scored millions: a model trained
    only on carried state never saw a sentence start from zero state (docs/training.md).
    """
    wiki = need(DATA / "wiki_corpus" / "train.txt.gz")
    valid = need(DATA / "wiki_corpus" / "valid.txt")
    train_txt, valid_txt, vocab_file = tmp_path / "train.txt", tmp_path / "valid.txt", tmp_path / "vocab.txt"
    with gzip.open(wiki, "rt", encoding="utf-8") as f:
        train_txt.write_text("".join(itertools.islice(f, 3000)), encoding="utf-8")
    with open(valid, encoding="utf-8") as f:
        valid_txt.write_text("".join(itertools.islice(f, 300)), encoding="utf-8")
    assert cli_main(["vocab", str(train_txt), "-o", str(vocab_file)]) == 0
    run = tmp_path / "run"
    assert cli_main(["train", "--train", str(train_txt), "--vocab", str(vocab_file), "--preset", "tiny", "--out", str(run),
                     "--batch-size", "32", "--max-steps", "150", "--threads", "2", "--no-progress"]) == 0
    model, vocab, _ = load_run(run)
    result = perplexity(model, vocab, [str(valid_txt)], mode="sentence")
    assert result["forward"] < len(vocab) / 5 and result["backward"] < len(vocab) / 5, (result, len(vocab))
    assert 0.5 < result["forward"] / result["backward"] < 2.0, result


@pytest.mark.slow  # resume
def test_max_minutes_stops_with_a_checkpoint_and_resume_continues(tmp_path, fixture_run):
    _, _, flags = fixture_run
    run = tmp_path / "timed"
    assert cli_main(["train", *flags, "--max-steps", "30", "--max-minutes", "0", "--out", str(run)]) == 0
    assert [step for step, _ in list_checkpoints(run)] == [1]  # out of time after the first update, saved
    assert cli_main(["train", "--out", str(run), "--resume", "--threads", "1", "--no-progress"]) == 0
    assert load_checkpoint(latest_checkpoint(run))["step"] == 30


@pytest.mark.slow  # end-to-end training
def test_train_export_embed_round_trip(tmp_path, fixture_run):
    data, _, flags = fixture_run
    run, model_dir = tmp_path / "run", tmp_path / "model"
    assert cli_main(["train", *flags, "--max-steps", "4", "--out", str(run)]) == 0
    assert cli_main(["export", str(run), "-o", str(model_dir)]) == 0

    options = json.loads((model_dir / "options.json").read_text())
    assert set(options) == {"lstm", "char_cnn"} and options["char_cnn"]["n_characters"] == 262
    lm, vocab, _ = load_run(run)
    with h5py.File(model_dir / "weights.hdf5", "r") as f:
        names = set()
        f.visititems(lambda name, obj: names.add(name) if isinstance(obj, h5py.Dataset) else None)
        expected = dataset_map(lm.bilm)
        assert names == set(expected) and f["char_embed"].shape == (261, 4)
        for name, (param, shape) in expected.items():
            assert f[name].dtype == np.float32
            np.testing.assert_array_equal(f[name][...], param.detach().numpy().reshape(shape))
    with h5py.File(model_dir / "softmax.hdf5", "r") as f:
        np.testing.assert_array_equal(f["W"][...], lm.softmax.W.detach().numpy())
        assert f["b"].shape == (len(vocab),)
    assert (model_dir / "vocab.txt").read_text() == (run / "vocab.txt").read_text()

    sentences = [line.split() for line in data.read_text().splitlines()[:4]]
    text = tmp_path / "in.txt"
    text.write_text("\n".join(" ".join(s) for s in sentences) + "\n")
    out = tmp_path / "out.hdf5"
    assert cli_main(["embed", str(text), str(out), "--model", str(model_dir)]) == 0
    direct = load_bilm(model_dir / "options.json", model_dir / "weights.hdf5")
    with torch.no_grad():
        reference = lm.bilm(batch_to_ids(sentences))
    with h5py.File(out, "r") as f:
        for i, sentence in enumerate(sentences):
            layers = torch.stack([layer[i, 1 : 1 + len(sentence)] for layer in reference.layers])
            np.testing.assert_allclose(f[str(i)][...], layers.numpy(), rtol=1e-5, atol=1e-5)
    assert direct.config.projection_dim == 16

    # fine-tuning starts from exactly the exported weights and softmax; another vocabulary gets the rows by word
    # (tests/test_finetune.py), and is refused only where the model has no vocab.txt to match them by
    info = json.loads((run / "run.json").read_text())
    options = json.loads((run / "options.json").read_text())
    start, _ = _build_model(options, vocab, RunConfig.from_json(dict(info, init_from=str(model_dir))), rank=0)
    for name, value in lm.state_dict().items():
        assert torch.equal(start.state_dict()[name], value), name
    tuned = tmp_path / "tuned"
    assert cli_main(["train", "--init-from", str(model_dir), "--vocab", str(model_dir / "vocab.txt"), "--train", str(data),
                     "--out", str(tuned), "--max-steps", "2", "--threads", "1", "--no-progress"]) == 0
    assert json.loads((tuned / "options.json").read_text())["lstm"] == options["lstm"]
    other_vocab = tmp_path / "other.txt"
    other_vocab.write_text("<S>\n</S>\n<UNK>\nthe\n")
    no_vocab = tmp_path / "no-vocab"
    shutil.copytree(model_dir, no_vocab)
    (no_vocab / "vocab.txt").unlink()
    with pytest.raises(ModelFileError, match=r"softmax.hdf5: W has shape \(80, 16\) .* expected \(4, 16\)"):
        train(TrainSettings(out=str(tmp_path / "bad"), init_from=str(no_vocab), vocab=str(other_vocab),
                            train=[str(data)], max_steps=1, sampled=False, progress=False))


def test_float16_export_reads_back_as_the_rounded_float32_weights(tmp_path, fixture_run):
    _, _, flags = fixture_run
    run, model_dir = tmp_path / "run", tmp_path / "models" / "model16"  # models/ does not exist yet: made
    assert cli_main(["train", *flags, "--max-steps", "2", "--out", str(run)]) == 0
    assert cli_main(["export", str(run), "-o", str(model_dir), "--float16"]) == 0
    lm, _, _ = load_run(run)
    with h5py.File(model_dir / "weights.hdf5", "r") as f:
        assert {f[name].dtype for name in dataset_map(lm.bilm)} == {np.dtype(np.float16)}
    loaded = load_bilm(model_dir / "options.json", model_dir / "weights.hdf5")
    for name, value in loaded.state_dict().items():
        assert value.dtype == torch.float32, name
        rounded = lm.bilm.state_dict()[name].to(torch.float16).to(torch.float32)
        if name == "char_encoder.char_embed" and value.shape[0] == rounded.shape[0] + 1:
            value = value[1:]  # the inference table's zero row
        assert torch.equal(value, rounded), name
    with h5py.File(model_dir / "softmax.hdf5", "r") as f:
        assert f["W"].dtype == np.float16


def test_perplexity_cli_json(tmp_path, fixture_run, capsys):
    data, _, flags = fixture_run
    run, model_dir = tmp_path / "run", tmp_path / "model"
    assert cli_main(["train", *flags, "--max-steps", "3", "--out", str(run)]) == 0
    assert cli_main(["export", str(run), "-o", str(model_dir)]) == 0
    capsys.readouterr()
    assert cli_main(["perplexity", str(model_dir), "--test", str(data), "--json", "--mode", "sentence"]) == 0
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    assert "perplexity" in captured.err and "tok" in captured.err  # progress on stderr, even with --json
    direct = perplexity(*load_run(run)[:2], [str(data)], mode="sentence")
    assert set(result) >= {"forward", "backward", "average", "tokens"}
    assert result["tokens"] == 134 + len(data.read_text().splitlines())  # words + one </S> per sentence
    for key in ("forward", "backward", "average"):
        assert result[key] == pytest.approx(direct[key], rel=1e-9)
    assert result["average"] == pytest.approx(math.sqrt(result["forward"] * result["backward"]), rel=1e-9)


def _concat(a: Batch, b: Batch) -> Batch:
    """Rows of `a` then rows of `b`, as one batch (b's token indices shifted past a's)."""
    shift = a.char_ids.shape[0]

    def bump(x: torch.Tensor) -> torch.Tensor:
        return torch.where(x > 0, x + shift, x)

    return Batch(torch.cat([a.char_ids, b.char_ids]), torch.cat([a.fwd_inputs, bump(b.fwd_inputs)]),
                 torch.cat([a.bwd_inputs, bump(b.bwd_inputs)]), torch.cat([a.fwd_targets, b.fwd_targets]),
                 torch.cat([a.bwd_targets, b.bwd_targets]), torch.cat([a.mask, b.mask]), torch.cat([a.lengths, b.lengths]))


def _two_ranks(tmp_path, fixture_run, *extra):
    """`elmo train` as 2 torchrun ranks of 3 rows for 4 steps, no dropout: (run dir, its metrics records,
    options, run.json as a RunConfig, vocabulary), with torch set up for a one-process reference (1 thread, the run's seed)."""
    _, _, flags = fixture_run
    run = tmp_path / "ddp"
    torchrun = Path(sys.executable).parent / "torchrun"
    command = [str(torchrun), "--standalone", "--nproc_per_node=2", str(ELMO), "train", *flags, "--out", str(run),
               "--batch-size", "3", "--dropout", "0", "--max-steps", "4", "--log-every", "1", *extra]
    done = subprocess.run(command, env=subprocess_env(), capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    logged = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    info = RunConfig.from_json(json.loads((run / "run.json").read_text()))
    torch.set_num_threads(1)
    torch.manual_seed(info.seed)
    return run, logged, json.loads((run / "options.json").read_text()), info, Vocab.load(run / "vocab.txt")


@pytest.mark.slow  # torchrun
@pytest.mark.skipif(not shutil.which("torchrun", path=str(Path(sys.executable).parent)), reason="needs torchrun")
def test_torchrun_two_processes_match_one_process(tmp_path, fixture_run):
    """2 gloo ranks x 3 rows == 1 process on the same 6 rows (rank r's rows come from its shard)."""
    run, logged, options, info, vocab = _two_ranks(tmp_path, fixture_run, "--full-softmax", "--batching", "stream")
    model, _ = _build_model(options, vocab, info, rank=0)
    optimizer = _make_optimizer(model, options, info)
    files = expand_corpus(list(info.train))
    batchers = [StreamBatcher(SentenceSource(files, seed=info.seed, shard=(r, 2), chunk_lines=info.chunk_lines),
                              vocab, 3, options["unroll_steps"]) for r in (0, 1)]
    model.train()
    states = None
    for record in logged:
        batch = _concat(*(b.next_batch() for b in batchers))
        nll_f, nll_b, new_states = model(batch, states)
        loss = 0.5 * (nll_f.mean() + nll_b.mean())
        assert record["loss"] == pytest.approx(loss.item(), rel=1e-5, abs=1e-6)
        (loss * options["unroll_steps"]).backward()
        torch.nn.utils.clip_grad_norm_(list(model.parameters()), options["all_clip_norm_val"])
        optimizer.step()
        optimizer.zero_grad()
        states = detach_states(new_states)
    saved = load_checkpoint(latest_checkpoint(run))["model"]
    for name, value in model.state_dict().items():
        torch.testing.assert_close(saved[name], value, rtol=1e-4, atol=1e-5)


@pytest.mark.slow  # torchrun
@pytest.mark.skipif(not shutil.which("torchrun", path=str(Path(sys.executable).parent)), reason="needs torchrun")
def test_torchrun_sampled_softmax_with_sparse_gradients_matches_one_process(tmp_path, fixture_run):
    """2 gloo ranks with the sampled softmax, each its own negatives and sentences, the softmax's sparse
    gradient all-reduced by DDP == one process averaging the two ranks' losses, with the dense gradient."""
    run, logged, options, info, vocab = _two_ranks(tmp_path, fixture_run, "--batching", "sentence")
    model, _ = _build_model(options, vocab, info, rank=0)
    assert not model.softmax.sparse_grad  # the reference: dense gradients
    optimizer = _make_optimizer(model, options, info)
    samplers = [_build_model(options, vocab, info, rank=r)[0].sampler for r in (0, 1)]  # each rank's negatives
    files = expand_corpus(list(info.train))
    batchers = [make_batcher("sentence", files, vocab, 3, options["unroll_steps"], seed=info.seed, shard=(r, 2),
                             chunk_lines=info.chunk_lines) for r in (0, 1)]
    model.train()
    params = list(model.parameters())
    for record in logged:
        objective, shown = 0.0, 0.0
        for sampler, batcher in zip(samplers, batchers):
            model.sampler = sampler
            nll_f, nll_b, _ = model(batcher.next_batch(), None, streaming=False)
            objective = objective + 0.5 * (0.5 * (nll_f.mean() + nll_b.mean()))  # DDP averages the ranks' gradients
            shown += 0.5 * (0.5 * (nll_f.mean() + nll_b.mean())).item()
        assert record["loss"] == pytest.approx(shown, rel=1e-5, abs=1e-6)
        (objective * options["unroll_steps"]).backward()
        torch.nn.utils.clip_grad_norm_(params, options["all_clip_norm_val"])
        optimizer.step()
        optimizer.zero_grad()
    saved = load_checkpoint(latest_checkpoint(run))["model"]
    for name, value in model.state_dict().items():
        torch.testing.assert_close(saved[name], value, rtol=1e-4, atol=1e-5)


def test_frozen_parameters_stay_fixed_and_survive_resume(tmp_path, fixture_run):
    _, _, flags = fixture_run
    run = tmp_path / "frozen"
    frozen = ["--freeze", "bilm.char_encoder.*", "bilm.forward_lstm.layers.1.W_P_0"]
    assert cli_main(["train", *flags, *frozen, "--max-steps", "2", "--checkpoint-every", "1", "--keep-checkpoints", "5",
                     "--out", str(run)]) == 0
    assert cli_main(["train", "--out", str(run), "--resume", "--max-steps", "4", "--threads", "1", "--no-progress"]) == 0
    (_, first), *_, (_, last) = list_checkpoints(run)
    before, after = load_checkpoint(first)["model"], load_checkpoint(last)["model"]
    fixed = {n for n in before if n.startswith("bilm.char_encoder.") or n == "bilm.forward_lstm.layers.1.W_P_0"}
    assert len(fixed) > 5
    assert all(torch.equal(before[n], after[n]) for n in fixed)
    assert all(not torch.equal(before[n], after[n]) for n in before if n not in fixed and "lstm" in n)
    assert json.loads((run / "run.json").read_text())["freeze"] == frozen[1:]


def test_freeze_pattern_that_matches_nothing_is_refused(tmp_path, fixture_run, capsys):
    _, _, flags = fixture_run
    assert cli_main(["train", *flags, "--freeze", "bilm.cnn.*", "--max-steps", "1", "--out", str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err
    assert "--freeze 'bilm.cnn.*' matches no parameter; the names are: bilm.char_encoder.char_embed" in err
