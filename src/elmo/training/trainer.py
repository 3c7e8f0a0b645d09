"""`elmo train`: bilm-tf's recipe (docs/format.md section 7) as a plain torch loop, resumable bit for bit.

A run directory holds options.json (the architecture plus bilm-tf's training keys, as bilm-tf
writes it), run.json (our settings), vocab.txt, metrics.jsonl and checkpoints/. A checkpoint holds
the weights, the optimizer, the step, and per rank the data position, the LSTM states and the RNG
states, so a resumed run computes exactly what the uninterrupted one would have.
SIGTERM (a scheduler's preemption; torchrun forwards it) saves a checkpoint and stops after the
current step; SIGUSR1 saves one and goes on. What a checkpoint holds is state.TrainingState; each
update is `train_step` (what benchmarks/speed.py times). A fine-tune (`--init-from`) starts from
another model and may begin with a softmax-only phase (finetune.py); `--valid` scores held-out text
between steps (heldout.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import json
import math
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from elmo.files.fileio import atomic_path
from elmo.files.layout import CHECKPOINT_DIR, METRICS_FILE, OPTIONS_NAME, RUN_FILE, VOCAB_NAME
from elmo.files.output_paths import check_not_input
from elmo.formats.lm_vocab import Vocab, write_vocab
from elmo.model.allocator import keep_freed_memory
from elmo.model.devices import cpu_has_bf16
from elmo.model.options import BiLMConfig, write_options
from elmo.training.settings import OBJECTIVES, RunConfig, TrainSettings, check, fresh_run, resumed_run, total_steps
from elmo.training.vocab import check_frequency_order

from . import distributed, finetune
from .batchers import Batch, make_batcher
from .checkpoint import latest_checkpoint, list_checkpoints, load_checkpoint
from .corpus import expand_corpus, head_counts
from .heldout import HeldOut
from .model import LanguageModel, detach_states, new_language_model
from .progress import Progress, truncate_metrics
from .softmax import LogUniformSampler
from .state import TrainingState

__all__ = ["TrainSettings", "train"]


def _build_model(options: dict, vocab: Vocab, run: RunConfig, rank: int, init: bool = True) -> tuple[LanguageModel, torch.Generator]:
    """The LM with fresh weights (bilm-tf's or Kim et al.'s draw), or `--init-from`'s, when `init`
    (a resumed run loads its checkpoint instead)."""
    config = BiLMConfig.from_options(options)
    generator = torch.Generator().manual_seed(run.seed * 7919 + 17 + rank)
    sampler = None
    if options["sample_softmax"] and options["n_negative_samples_batch"] < len(vocab):
        sampler = LogUniformSampler(len(vocab), options["n_negative_samples_batch"], generator)
    model = new_language_model(config, len(vocab), run.weight_init if init else "bilm-tf", dropout=options["dropout"],
                               sampler=sampler, first_layer_dropout=run.first_layer_dropout)
    if init and run.init_from:
        finetune.load_start(run.init_from, model, vocab)
    return model, generator


def _model_options(model: str) -> finetune.StartModel:
    return finetune.describe_start(model)


def freeze_parameters(model: torch.nn.Module, patterns: list[str]) -> list[str]:
    """Keep the parameters whose names match a glob (e.g. `bilm.char_encoder.*`) fixed; -> their names."""
    names = [name for name, _ in model.named_parameters()]
    frozen = []
    for pattern in patterns:
        matches = fnmatch.filter(names, pattern)
        check(bool(matches), f"--freeze {pattern!r} matches no parameter; the names are: {', '.join(names)}")
        frozen += [name for name in matches if name not in frozen]
    for name, p in model.named_parameters():
        if name in frozen:
            p.requires_grad_(False)
    return frozen


def _make_optimizer(model: torch.nn.Module, options: dict, run: RunConfig) -> torch.optim.Optimizer:
    params = finetune.optimizer_groups(model, run)
    if run.optimizer == "adam":
        return torch.optim.Adam(params, lr=options["learning_rate"])
    if run.optimizer == "sgd":
        return torch.optim.SGD(params, lr=options["learning_rate"])
    return torch.optim.Adagrad(params, lr=options["learning_rate"], initial_accumulator_value=1.0)


def train(s: TrainSettings) -> dict:
    """Run (or resume) training; returns a summary. Under torchrun every rank calls this."""
    rank, world, device = distributed.setup(s.device)
    try:
        return _train(s, rank, world, device)
    finally:
        distributed.teardown()


def _open_run(s: TrainSettings, rank: int, world: int) -> tuple[dict, RunConfig, Vocab, dict | None]:
    """Options, run settings, vocabulary and (with --resume) the checkpoint; a fresh run writes its files."""
    out = Path(s.out)
    checkpoint = None
    if s.resume:
        path = latest_checkpoint(out)
        check(path is not None, f"{out}: --resume found no checkpoint in {out / CHECKPOINT_DIR}")
        options, run, vocab = resumed_run(s, out)
        checkpoint = dict(load_checkpoint(path), path=str(path))
        check(checkpoint["world_size"] == world,
               f"{path}: saved by {checkpoint['world_size']} processes, resumed with {world}; use the same number")
    else:
        check(not list_checkpoints(out), f"{out}: already holds a training run; pass --resume to continue it, or choose another --out")
        check_not_input(out, {"--train": s.train, "--vocab": s.vocab, "--init-from": s.init_from}, "--out", folder=True)
        options, run, vocab = fresh_run(s, _model_options)
    if rank == 0 and checkpoint is None:
        out.mkdir(parents=True, exist_ok=True)
        (out / METRICS_FILE).unlink(missing_ok=True)  # a run that died before its first checkpoint
        write_options(options, out / OPTIONS_NAME)
        write_vocab(vocab.tokens, out / VOCAB_NAME)
        with atomic_path(out / RUN_FILE) as tmp, open(tmp, "w", encoding="utf-8") as f:
            json.dump(run.to_json(world), f, indent=2)
    return options, run, vocab, checkpoint


def apply_gradients(loss_f: torch.Tensor, loss_b: torch.Tensor, unroll: int, params: list, clip_norm: float,
                    optimizer: torch.optim.Optimizer, objective: str = "mean") -> torch.Tensor:
    """One update; returns the gradient norm before clipping (not finite: nothing is applied)."""
    w_f, w_b = OBJECTIVES[objective]
    # bilm-tf differentiates unroll_steps * the mean loss: the sum over time of the batch mean.
    ((w_f * loss_f + w_b * loss_b) * unroll).backward()
    distributed.average_sparse_gradients(params)
    norm = clip_gradients(params, clip_norm)
    if torch.isfinite(norm):
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return norm


def clip_gradients(params: list, max_norm: float) -> torch.Tensor:
    """torch's `clip_grad_norm_` (one global L2 norm, scaled down to `max_norm`), also over sparse
    gradients (`Softmax.sparse_grad`), which are coalesced first so that a row read twice counts once."""
    grads = []
    for p in params:
        if p.grad is not None:
            if p.grad.is_sparse:
                p.grad = p.grad.coalesce()
            grads.append(p.grad.values() if p.grad.is_sparse else p.grad)  # values(): a view of the coalesced grad
    if not grads:
        return torch.zeros(())
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    scale = (max_norm / (norm + 1e-6)).clamp(max=1.0)
    for g in grads:
        g.mul_(scale)
    return norm


@dataclass(frozen=True)
class StepRecipe:
    """How each update of a run is computed; `elmo train` and benchmarks/speed.py run the same `train_step`."""

    trained: torch.nn.Module  # the model, or its DistributedDataParallel wrapper
    params: list  # those the optimizer updates
    unroll: int
    clip_norm: float
    objective: str = "mean"  # settings.OBJECTIVES
    streaming: bool = True  # the LSTM state carries to the next window
    autocast: Any = field(default_factory=contextlib.nullcontext)


@dataclass(frozen=True)
class StepResult:
    """What the loop logs and decides after a step."""

    loss_f: float  # the forward LM's mean loss on this batch, averaged over the ranks
    loss_b: float
    norm: torch.Tensor  # the gradient norm before clipping
    save: bool  # rank 0's decisions, the same on every rank: checkpoint after this step,
    stop: bool  # and stop after it


def train_step(state: TrainingState, batch: Batch, recipe: StepRecipe, save: bool = False, stop: bool = False) -> StepResult:
    """One update, as `elmo train` runs it (benchmarks/speed.py times this): forward, the losses averaged
    over the ranks (rank 0's `save` and `stop` shared in the same all-reduce), backward of the
    objective, clipping, the optimizer step. A loss or gradient norm that is not finite stops training
    (TrainingError, nothing applied); otherwise `state` moves on by one step."""
    with recipe.autocast:
        nll_f, nll_b, new_states = recipe.trained(batch, state.states, recipe.streaming)
    loss_f, loss_b = nll_f.mean(), nll_b.mean()
    mean_f, mean_b, save, stop = _agree(loss_f, loss_b, save, stop, state.world)
    if not (math.isfinite(mean_f) and math.isfinite(mean_b)):
        raise state.not_finite(state.step + 1, f"the loss is not finite (forward {mean_f}, backward {mean_b})")
    norm = apply_gradients(loss_f, loss_b, recipe.unroll, recipe.params, recipe.clip_norm, state.optimizer, recipe.objective)
    if not torch.isfinite(norm):
        raise state.not_finite(state.step + 1, f"the gradient norm is not finite ({float(norm)}; losses: "
                                               f"forward {mean_f}, backward {mean_b})")
    state.states = detach_states(new_states) if recipe.streaming else None
    state.step += 1
    state.tokens += batch.n_tokens * state.world
    return StepResult(mean_f, mean_b, norm, save, stop)


def _prepare_process(s: TrainSettings, device: torch.device) -> None:
    if s.threads is not None:
        check(s.threads > 0, f"--threads must be positive, found {s.threads}")
        torch.set_num_threads(s.threads)
    check(not s.bf16 or device.type == "cuda" or cpu_has_bf16(),
          "--bf16 needs a GPU (--device cuda) or a CPU with native bfloat16 (AVX512-BF16 or AMX); this CPU has neither")
    if device.type == "cpu":
        keep_freed_memory()


def _model_and_optimizer(options: dict, vocab: Vocab, run: RunConfig, rank: int, device: torch.device,
                         init: bool) -> tuple[LanguageModel, torch.Generator, torch.optim.Optimizer]:
    """The model on its device (frozen parameters fixed, sparse softmax gradients where they pay) and its optimizer."""
    torch.manual_seed(run.seed)
    model, generator = _build_model(options, vocab, run, rank, init=init)
    freeze_parameters(model, list(run.freeze))
    model.to(device)
    # The sampled softmax reads a few rows: Adagrad and SGD then update only those (Adam has no sparse update).
    model.softmax.sparse_grad = model.sampler is not None and device.type == "cpu" and run.optimizer in ("adagrad", "sgd")
    if model.softmax.sparse_grad:
        torch.sparse.check_sparse_tensor_invariants.disable()  # the default, said explicitly: torch warns otherwise
    return model, generator, _make_optimizer(model, options, run)


def _initial_state(options: dict, vocab: Vocab, run: RunConfig, files: list[str], rank: int, world: int,
                   device: torch.device, fresh: bool) -> TrainingState:
    """The run at step 0 (a resumed run then loads its checkpoint into it); the RNG draws in this order."""
    model, generator, optimizer = _model_and_optimizer(options, vocab, run, rank, device, init=fresh)
    batcher = make_batcher(run.batching, files, vocab, options["batch_size"], options["unroll_steps"], seed=run.seed,
                           shard=(rank, world), chunk_lines=run.chunk_lines, reset_rate=run.reset_rate)
    torch.manual_seed(run.seed * 1_000_003 + rank)  # dropout differs per rank
    return TrainingState(model, optimizer, batcher, generator, device, rank, world)


def _train(s: TrainSettings, rank: int, world: int, device: torch.device) -> dict:
    _prepare_process(s, device)
    options, run, vocab, checkpoint = _open_run(s, rank, world)
    files = expand_corpus(list(run.train))
    max_steps = total_steps(options, run, files, world)
    if checkpoint is None and options["sample_softmax"]:
        check_frequency_order(vocab, head_counts(files), where=f"the first 200,000 tokens of {files[0]}")
    finetune.check_phases(run, max_steps)
    state = _initial_state(options, vocab, run, files, rank, world, device, fresh=checkpoint is None)
    if checkpoint is not None:
        state.load_state_dict(checkpoint, Path(checkpoint["path"]), s.lr)
        if rank == 0:
            truncate_metrics(Path(s.out) / METRICS_FILE, state.step)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16) if s.bf16 else contextlib.nullcontext()
    recipe = StepRecipe(state.model, [], options["unroll_steps"], options["all_clip_norm_val"], run.objective,
                        run.streaming, autocast)
    tuning = _Tuning(run, state, HeldOut(run, vocab, Path(s.out) / METRICS_FILE) if run.valid and rank == 0 else None)
    state.model.train()
    return _loop(s, state, recipe, run, max_steps, tuning)


class _Tuning:
    """The phases of a fine-tune (what trains) and the held-out scorings, between the loop's steps."""

    def __init__(self, run: RunConfig, state: TrainingState, heldout: HeldOut | None):
        self.run, self.heldout, self.phase = run, heldout, None
        self.trainable = {name for name, p in state.model.named_parameters() if p.requires_grad}  # after --freeze

    def before_step(self, state: TrainingState, recipe: StepRecipe, progress: Progress) -> StepRecipe:
        """Switch phase where the step says (the trained parameters and the DDP wrapper follow); score if due."""
        if self.phase != finetune.phase_at(self.run, state.step):
            self.phase = finetune.apply_phase(state.model, state.optimizer, self.run, state.step, self.trainable)
            recipe = dataclasses.replace(recipe, trained=distributed.wrap(state.model, state.world),
                                         params=[p for p in state.model.parameters() if p.requires_grad])
        self.score(state, progress)
        return recipe

    def score(self, state: TrainingState, progress: Progress, final: bool = False) -> None:
        if self.heldout is not None and self.heldout.due(state.step, final):
            phase = "start" if state.step == 0 else finetune.phase_at(self.run, state.step - 1)
            self.heldout.score(state.model, state.step, state.tokens, state.elapsed(), phase, progress.append)

    @property
    def logged_phase(self) -> str | None:
        return self.phase if self.run.softmax_steps else None

    def summary(self) -> dict:
        found = self.heldout.summary() if self.heldout is not None else None
        return {"valid": found} if found else {}


def _loop(s: TrainSettings, state: TrainingState, recipe: StepRecipe, run: RunConfig, max_steps: int,
          tuning: _Tuning) -> dict:
    """Steps until `max_steps`, SIGTERM or --max-minutes, logging and saving as `run.control` says; -> the summary."""
    out, control, rank = Path(s.out), run.control, state.rank
    start = last_save = state.started = time.time()
    with contextlib.ExitStack() as cleanup:
        progress = Progress(out, rank, s.progress, max_steps, state.step, run.objective)
        cleanup.callback(progress.close)
        cleanup.callback(state.batcher.close)
        signals = cleanup.enter_context(_signal_requests())
        while state.step < max_steps:
            recipe = tuning.before_step(state, recipe, progress)
            batch = state.batcher.next_batch().to(state.device)
            now = time.time()
            asked_to_save, signals["save"] = signals["save"], False
            due = asked_to_save or (rank == 0 and now - last_save >= 60.0 * control.checkpoint_minutes)
            out_of_time = signals["stop"] or (rank == 0 and s.max_minutes is not None and now - start >= 60.0 * s.max_minutes)
            done = train_step(state, batch, recipe, due, out_of_time)
            step = state.step
            progress.add(done.loss_f, done.loss_b, batch.n_tokens * state.world)
            if step % control.log_every == 0 or step == max_steps or done.stop:
                progress.write(step, state.tokens, state.elapsed(), float(done.norm), state.optimizer.param_groups[0]["lr"],
                               tuning.logged_phase)
            progress.tick()
            if step % control.checkpoint_every == 0 or step == max_steps or done.save or done.stop:
                state.save(out, control.keep_checkpoints)
                last_save = time.time()
            if done.stop:
                break
        if state.step == max_steps:  # the run's end, not a stop on the way (its scorings match an uninterrupted run's)
            tuning.score(state, progress, final=True)
    last = state.last_checkpoint
    return dict(progress.summary, max_steps=max_steps, checkpoint=str(last) if last else None, run_dir=str(out),
                stopped_by="SIGTERM" if signals["stop"] else None, **tuning.summary())


@contextlib.contextmanager
def _signal_requests():
    """Flags set by SIGTERM ("stop") and SIGUSR1 ("save"), read once per step so that every rank
    saves and stops at the same step; the previous handlers come back afterwards. Signal handlers
    can only be set from the main thread; elsewhere (training called from a thread) nothing is caught."""
    requests = {"save": False, "stop": False}
    wanted = [signal.SIGTERM] + ([signal.SIGUSR1] if hasattr(signal, "SIGUSR1") else [])
    if threading.current_thread() is not threading.main_thread():
        yield requests
        return

    def handler(signum, frame):
        requests["stop" if signum == signal.SIGTERM else "save"] = True

    previous = {sig: signal.signal(sig, handler) for sig in wanted}
    try:
        yield requests
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _agree(loss_f: torch.Tensor, loss_b: torch.Tensor, due: bool, out_of_time: bool, world: int) -> tuple[float, float, bool, bool]:
    """Mean losses over ranks, and rank 0's clock decides for everyone, so all save and stop at the same step."""
    device = loss_f.device
    stats = distributed.all_sum(torch.stack([loss_f.detach().float(), loss_b.detach().float(),
                                             torch.tensor(float(due), device=device), torch.tensor(float(out_of_time), device=device)]))
    mean_f, mean_b = (stats[:2] / world).tolist()
    return mean_f, mean_b, stats[2].item() > 0, stats[3].item() > 0
