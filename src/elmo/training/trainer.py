"""`elmo train`: bilm-tf's recipe (docs/format.md section 7) as a plain torch loop, resumable bit for bit.

A run directory holds options.json (the architecture plus bilm-tf's training keys, as bilm-tf
writes it), run.json (our settings), vocab.txt, metrics.jsonl and checkpoints/. A checkpoint holds
the weights, the optimizer, the step, and per rank the data position, the LSTM states and the RNG
states, so a resumed run computes exactly what the uninterrupted one would have.
SIGTERM (a scheduler's preemption; torchrun forwards it) saves a checkpoint and stops after the
current step; SIGUSR1 saves one and goes on. What a checkpoint holds is state.TrainingState; each
update is `train_step` (what benchmarks/speed.py times).
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import math
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..allocator import keep_freed_memory
from ..devices import cpu_has_bf16
from ..fileio import atomic_path, check_not_input
from ..models import resolve
from ..options import OPTIONS_NAME, BiLMConfig, read_options, write_options
from ..weights import load_bilm
from . import distributed
from .checkpoint import latest_checkpoint, list_checkpoints, load_checkpoint
from .data import Batch, expand_corpus, head_counts, make_batcher
from .model import LanguageModel, detach_states, new_language_model
from .settings import (
    CHECKPOINT_DIR,
    METRICS_FILE,
    OBJECTIVES,
    RUN_FILE,
    RunConfig,
    TrainSettings,
    check,
    fresh_run,
    resumed_run,
    total_steps,
)
from .softmax import LogUniformSampler, load_softmax
from .state import TrainingState
from .vocab import VOCAB_NAME, Vocab, check_frequency_order, write_vocab

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
        files = resolve(run.init_from).original_files()
        state = load_bilm(files.options_file, files.weight_file).state_dict()
        table = state["char_encoder.char_embed"]
        if table.shape[0] == model.bilm.char_encoder.char_embed.shape[0] + 1:
            state["char_encoder.char_embed"] = table[1:]  # a file stored with the zero row first
        model.bilm.load_state_dict(state)
        if files.softmax_file is not None:
            model.softmax = load_softmax(files.softmax_file, len(vocab), config.projection_dim)
    return model, generator


def _model_options(model: str) -> dict:
    return read_options(resolve(model).original_files().options_file).to_options()


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
    params = [p for p in model.parameters() if p.requires_grad]
    if run.optimizer == "adam":
        return torch.optim.Adam(params, lr=options["learning_rate"])
    if run.optimizer == "sgd":
        return torch.optim.SGD(params, lr=options["learning_rate"])
    return torch.optim.Adagrad(params, lr=options["learning_rate"], initial_accumulator_value=1.0)


def _step_of(line: str) -> float:
    """The step of a metrics.jsonl record; a damaged line (a kill mid-write) counts as after any checkpoint."""
    try:
        record = json.loads(line)
        return record["step"] if isinstance(record, dict) and isinstance(record.get("step"), int) else math.inf
    except ValueError:
        return math.inf


def _truncate_metrics(path: Path, step: int) -> None:
    """On resume, drop log records written after the checkpoint by the interrupted run."""
    if not path.is_file():
        return
    keep = [line for line in path.read_text(encoding="utf-8", errors="replace").splitlines() if _step_of(line) <= step]
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        f.writelines(line + "\n" for line in keep)


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


class _Progress:
    """Loss and token counts since the last log record; the metrics file and the progress bar."""

    def __init__(self, out: Path, rank: int, show: bool, max_steps: int, step: int, objective: str = "mean"):
        self.objective = objective
        self.log = open(out / METRICS_FILE, "a", encoding="utf-8") if rank == 0 else None  # noqa: SIM115 (closed by close())
        self.bar = None
        if rank == 0 and show:
            from tqdm import tqdm

            self.bar = tqdm(total=max_steps, initial=step, unit="step", dynamic_ncols=True, smoothing=0.05,
                            mininterval=1.0 if sys.stderr.isatty() else 30.0, desc="train")
        self.last = time.time()
        self.summary: dict = {}
        self._reset()

    def _reset(self) -> None:
        self.window = {"loss_f": 0.0, "loss_b": 0.0, "steps": 0, "tokens": 0}

    def add(self, loss_f: float, loss_b: float, tokens: int) -> None:
        w = self.window
        w["loss_f"], w["loss_b"], w["steps"], w["tokens"] = w["loss_f"] + loss_f, w["loss_b"] + loss_b, w["steps"] + 1, w["tokens"] + tokens

    def write(self, step: int, tokens: int, elapsed: float, norm: float, lr: float) -> None:
        now = time.time()
        record = _record(step, tokens, self.window, now - self.last, elapsed, norm, lr, self.objective)
        self._reset()
        self.last, self.summary = now, record
        if self.log is not None:
            self.log.write(json.dumps(record) + "\n")
            self.log.flush()
        if self.bar is not None:
            self.bar.set_postfix_str(f"{record['tok_s']:,.0f} tok/s, loss {record['loss']:.3f}, ppl {record['ppl']:.1f}", refresh=False)

    def tick(self) -> None:
        if self.bar is not None:
            self.bar.update(1)

    def close(self) -> None:
        if self.log is not None:
            self.log.close()
        if self.bar is not None:
            self.bar.close()


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
    state = _initial_state(options, vocab, run, files, rank, world, device, fresh=checkpoint is None)
    if checkpoint is not None:
        state.load_state_dict(checkpoint, Path(checkpoint["path"]), s.lr)
        if rank == 0:
            _truncate_metrics(Path(s.out) / METRICS_FILE, state.step)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16) if s.bf16 else contextlib.nullcontext()
    recipe = StepRecipe(distributed.wrap(state.model, world), [p for p in state.model.parameters() if p.requires_grad],
                        options["unroll_steps"], options["all_clip_norm_val"], run.objective, run.streaming, autocast)
    state.model.train()
    return _loop(s, state, recipe, run, max_steps)


def _loop(s: TrainSettings, state: TrainingState, recipe: StepRecipe, run: RunConfig, max_steps: int) -> dict:
    """Steps until `max_steps`, SIGTERM or --max-minutes, logging and saving as `run.control` says; -> the summary."""
    out, control, rank = Path(s.out), run.control, state.rank
    start = last_save = state.started = time.time()
    with contextlib.ExitStack() as cleanup:
        progress = _Progress(out, rank, s.progress, max_steps, state.step, run.objective)
        cleanup.callback(progress.close)
        cleanup.callback(state.batcher.close)
        signals = cleanup.enter_context(_signal_requests())
        while state.step < max_steps:
            batch = state.batcher.next_batch().to(state.device)
            now = time.time()
            asked_to_save, signals["save"] = signals["save"], False
            due = asked_to_save or (rank == 0 and now - last_save >= 60.0 * control.checkpoint_minutes)
            out_of_time = signals["stop"] or (rank == 0 and s.max_minutes is not None and now - start >= 60.0 * s.max_minutes)
            done = train_step(state, batch, recipe, due, out_of_time)
            step = state.step
            progress.add(done.loss_f, done.loss_b, batch.n_tokens * state.world)
            if step % control.log_every == 0 or step == max_steps or done.stop:
                progress.write(step, state.tokens, state.elapsed(), float(done.norm), state.optimizer.param_groups[0]["lr"])
            progress.tick()
            if step % control.checkpoint_every == 0 or step == max_steps or done.save or done.stop:
                state.save(out, control.keep_checkpoints)
                last_save = time.time()
            if done.stop:
                break
    last = state.last_checkpoint
    return dict(progress.summary, max_steps=max_steps, checkpoint=str(last) if last else None, run_dir=str(out),
                stopped_by="SIGTERM" if signals["stop"] else None)


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


def _record(step, tokens, window, seconds, elapsed, norm, lr, objective: str = "mean") -> dict:
    """`loss` and `ppl`: per direction trained, so `forward`'s are the forward LM's, not a mean with an untrained one."""
    loss_f, loss_b = window["loss_f"] / window["steps"], window["loss_b"] / window["steps"]
    w_f, w_b = OBJECTIVES[objective]
    loss = (w_f * loss_f + w_b * loss_b) / (w_f + w_b)
    return {"step": step, "tokens": tokens, "loss": loss, "loss_forward": loss_f, "loss_backward": loss_b,
            "ppl": math.exp(min(loss, 700.0)), "tok_s": window["tokens"] / max(seconds, 1e-9), "grad_norm": norm,
            "lr": lr, "elapsed_s": round(elapsed, 3)}
