"""The training state as types: run.json's RunConfig, the TrainingState a checkpoint keeps, and the one step."""

from __future__ import annotations

import json
from dataclasses import fields, replace

import pytest
import torch
from conftest import BILM_TF, MICRO, need

from elmo.cli import main as cli_main
from elmo.errors import InputError
from elmo.formats.lm_vocab import Vocab
from elmo.model.options import BiLMConfig
from elmo.training import TrainingError
from elmo.training.batchers import StreamBatcher
from elmo.training.checkpoint import CHECKPOINT_FIELDS, load_checkpoint, save_checkpoint
from elmo.training.corpus import SentenceSource
from elmo.training.model import LanguageModel
from elmo.training.settings import RUN_KEYS, RunConfig, read_run_file
from elmo.training.softmax import LogUniformSampler
from elmo.training.state import TrainingState
from elmo.training.trainer import StepRecipe, train_step

# run.json as `elmo train` wrote it before RunConfig existed (the order of its keys included)
STORED = {"optimizer": "sgd", "batching": "stream", "seed": 3, "first_layer_dropout": False, "freeze": ["bilm.*.W_P_0"],
          "objective": "sum", "weight_init": "kim", "reset_rate": 0.0, "train": ["a.txt", "b.txt"], "init_from": None,
          "chunk_lines": 1000, "max_steps": 7, "control": {"checkpoint_every": 1250, "checkpoint_minutes": 30.0,
                                                           "keep_checkpoints": 2, "log_every": 10}, "world_size": 2}


def test_run_json_is_written_as_before_and_older_files_read_with_the_defaults(tmp_path):
    config = RunConfig.from_json(STORED)
    assert json.dumps(config.to_json(2), indent=2) == json.dumps(STORED, indent=2)  # byte for byte
    assert [f.name for f in fields(RunConfig)][: len(RUN_KEYS)] == list(RUN_KEYS)
    older = {k: v for k, v in STORED.items() if k not in ("batching", "objective", "weight_init", "reset_rate")}
    assert RunConfig.from_json(older) == replace(config, batching="sentence", objective="mean", weight_init="bilm-tf")
    with pytest.raises(AttributeError):
        config.seed = 4  # frozen: read once, passed on unchanged
    path = tmp_path / "run.json"
    path.write_text(json.dumps(dict(STORED, seed=None)))
    with pytest.raises(InputError, match=r"run.json: 'seed' must be int, found None"):
        read_run_file(path)


@pytest.fixture
def corpus(tmp_path):
    data = need(BILM_TF / "train" / "data.txt")
    vocab = tmp_path / "vocab.txt"
    assert cli_main(["vocab", str(data), "-o", str(vocab)]) == 0
    return data, Vocab.load(vocab)


def _state(corpus, seed: int) -> tuple[TrainingState, StepRecipe]:
    """A micro LM with dropout, sampled softmax and a streaming batcher: every part a checkpoint keeps matters."""
    data, vocab = corpus
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed + 1)
    model = LanguageModel(BiLMConfig.from_options(MICRO), len(vocab), dropout=0.1,
                          sampler=LogUniformSampler(len(vocab), 4, generator))
    optimizer = torch.optim.Adagrad(model.parameters(), lr=0.2, initial_accumulator_value=1.0)
    batcher = StreamBatcher(SentenceSource([str(data)], seed=0, shuffle=True, loop=True), vocab, 3, 5)  # the run's order
    state = TrainingState(model, optimizer, batcher, generator, torch.device("cpu"))
    return state, StepRecipe(model, list(model.parameters()), unroll=5, clip_norm=1.0)


def test_a_state_read_back_goes_on_as_the_one_that_was_saved(tmp_path, corpus, keep_threads):
    torch.set_num_threads(1)
    saved, recipe = _state(corpus, seed=0)
    for _ in range(2):
        train_step(saved, saved.batcher.next_batch(), recipe)
    content = saved.state_dict()
    assert set(content) == set(CHECKPOINT_FIELDS)  # what it writes is what load_checkpoint checks
    path = save_checkpoint(content, tmp_path, saved.step, keep=1)
    train_step(saved, saved.batcher.next_batch(), recipe)
    resumed, recipe = _state(corpus, seed=7)  # other weights, data position and generator, until it loads
    resumed.load_state_dict(load_checkpoint(path), path)
    assert (resumed.step, resumed.tokens, resumed.last_checkpoint) == (2, content["tokens"], path)
    train_step(resumed, resumed.batcher.next_batch(), recipe)
    assert resumed.step == saved.step == 3 and resumed.tokens == saved.tokens
    for name, value in saved.model.state_dict().items():
        assert torch.equal(resumed.model.state_dict()[name], value), name
    for (c, h), (c2, h2) in zip(saved.states[0] + saved.states[1], resumed.states[0] + resumed.states[1]):
        assert torch.equal(c, c2) and torch.equal(h, h2)


def test_a_loss_that_is_not_finite_stops_the_step_with_its_values_and_nothing_applied(corpus):
    state, recipe = _state(corpus, seed=0)
    with torch.no_grad():
        state.model.softmax.b.fill_(float("nan"))
    weights = state.model.softmax.W.detach().clone()
    with pytest.raises(TrainingError, match=r"^step 1: the loss is not finite \(forward nan, backward nan\); "
                                            r"training stopped .* no checkpoint had been written yet"):
        train_step(state, state.batcher.next_batch(), recipe)
    assert state.step == 0 and state.tokens == 0 and torch.equal(state.model.softmax.W, weights)
