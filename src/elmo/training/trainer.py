"""`elmo train`: bilm-tf's recipe (doc section 7) as a plain torch loop, resumable bit for bit.

A run directory holds options.json (the architecture plus bilm-tf's training keys, as bilm-tf
writes it), run.json (our settings), vocab.txt, metrics.jsonl and checkpoints/. A checkpoint holds
the weights, the optimizer, the step, and per rank the data position, the LSTM states and the RNG
states, so a resumed run computes exactly what the uninterrupted one would have.
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.nn.parallel import DistributedDataParallel

from ..errors import InputError
from ..fileio import atomic_path
from ..models import OPTIONS_NAME, VOCAB_NAME, ModelFiles
from ..options import BiLMConfig, read_options, write_options
from ..weights import load_bilm
from . import TrainingError, distributed
from .checkpoint import (
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    save_checkpoint,
)
from .data import (
    CHUNK_LINES,
    SentenceBatcher,
    SentenceSource,
    StreamBatcher,
    count_targets,
    expand_corpus,
    head_counts,
)
from .model import LanguageModel, detach_states
from .softmax import LogUniformSampler, load_softmax
from .vocab import Vocab, check_frequency_order, write_vocab

RUN_FILE, METRICS_FILE = "run.json", "metrics.jsonl"
# Our setting name -> bilm-tf's options.json key, and the original recipe's value.
OPTION_KEYS = {
    "batch_size": ("batch_size", 128),
    "unroll_steps": ("unroll_steps", 20),
    "dropout": ("dropout", 0.1),
    "clip_norm": ("all_clip_norm_val", 10.0),
    "sampled": ("sample_softmax", True),
    "negatives": ("n_negative_samples_batch", 8192),
    "epochs": ("n_epochs", 10),
}
LR_DEFAULTS = {"adagrad": 0.2, "adam": 0.001, "sgd": 1.0}
RUN_KEYS = {"optimizer": "adagrad", "batching": "stream", "seed": 0}  # kept in run.json
# How often to save and log (bilm-tf: every 1250 batches, 2 kept); a resumed run keeps its own unless told.
CONTROL_DEFAULTS = {"checkpoint_every": 1250, "checkpoint_minutes": 30.0, "keep_checkpoints": 2, "log_every": 10}
CAN_CHANGE_ON_RESUME = ("max_steps", "epochs", "lr")  # a new --lr applies from the resumed step on


@dataclass
class TrainSettings:
    """What `elmo train` was asked for; None means "the options' value, else the original recipe's"."""

    out: str
    train: list[str] | None = None
    vocab: str | None = None
    options: dict | None = None
    init_from: str | None = None
    batch_size: int | None = None
    unroll_steps: int | None = None
    dropout: float | None = None
    clip_norm: float | None = None
    lr: float | None = None
    optimizer: str | None = None
    sampled: bool | None = None
    negatives: int | None = None
    batching: str | None = None
    seed: int | None = None
    max_steps: int | None = None
    epochs: float | None = None
    checkpoint_every: int | None = None
    checkpoint_minutes: float | None = None
    keep_checkpoints: int | None = None
    log_every: int | None = None
    threads: int | None = None
    device: str | None = None
    bf16: bool = False
    resume: bool = False
    progress: bool = True
    chunk_lines: int = CHUNK_LINES


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise InputError(message)


def _validate(options: dict, run: dict) -> None:
    _check(isinstance(options["batch_size"], int) and options["batch_size"] > 0, f"--batch-size must be a positive integer, found {options['batch_size']!r}")
    _check(isinstance(options["unroll_steps"], int) and options["unroll_steps"] > 0, f"--unroll-steps must be a positive integer, found {options['unroll_steps']!r}")
    _check(0.0 <= options["dropout"] < 1.0, f"--dropout must be in [0, 1), found {options['dropout']!r}")
    _check(options["all_clip_norm_val"] > 0, f"--clip-norm must be positive, found {options['all_clip_norm_val']!r}")
    _check(options["learning_rate"] > 0, f"--lr must be positive, found {options['learning_rate']!r}")
    _check(isinstance(options["n_negative_samples_batch"], int) and options["n_negative_samples_batch"] > 0,
           f"--negatives must be a positive integer, found {options['n_negative_samples_batch']!r}")
    _check(run["optimizer"] in LR_DEFAULTS, f"--optimizer must be one of {', '.join(LR_DEFAULTS)}, found {run['optimizer']!r}")
    _check(run["batching"] in ("stream", "sentence"), f"--batching must be stream or sentence, found {run['batching']!r}")


def _fresh_run(s: TrainSettings) -> tuple[dict, dict, Vocab]:
    """Options (architecture + training keys) and run.json contents for a new run."""
    _check(bool(s.train), "--train is required (a file or glob of tokenized text, one sentence per line)")
    _check(s.vocab is not None, "--vocab is required (make one with `elmo vocab`)")
    if s.init_from is not None:
        _check(s.options is None, "--init-from takes the architecture from MODEL_DIR/options.json; drop --options/--preset")
        options = read_options(ModelFiles.from_dir(s.init_from).options_file).to_options()
    else:
        _check(s.options is not None, "give the architecture: --preset NAME, --options options.json or --init-from MODEL_DIR")
        options = copy.deepcopy(s.options)
    BiLMConfig.from_options(options, source="the model options")  # fail early on a broken architecture
    options["char_cnn"]["n_characters"] = 261  # the training-time table (doc 3.3)
    for name, (key, default) in OPTION_KEYS.items():
        value = getattr(s, name)
        options[key] = value if value is not None else options.get(key, default)
    run = {name: getattr(s, name) if getattr(s, name) is not None else default for name, default in RUN_KEYS.items()}
    options["learning_rate"] = s.lr if s.lr is not None else options.get("learning_rate", LR_DEFAULTS.get(run["optimizer"], 0.2))
    options["bidirectional"] = True
    vocab = Vocab.load(s.vocab)
    options["n_tokens_vocab"] = len(vocab)
    run.update(train=list(s.train), init_from=s.init_from, chunk_lines=s.chunk_lines, max_steps=s.max_steps)
    _validate(options, run)
    return options, run, vocab


def _resumed_run(s: TrainSettings, out: Path) -> tuple[dict, dict, Vocab]:
    """The stored settings; a flag that would change the computation is refused, not silently ignored."""
    _check((out / RUN_FILE).is_file(), f"{out}: --resume needs a run directory made by `elmo train` ({RUN_FILE} is missing)")
    run = json.loads((out / RUN_FILE).read_text(encoding="utf-8"))
    options = read_options(out / OPTIONS_NAME).to_options()
    stored = {name: options.get(key) for name, (key, _) in OPTION_KEYS.items()}
    stored.update({name: run.get(name) for name in RUN_KEYS}, lr=options.get("learning_rate"), train=run.get("train"))
    for name, old in stored.items():
        new = getattr(s, name)
        if new is not None and name not in CAN_CHANGE_ON_RESUME and new != old:
            flag = "--" + name.replace("_", "-")
            raise InputError(f"{flag} {new}: the run in {out} was started with {old}; a resumed run keeps its settings")
    if s.epochs is not None:
        options["n_epochs"], run["max_steps"] = s.epochs, None
    if s.max_steps is not None:
        run["max_steps"] = s.max_steps
    return options, run, Vocab.load(out / VOCAB_NAME)


def _total_steps(options: dict, run: dict, files: list[str], world: int) -> int:
    """--max-steps, else bilm-tf's n_epochs * int(n_train_tokens / (batch * unroll * devices))."""
    if run.get("max_steps"):
        return int(run["max_steps"])
    if not options.get("n_train_tokens"):
        print(f"counting the corpus' tokens to turn {options['n_epochs']} epochs into steps "
              "(give --max-steps, or n_train_tokens in the options, to skip this)", file=sys.stderr)
        options["n_train_tokens"] = count_targets(files)
    per_step = options["batch_size"] * options["unroll_steps"] * world
    return max(1, int(options["n_epochs"] * max(1, options["n_train_tokens"] // per_step)))


def _build_model(options: dict, vocab: Vocab, run: dict, rank: int, init: bool = True) -> tuple[LanguageModel, torch.Generator]:
    """The LM with fresh weights, or `--init-from`'s when `init` (a resumed run loads its checkpoint instead)."""
    config = BiLMConfig.from_options(options)
    generator = torch.Generator().manual_seed(run["seed"] * 7919 + 17 + rank)
    sampler = None
    if options["sample_softmax"] and options["n_negative_samples_batch"] < len(vocab):
        sampler = LogUniformSampler(len(vocab), options["n_negative_samples_batch"], generator)
    model = LanguageModel(config, len(vocab), dropout=options["dropout"], sampler=sampler)
    if init and run.get("init_from"):
        files = ModelFiles.from_dir(run["init_from"])
        state = load_bilm(files.options_file, files.weight_file).state_dict()
        table = state["char_encoder.char_embed"]
        if table.shape[0] == model.bilm.char_encoder.char_embed.shape[0] + 1:
            state["char_encoder.char_embed"] = table[1:]  # a file stored with the zero row first
        model.bilm.load_state_dict(state)
        if files.softmax_file is not None:
            model.softmax = load_softmax(files.softmax_file, len(vocab), config.projection_dim)
    return model, generator


def _make_optimizer(model: torch.nn.Module, options: dict, run: dict) -> torch.optim.Optimizer:
    if run["optimizer"] == "adam":
        return torch.optim.Adam(model.parameters(), lr=options["learning_rate"])
    if run["optimizer"] == "sgd":
        return torch.optim.SGD(model.parameters(), lr=options["learning_rate"])
    return torch.optim.Adagrad(model.parameters(), lr=options["learning_rate"], initial_accumulator_value=1.0)


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


def _truncate_metrics(path: Path, step: int) -> None:
    """On resume, drop log records written after the checkpoint by the interrupted run."""
    if not path.is_file():
        return
    keep = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip() and json.loads(line)["step"] <= step]
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        f.writelines(line + "\n" for line in keep)


def train(s: TrainSettings) -> dict:
    """Run (or resume) training; returns a summary. Under torchrun every rank calls this."""
    rank, world, device = distributed.setup(s.device)
    try:
        return _train(s, rank, world, device)
    finally:
        distributed.teardown()


def _train(s: TrainSettings, rank: int, world: int, device: torch.device) -> dict:
    if s.threads is not None:
        _check(s.threads > 0, f"--threads must be positive, found {s.threads}")
        torch.set_num_threads(s.threads)
    _check(not s.bf16 or device.type == "cuda", "--bf16 needs a GPU (--device cuda)")
    out = Path(s.out)
    checkpoint = None
    if s.resume:
        path = latest_checkpoint(out)
        _check(path is not None, f"{out}: --resume found no checkpoint in {out / 'checkpoints'}")
        options, run, vocab = _resumed_run(s, out)
        checkpoint = load_checkpoint(path)
        _check(checkpoint["world_size"] == world,
               f"{path}: saved by {checkpoint['world_size']} processes, resumed with {world}; use the same number")
    else:
        _check(not list_checkpoints(out), f"{out}: already holds a training run; pass --resume to continue it, or choose another --out")
        options, run, vocab = _fresh_run(s)
    control = {k: getattr(s, k) if getattr(s, k) is not None else run.get("control", {}).get(k, v)
               for k, v in CONTROL_DEFAULTS.items()}
    _check(all(v > 0 for v in control.values()),
           "--checkpoint-every, --checkpoint-minutes, --keep-checkpoints and --log-every must be positive")
    run["control"] = control
    files = expand_corpus(run["train"])
    max_steps = _total_steps(options, run, files, world)
    if rank == 0 and checkpoint is None:
        out.mkdir(parents=True, exist_ok=True)
        write_options(options, out / OPTIONS_NAME)
        write_vocab(vocab.tokens, out / VOCAB_NAME)
        with atomic_path(out / RUN_FILE) as tmp, open(tmp, "w", encoding="utf-8") as f:
            json.dump(dict(run, world_size=world), f, indent=2)
    if checkpoint is None and options["sample_softmax"]:
        check_frequency_order(vocab, head_counts(files), where=f"the first 200,000 tokens of {files[0]}")

    torch.manual_seed(run["seed"])
    model, generator = _build_model(options, vocab, run, rank, init=checkpoint is None)
    model.to(device)
    optimizer = _make_optimizer(model, options, run)
    rows, unroll = options["batch_size"], options["unroll_steps"]
    source = SentenceSource(files, seed=run["seed"], shuffle=True, loop=True, shard=(rank, world), chunk_lines=run["chunk_lines"])
    streaming = run["batching"] == "stream"
    batcher = StreamBatcher(source, vocab, rows, unroll) if streaming else SentenceBatcher(source, vocab, rows)
    torch.manual_seed(run["seed"] * 1_000_003 + rank)  # dropout differs per rank
    step, tokens, states, elapsed_before = 0, 0, None, 0.0
    if checkpoint is not None:
        model.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])  # with the learning rate it had reached
        if s.lr is not None:
            _check(s.lr > 0, f"--lr must be positive, found {s.lr}")
            for group in optimizer.param_groups:
                group["lr"] = s.lr
        mine = checkpoint["ranks"][rank]
        batcher.restore(mine["data"])
        states = _states_to(mine["lstm"], device)
        _set_rng_state(mine["rng"], generator, device)
        step, tokens, elapsed_before = checkpoint["step"], checkpoint["tokens"], checkpoint["elapsed"]
        if rank == 0:
            _truncate_metrics(out / METRICS_FILE, step)
    trained = DistributedDataParallel(model) if world > 1 else model
    model.train()
    params = [p for p in model.parameters()]

    def save(at_step: int) -> Path | None:
        if not all(torch.isfinite(p).all() for p in params):
            raise TrainingError(_nan_message(at_step, float("nan"), float("nan"), last_path, what="model's weights"))
        mine = {"data": batcher.state(), "lstm": _states_to(states, "cpu"), "rng": _rng_state(generator, device)}
        everyone = distributed.gather(mine)
        if rank != 0:
            return None
        state = {"step": at_step, "tokens": tokens, "world_size": world, "elapsed": elapsed_before + time.time() - start,
                 "model": model.state_dict(), "optimizer": optimizer.state_dict(), "ranks": everyone}
        return save_checkpoint(state, out, at_step, control["keep_checkpoints"])

    bar = None
    if rank == 0 and s.progress:
        from tqdm import tqdm

        bar = tqdm(total=max_steps, initial=step, unit="step", dynamic_ncols=True, smoothing=0.05,
                   mininterval=1.0 if sys.stderr.isatty() else 30.0, desc="train")
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if s.bf16 else contextlib.nullcontext()
    start = last_save = last_log = time.time()
    window = {"loss_f": 0.0, "loss_b": 0.0, "steps": 0, "tokens": 0}
    last_path = latest_checkpoint(out) if checkpoint is not None else None
    summary: dict = {}
    with contextlib.ExitStack() as cleanup:
        log = cleanup.enter_context(open(out / METRICS_FILE, "a", encoding="utf-8")) if rank == 0 else None
        cleanup.callback(source.close)
        if bar is not None:
            cleanup.callback(bar.close)
        while step < max_steps:
            batch = batcher.next_batch().to(device)
            with autocast:
                nll_f, nll_b, new_states = trained(batch, states, streaming)
            loss_f, loss_b = nll_f.mean(), nll_b.mean()
            due = rank == 0 and time.time() - last_save >= 60.0 * control["checkpoint_minutes"]
            stats = distributed.all_sum(torch.stack([loss_f.detach().float(), loss_b.detach().float(),
                                                     torch.tensor(float(due), device=device)]))
            mean_f, mean_b = (stats[:2] / world).tolist()
            if not (math.isfinite(mean_f) and math.isfinite(mean_b)):
                raise TrainingError(_nan_message(step + 1, mean_f, mean_b, last_path))
            # bilm-tf differentiates unroll_steps * the mean loss: the sum over time of the batch mean.
            (0.5 * (loss_f + loss_b) * unroll).backward()
            norm = torch.nn.utils.clip_grad_norm_(params, options["all_clip_norm_val"])
            if not torch.isfinite(norm):
                raise TrainingError(_nan_message(step + 1, float("nan"), float("nan"), last_path, what="gradient norm"))
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            states = detach_states(new_states) if streaming else None
            step += 1
            n = batch.n_tokens * world
            tokens += n
            window["loss_f"] += mean_f
            window["loss_b"] += mean_b
            window["steps"] += 1
            window["tokens"] += n
            if step % control["log_every"] == 0 or step == max_steps:
                now = time.time()
                record = _record(step, tokens, window, now - last_log, elapsed_before + now - start, float(norm),
                                 optimizer.param_groups[0]["lr"])
                window = {"loss_f": 0.0, "loss_b": 0.0, "steps": 0, "tokens": 0}
                last_log = now
                summary = record
                if log is not None:
                    log.write(json.dumps(record) + "\n")
                    log.flush()
                if bar is not None:
                    bar.set_postfix_str(f"{record['tok_s']:,.0f} tok/s, loss {record['loss']:.3f}, ppl {record['ppl']:.1f}", refresh=False)
            if bar is not None:
                bar.update(1)
            if step % control["checkpoint_every"] == 0 or step == max_steps or stats[2].item() > 0:
                last_path = save(step) or last_path
                last_save = time.time()
    summary.update(max_steps=max_steps, checkpoint=str(last_path) if last_path else None, run_dir=str(out))
    return summary


def _record(step, tokens, window, seconds, elapsed, norm, lr) -> dict:
    loss_f, loss_b = window["loss_f"] / window["steps"], window["loss_b"] / window["steps"]
    loss = 0.5 * (loss_f + loss_b)
    return {"step": step, "tokens": tokens, "loss": loss, "loss_forward": loss_f, "loss_backward": loss_b,
            "ppl": math.exp(min(loss, 700.0)), "tok_s": window["tokens"] / max(seconds, 1e-9), "grad_norm": norm,
            "lr": lr, "elapsed_s": round(elapsed, 3)}


def _nan_message(step: int, loss_f: float, loss_b: float, last_path: Path | None, what: str = "loss") -> str:
    kept = (f"the last good checkpoint, {last_path}, is kept (continue from it with --resume and a lower --lr)"
            if last_path else "no checkpoint had been written yet")
    return (f"step {step}: the {what} is not finite (forward {loss_f}, backward {loss_b}); training stopped and "
            f"nothing was saved after step {step - 1}; {kept}. Try a lower --lr or check the corpus.")
