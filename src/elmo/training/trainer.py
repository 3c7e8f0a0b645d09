"""`elmo train`: bilm-tf's recipe (docs/format.md section 7) as a plain torch loop, resumable bit for bit.

A run directory holds options.json (the architecture plus bilm-tf's training keys, as bilm-tf
writes it), run.json (our settings), vocab.txt, metrics.jsonl and checkpoints/. A checkpoint holds
the weights, the optimizer, the step, and per rank the data position, the LSTM states and the RNG
states, so a resumed run computes exactly what the uninterrupted one would have.
SIGTERM (a scheduler's preemption; torchrun forwards it) saves a checkpoint and stops after the
current step; SIGUSR1 saves one and goes on.
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
from pathlib import Path

import torch

from ..allocator import keep_freed_memory
from ..devices import cpu_has_bf16
from ..fileio import atomic_path, check_not_input
from ..models import resolve
from ..options import OPTIONS_NAME, BiLMConfig, read_options, write_options
from ..weights import load_bilm
from . import TrainingError, distributed
from .checkpoint import (
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    load_into,
    save_checkpoint,
)
from .data import expand_corpus, head_counts, make_batcher
from .model import LanguageModel, detach_states, kim_initialise_
from .settings import (
    CHECKPOINT_DIR,
    CONTROL_DEFAULTS,
    METRICS_FILE,
    OBJECTIVES,
    RUN_FILE,
    TrainSettings,
    check,
    fresh_run,
    resumed_run,
    total_steps,
)
from .softmax import LogUniformSampler, load_softmax
from .vocab import VOCAB_NAME, Vocab, check_frequency_order, write_vocab

__all__ = ["TrainSettings", "train"]


def _build_model(options: dict, vocab: Vocab, run: dict, rank: int, init: bool = True) -> tuple[LanguageModel, torch.Generator]:
    """The LM with fresh weights (bilm-tf's or Kim et al.'s draw), or `--init-from`'s, when `init`
    (a resumed run loads its checkpoint instead)."""
    config = BiLMConfig.from_options(options)
    generator = torch.Generator().manual_seed(run["seed"] * 7919 + 17 + rank)
    sampler = None
    if options["sample_softmax"] and options["n_negative_samples_batch"] < len(vocab):
        sampler = LogUniformSampler(len(vocab), options["n_negative_samples_batch"], generator)
    model = LanguageModel(config, len(vocab), dropout=options["dropout"], sampler=sampler,
                          first_layer_dropout=run.get("first_layer_dropout", True))
    if init and run.get("weight_init") == "kim":
        kim_initialise_(model)
    if init and run.get("init_from"):
        files = resolve(run["init_from"]).original_files()
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


def _make_optimizer(model: torch.nn.Module, options: dict, run: dict) -> torch.optim.Optimizer:
    params = [p for p in model.parameters() if p.requires_grad]
    if run["optimizer"] == "adam":
        return torch.optim.Adam(params, lr=options["learning_rate"])
    if run["optimizer"] == "sgd":
        return torch.optim.SGD(params, lr=options["learning_rate"])
    return torch.optim.Adagrad(params, lr=options["learning_rate"], initial_accumulator_value=1.0)


def _rng_state(generator: torch.Generator, device: torch.device) -> dict:
    state = {"torch": torch.get_rng_state(), "sampler": generator.get_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def _set_rng_state(state: dict, generator: torch.Generator, device: torch.device) -> None:
    torch.set_rng_state(state["torch"])
    generator.set_state(state["sampler"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


def _states_to(states, device):
    if states is None:
        return None
    return tuple([(c.to(device), h.to(device)) for c, h in direction] for direction in states)


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


def _open_run(s: TrainSettings, rank: int, world: int) -> tuple[dict, dict, Vocab, dict | None]:
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
    control = {k: getattr(s, k) if getattr(s, k) is not None else run.get("control", {}).get(k, v)
               for k, v in CONTROL_DEFAULTS.items()}
    check(all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in control.values()),
           "--checkpoint-every, --checkpoint-minutes, --keep-checkpoints and --log-every must be positive")
    run["control"] = control
    if rank == 0 and checkpoint is None:
        out.mkdir(parents=True, exist_ok=True)
        (out / METRICS_FILE).unlink(missing_ok=True)  # a run that died before its first checkpoint
        write_options(options, out / OPTIONS_NAME)
        write_vocab(vocab.tokens, out / VOCAB_NAME)
        with atomic_path(out / RUN_FILE) as tmp, open(tmp, "w", encoding="utf-8") as f:
            json.dump(dict(run, world_size=world), f, indent=2)
    return options, run, vocab, checkpoint


def losses(trained: torch.nn.Module, batch, states, streaming: bool, autocast) -> tuple[torch.Tensor, torch.Tensor, tuple]:
    """The two directions' mean losses on one batch, and the LSTM states after it."""
    with autocast:
        nll_f, nll_b, new_states = trained(batch, states, streaming)
    return nll_f.mean(), nll_b.mean(), new_states


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


def train_step(trained, batch, states, streaming: bool, unroll: int, params: list, clip_norm: float, optimizer,
               autocast=None) -> tuple[float, float, torch.Tensor, tuple]:
    """Forward, backward and update on one batch, as `elmo train` runs it (benchmarks time this)."""
    loss_f, loss_b, new_states = losses(trained, batch, states, streaming, autocast or contextlib.nullcontext())
    norm = apply_gradients(loss_f, loss_b, unroll, params, clip_norm, optimizer)
    return loss_f.item(), loss_b.item(), norm, new_states


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


def _model_and_optimizer(options: dict, vocab: Vocab, run: dict, rank: int, device: torch.device,
                         init: bool) -> tuple[LanguageModel, torch.Generator, torch.optim.Optimizer]:
    """The model on its device (frozen parameters fixed, sparse softmax gradients where they pay) and its optimizer."""
    torch.manual_seed(run["seed"])
    model, generator = _build_model(options, vocab, run, rank, init=init)
    freeze_parameters(model, run.get("freeze", []))
    model.to(device)
    # The sampled softmax reads a few rows: Adagrad and SGD then update only those (Adam has no sparse update).
    model.softmax.sparse_grad = model.sampler is not None and device.type == "cpu" and run["optimizer"] in ("adagrad", "sgd")
    if model.softmax.sparse_grad:
        torch.sparse.check_sparse_tensor_invariants.disable()  # the default, said explicitly: torch warns otherwise
    return model, generator, _make_optimizer(model, options, run)


def _train(s: TrainSettings, rank: int, world: int, device: torch.device) -> dict:
    _prepare_process(s, device)
    out = Path(s.out)
    options, run, vocab, checkpoint = _open_run(s, rank, world)
    control = run["control"]
    files = expand_corpus(run["train"])
    max_steps = total_steps(options, run, files, world)
    if checkpoint is None and options["sample_softmax"]:
        check_frequency_order(vocab, head_counts(files), where=f"the first 200,000 tokens of {files[0]}")
    model, generator, optimizer = _model_and_optimizer(options, vocab, run, rank, device, init=checkpoint is None)
    unroll = options["unroll_steps"]
    batcher = make_batcher(run["batching"], files, vocab, options["batch_size"], unroll, seed=run["seed"],
                           shard=(rank, world), chunk_lines=run["chunk_lines"], reset_rate=run.get("reset_rate", 0.0))
    streaming = run["batching"] != "sentence"  # the LSTM state carries from window to window
    torch.manual_seed(run["seed"] * 1_000_003 + rank)  # dropout differs per rank
    step, tokens, states, elapsed_before = 0, 0, None, 0.0
    if checkpoint is not None:
        step, tokens, states, elapsed_before = _restore(checkpoint, model, optimizer, batcher, generator, device, rank, s.lr)
        if rank == 0:
            _truncate_metrics(out / METRICS_FILE, step)
    trained = distributed.wrap(model, world)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    last_path = latest_checkpoint(out) if checkpoint is not None else None

    def save(at_step: int) -> Path | None:
        bad = [name for name, p in model.named_parameters() if not torch.isfinite(p).all()]
        if bad:
            raise TrainingError(_nan_message(at_step, f"the model's weights are not finite ({', '.join(bad)})", last_path))
        mine = {"data": batcher.state(), "lstm": _states_to(states, "cpu"), "rng": _rng_state(generator, device)}
        everyone = distributed.gather(mine)
        if rank != 0:
            return None
        state = {"step": at_step, "tokens": tokens, "world_size": world, "elapsed": elapsed_before + time.time() - start,
                 "model": model.state_dict(), "optimizer": optimizer.state_dict(), "ranks": everyone}
        return save_checkpoint(state, out, at_step, control["keep_checkpoints"])

    autocast = torch.autocast(device.type, dtype=torch.bfloat16) if s.bf16 else contextlib.nullcontext()
    start = last_save = time.time()
    with contextlib.ExitStack() as cleanup:
        progress = _Progress(out, rank, s.progress, max_steps, step, run.get("objective", "mean"))
        cleanup.callback(progress.close)
        cleanup.callback(batcher.close)
        signals = cleanup.enter_context(_signal_requests())
        while step < max_steps:
            batch = batcher.next_batch().to(device)
            loss_f, loss_b, new_states = losses(trained, batch, states, streaming, autocast)
            now = time.time()
            asked_to_save, signals["save"] = signals["save"], False
            due = asked_to_save or (rank == 0 and now - last_save >= 60.0 * control["checkpoint_minutes"])
            out_of_time = signals["stop"] or (rank == 0 and s.max_minutes is not None and now - start >= 60.0 * s.max_minutes)
            mean_f, mean_b, due, stop = _agree(loss_f, loss_b, due, out_of_time, world)
            if not (math.isfinite(mean_f) and math.isfinite(mean_b)):
                raise TrainingError(_nan_message(step + 1, f"the loss is not finite (forward {mean_f}, backward {mean_b})",
                                                 last_path))
            norm = apply_gradients(loss_f, loss_b, unroll, params, options["all_clip_norm_val"], optimizer,
                                   run.get("objective", "mean"))
            if not torch.isfinite(norm):
                raise TrainingError(_nan_message(step + 1, f"the gradient norm is not finite ({float(norm)}; losses: "
                                                 f"forward {mean_f}, backward {mean_b})", last_path))
            states = detach_states(new_states) if streaming else None
            step += 1
            tokens += batch.n_tokens * world
            progress.add(mean_f, mean_b, batch.n_tokens * world)
            if step % control["log_every"] == 0 or step == max_steps or stop:
                progress.write(step, tokens, elapsed_before + time.time() - start, float(norm), optimizer.param_groups[0]["lr"])
            progress.tick()
            if step % control["checkpoint_every"] == 0 or step == max_steps or due or stop:
                last_path = save(step) or last_path
                last_save = time.time()
            if stop:
                break
    stopped_by = "SIGTERM" if signals["stop"] else None
    return dict(progress.summary, max_steps=max_steps, checkpoint=str(last_path) if last_path else None, run_dir=str(out),
                stopped_by=stopped_by)


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


def _restore(checkpoint: dict, model, optimizer, batcher, generator, device, rank: int, lr: float | None):
    """Load a checkpoint into the model, optimizer, batcher and RNGs; -> step, tokens, LSTM states, elapsed."""
    where = checkpoint.get("path", "the checkpoint")
    load_into(model, checkpoint["model"], where)
    load_into(optimizer, checkpoint["optimizer"], where, "optimizer state")  # with the learning rate it had reached
    if lr is not None:
        check(lr > 0, f"--lr must be positive, found {lr}")
        for group in optimizer.param_groups:
            group["lr"] = lr
    mine = checkpoint["ranks"][rank]
    batcher.restore(mine["data"])
    _set_rng_state(mine["rng"], generator, device)
    return checkpoint["step"], checkpoint["tokens"], _states_to(mine["lstm"], device), checkpoint["elapsed"]


def _record(step, tokens, window, seconds, elapsed, norm, lr, objective: str = "mean") -> dict:
    """`loss` and `ppl`: per direction trained, so `forward`'s are the forward LM's, not a mean with an untrained one."""
    loss_f, loss_b = window["loss_f"] / window["steps"], window["loss_b"] / window["steps"]
    w_f, w_b = OBJECTIVES[objective]
    loss = (w_f * loss_f + w_b * loss_b) / (w_f + w_b)
    return {"step": step, "tokens": tokens, "loss": loss, "loss_forward": loss_f, "loss_backward": loss_b,
            "ppl": math.exp(min(loss, 700.0)), "tok_s": window["tokens"] / max(seconds, 1e-9), "grad_norm": norm,
            "lr": lr, "elapsed_s": round(elapsed, 3)}


def _nan_message(step: int, found: str, last_path: Path | None) -> str:
    """`found`: what is not finite, with the values seen."""
    kept = (f"the last good checkpoint, {last_path}, is kept (continue from it with --resume and a lower --lr)"
            if last_path else "no checkpoint had been written yet")
    return (f"step {step}: {found}; training stopped and "
            f"nothing was saved after step {step - 1}; {kept}. Try a lower --lr or check the corpus.")
