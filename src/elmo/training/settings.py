"""What a run is asked for and what it keeps: `TrainSettings`, and the options.json + run.json of a
run directory, resolved from the flags, the options' training keys and bilm-tf's defaults."""

from __future__ import annotations

import copy
import json
import math
import os
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from elmo.errors import InputError
from elmo.files.layout import OPTIONS_NAME, RUN_FILE, VOCAB_NAME
from elmo.formats.lm_vocab import Vocab
from elmo.model.options import BiLMConfig, read_options

from .batchers import BATCHINGS
from .corpus import CHUNK_LINES, count_targets

# A run directory: what `elmo train` writes there (models.py recognises a run by these names).
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
# kept in run.json; `freeze`: glob patterns of parameter names that training leaves as they are
RUN_KEYS = {"optimizer": "adagrad", "batching": "sentence", "seed": 0, "first_layer_dropout": True, "freeze": [],
            "objective": "mean", "weight_init": "bilm-tf", "reset_rate": 0.0}
# How a fresh run's weights are drawn: bilm-tf's (glorot LSTMs, normal highway and softmax, U(-1, 1)
# characters) or Kim et al.'s U(-0.05, 0.05) everywhere (training.model.kim_initialise_).
WEIGHT_INITS = ("bilm-tf", "kim")
# What the update differentiates: bilm-tf's mean of the two directions' losses, their sum (each LSTM
# then gets the step a one-direction LM would), or the forward LM's alone (the backward LSTM stays as
# initialised): the last two are for comparisons with one-direction LMs (benchmarks/ptb_char_small.py).
OBJECTIVES = {"mean": (0.5, 0.5), "sum": (1.0, 1.0), "forward": (1.0, 0.0)}
# How often to save and log (bilm-tf: every 1250 batches, 2 kept); a resumed run keeps its own unless told.
CONTROL_DEFAULTS = {"checkpoint_every": 1250, "checkpoint_minutes": 30.0, "keep_checkpoints": 2, "log_every": 10}
CAN_CHANGE_ON_RESUME = ("max_steps", "epochs", "lr")  # a new --lr applies from the resumed step on

# Fine-tuning (`--init-from`): what a flag left unset becomes, in this one place (run.json records the
# values used), each measured (docs/finetuning.md). lr 0.03 with a fresh Adagrad: on CoNLL-2003 and SST-5 text
# from the bundled model it reaches in a third of the tokens what 0.01 does, while the from-scratch 0.2 wrecks a
# trained model (docs/documents.md). `softmax_steps`: the first phase, a softmax learned with every biLM weight
# frozen, for a model published without one (`softmax_lr`: its rate; the frozen biLM cannot be hurt by it):
# 400 steps on CoNLL-2003 text reach held-out perplexity 138 with it, 203 without.
FINETUNE_DEFAULTS = {"lr": 0.03, "optimizer": "adagrad", "optimizer_state": "fresh", "epochs": 4.0,
                     "batch_size": 64, "negatives": 4096, "softmax_steps": 200, "softmax_lr": 0.2}
VALID_EVERY = 500  # --valid: steps between held-out scorings, unless --valid-every says


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
    first_layer_dropout: bool | None = None
    freeze: list[str] | None = None
    clip_norm: float | None = None
    lr: float | None = None
    optimizer: str | None = None
    sampled: bool | None = None
    negatives: int | None = None
    batching: str | None = None
    reset_rate: float | None = None  # document batching: the share of sentence starts that cut a document
    objective: str | None = None
    weight_init: str | None = None
    seed: int | None = None
    max_steps: int | None = None
    max_minutes: float | None = None  # this invocation only; not stored with the run
    epochs: float | None = None
    checkpoint_every: int | None = None
    checkpoint_minutes: float | None = None
    keep_checkpoints: int | None = None
    log_every: int | None = None
    softmax_steps: int | None = None  # --init-from: steps of the softmax-only phase (FINETUNE_DEFAULTS)
    valid: str | None = None  # held-out text scored at the start, every `valid_every` steps and at the end
    valid_every: int | None = None
    threads: int | None = None
    device: str | None = None
    bf16: bool = False
    resume: bool = False
    progress: bool = True
    chunk_lines: int = CHUNK_LINES


@dataclass(frozen=True)
class Control:
    """How often a run saves and logs (defaults: CONTROL_DEFAULTS); stored in run.json, a flag overrides it."""

    checkpoint_every: int
    checkpoint_minutes: float
    keep_checkpoints: int
    log_every: int


@dataclass(frozen=True)
class RunConfig:
    """run.json: what a run keeps beside options.json, resolved once from the flags (fresh_run) or the
    stored file (resumed_run) and passed on unchanged. The first eight fields' defaults are RUN_KEYS."""

    optimizer: str
    batching: str
    seed: int
    first_layer_dropout: bool
    freeze: tuple[str, ...]
    objective: str
    weight_init: str
    reset_rate: float
    train: tuple[str, ...]
    init_from: str | None
    chunk_lines: int
    max_steps: int | None
    control: Control
    finetune: dict | None = None  # --init-from: the start model, the phases and the rates (finetune_record)
    valid: dict | None = None  # --valid: {"file", "every", "mode"}

    @classmethod
    def from_json(cls, stored: dict) -> RunConfig:
        """From run.json's object (checked by read_run_file); a key older runs did not store gets its default."""
        values = {name: stored.get(name, copy.deepcopy(default)) for name, default in RUN_KEYS.items()}
        return cls(**dict(values, freeze=tuple(values["freeze"])), train=tuple(stored["train"]),
                   init_from=stored.get("init_from"), chunk_lines=stored.get("chunk_lines", CHUNK_LINES),
                   max_steps=stored.get("max_steps"), control=Control(**stored["control"]),
                   finetune=stored.get("finetune"), valid=stored.get("valid"))

    def to_json(self, world_size: int) -> dict:
        """run.json's object, keys in the order earlier versions wrote them (their run folders still resume)."""
        stored = dict(asdict(self), freeze=list(self.freeze), train=list(self.train), world_size=world_size)
        return {k: v for k, v in stored.items() if v is not None or k not in ("finetune", "valid")}

    @property
    def softmax_steps(self) -> int:
        """Steps 1..N train only the softmax (every biLM weight frozen); 0 without such a phase."""
        return int(self.finetune.get("softmax_steps", 0)) if self.finetune else 0

    @property
    def streaming(self) -> bool:
        """The LSTM state carries from window to window (every batching but whole sentences)."""
        return self.batching != "sentence"


def check(ok: bool, message: str) -> None:
    if not ok:
        raise InputError(message)


MAX_TOKENS_PER_STEP = 1 << 22  # batch x unroll; the original recipe uses 128 x 20 = 2,560


def check_flags(s: TrainSettings) -> None:
    """Values that mean nothing are refused before any file is read or anything allocated."""
    for name in ("max_steps", "checkpoint_every", "keep_checkpoints", "log_every", "threads", "batch_size",
                 "unroll_steps", "negatives", "valid_every"):
        value = getattr(s, name)
        check(value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 1),
              f"--{name.replace('_', '-')} must be a positive integer, found {value!r}")
    for name in ("epochs", "checkpoint_minutes", "lr", "clip_norm"):
        value = getattr(s, name)
        check(value is None or (math.isfinite(value) and value > 0),
              f"--{name.replace('_', '-')} must be a positive finite number, found {value!r}")
    check(s.max_minutes is None or (math.isfinite(s.max_minutes) and s.max_minutes >= 0),  # 0: stop after one update
          f"--max-minutes must be a finite number >= 0, found {s.max_minutes!r}")
    check(s.softmax_steps is None or (isinstance(s.softmax_steps, int) and s.softmax_steps >= 0),
          f"--softmax-steps must be an integer >= 0, found {s.softmax_steps!r}")
    check(s.dropout is None or 0.0 <= s.dropout < 1.0, f"--dropout must be in [0, 1), found {s.dropout!r}")


def validate(options: dict, run: RunConfig) -> None:
    tokens = options["batch_size"] * options["unroll_steps"] if all(
        isinstance(options[k], int) for k in ("batch_size", "unroll_steps")) else 0
    check(tokens <= MAX_TOKENS_PER_STEP, f"--batch-size {options['batch_size']} x --unroll-steps "
          f"{options['unroll_steps']} is {tokens:,} tokens per step; at most {MAX_TOKENS_PER_STEP:,} are allowed (the original recipe: 2,560)")
    check(isinstance(options["batch_size"], int) and options["batch_size"] > 0, f"--batch-size must be a positive integer, found {options['batch_size']!r}")
    check(isinstance(options["unroll_steps"], int) and options["unroll_steps"] > 0, f"--unroll-steps must be a positive integer, found {options['unroll_steps']!r}")
    check(0.0 <= options["dropout"] < 1.0, f"--dropout must be in [0, 1), found {options['dropout']!r}")
    check(_positive(options["all_clip_norm_val"]), f"--clip-norm must be positive and finite, found {options['all_clip_norm_val']!r}")
    check(_positive(options["learning_rate"]), f"--lr must be positive and finite, found {options['learning_rate']!r}")
    check(_positive(options["n_epochs"]), f"--epochs must be positive and finite, found {options['n_epochs']!r}")
    check(isinstance(options["n_negative_samples_batch"], int) and options["n_negative_samples_batch"] > 0,
           f"--negatives must be a positive integer, found {options['n_negative_samples_batch']!r}")
    check(run.optimizer in LR_DEFAULTS, f"--optimizer must be one of {', '.join(LR_DEFAULTS)}, found {run.optimizer!r}")
    check(run.objective in OBJECTIVES, f"--objective must be one of {', '.join(OBJECTIVES)}, found {run.objective!r}")
    check(run.weight_init in WEIGHT_INITS, f"--weight-init must be one of {', '.join(WEIGHT_INITS)}, found {run.weight_init!r}")
    check(run.batching in BATCHINGS, f"--batching must be one of {', '.join(BATCHINGS)}, found {run.batching!r}")
    check(isinstance(run.reset_rate, (int, float)) and 0.0 <= run.reset_rate <= 1.0,
          f"--reset-rate must be in [0, 1], found {run.reset_rate!r}")
    check(run.reset_rate == 0.0 or run.batching == "document",
          f"--reset-rate cuts documents; it needs --batching document, found --batching {run.batching}")


def _positive(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


@dataclass(frozen=True)
class StartModel:
    """What `--init-from` names, as far as a run's settings need it (training.finetune.describe_start)."""

    reference: str  # as the user gave it
    kind: str  # "bundled model", "model directory", "training run", ...: for run.json and the model card
    options: dict  # its architecture (lstm, char_cnn)
    has_softmax: bool
    vocab_file: str | None = None  # its vocabulary, the run's when --vocab is not given


def fresh_run(s: TrainSettings, model_options: Callable[[str], StartModel]) -> tuple[dict, RunConfig, Vocab]:
    """Options (architecture + training keys) and run.json contents for a new run. `model_options`:
    `--init-from`'s model -> a StartModel (resolved by the caller: models.py sits above this module)."""
    check_flags(s)
    check(bool(s.train), "--train is required (a file or glob of tokenized text, one sentence per line)")
    check(s.vocab is not None or s.init_from is not None, "--vocab is required (make one with `elmo vocab`)")
    start = None
    if s.init_from is not None:
        check(s.weight_init is None, "--init-from starts from that model's weights; drop --weight-init")
        check(s.options is None, "--init-from takes the architecture from MODEL_DIR/options.json; drop --options/--preset")
        start = model_options(s.init_from)
        options = copy.deepcopy(start.options)
    else:
        check(s.options is not None, "give the architecture: --preset NAME, --options options.json or --init-from MODEL_DIR")
        check(s.softmax_steps is None, "--softmax-steps is the first phase of a fine-tune; it needs --init-from MODEL")
        options = copy.deepcopy(s.options)
    BiLMConfig.from_options(options, source="the model options")  # fail early on a broken architecture
    options["char_cnn"]["n_characters"] = 261  # the training-time table (docs/format.md 3.3)
    for name, (key, default) in OPTION_KEYS.items():
        value = getattr(s, name)
        options[key] = value if value is not None else options.get(key, default)
    given = {name: getattr(s, name) for name in RUN_KEYS if getattr(s, name) is not None}
    finetune = _finetune_choices(s, start, options, given) if start is not None else None
    run = RunConfig.from_json(dict(given, train=s.train, init_from=s.init_from, chunk_lines=s.chunk_lines,
                                   max_steps=s.max_steps, control=_control(s, {}), finetune=finetune,
                                   valid=_valid_choice(s, given.get("batching", RUN_KEYS["batching"]))))
    options["learning_rate"] = s.lr if s.lr is not None else options.get("learning_rate", LR_DEFAULTS.get(run.optimizer, 0.2))
    options["bidirectional"] = True
    vocab_file = s.vocab if s.vocab is not None else start.vocab_file
    check(vocab_file is not None, f"--vocab is required: --init-from {s.init_from} has no {VOCAB_NAME} to use "
          "(make one from your text with `elmo vocab`)")
    vocab = Vocab.load(vocab_file)
    options["n_tokens_vocab"] = len(vocab)
    validate(options, run)
    return options, run, vocab


def _finetune_choices(s: TrainSettings, start: StartModel, options: dict, given: dict) -> dict:
    """--init-from's unset rate, optimizer and epochs from FINETUNE_DEFAULTS (`options` and `given` get them);
    -> run.json's "finetune" record, naming which values were defaults."""
    defaults = []
    if s.optimizer is None:
        given["optimizer"] = FINETUNE_DEFAULTS["optimizer"]
        defaults.append("optimizer")
    if s.lr is not None:
        options["learning_rate"] = s.lr
    else:
        check(given["optimizer"] == FINETUNE_DEFAULTS["optimizer"],
              f"--init-from with --optimizer {given['optimizer']}: no fine-tuning rate is measured for it; give --lr "
              f"(the from-scratch default would wreck a trained model, docs/finetuning.md)")
        options["learning_rate"] = FINETUNE_DEFAULTS["lr"]
        defaults.append("lr")
    for flag, key, name in (("epochs", "n_epochs", "epochs"), ("batch_size", "batch_size", "batch_size"),
                            ("negatives", "n_negative_samples_batch", "negatives")):
        if getattr(s, flag) is None:
            options[key] = FINETUNE_DEFAULTS[name]
            defaults.append(name)
    softmax_steps = s.softmax_steps
    if softmax_steps is None:
        softmax_steps = 0 if start.has_softmax else FINETUNE_DEFAULTS["softmax_steps"]
        defaults.append("softmax_steps")
    softmax = "learned in phase 1" if softmax_steps else "trained with the biLM"
    if start.has_softmax:
        softmax = "the model's, rows carried over by word" + (", then phase 1" if softmax_steps else "")
    return {"from": start.reference, "kind": start.kind, "softmax": softmax, "softmax_steps": softmax_steps,
            "softmax_lr": FINETUNE_DEFAULTS["softmax_lr"] if softmax_steps else None,
            "lr": options.get("learning_rate"), "optimizer": given["optimizer"],
            "optimizer_state": FINETUNE_DEFAULTS["optimizer_state"], "epochs": options.get("n_epochs"),
            "batch_size": options.get("batch_size"), "negatives": options.get("n_negative_samples_batch"),
            "defaults": defaults}


def _valid_choice(s: TrainSettings, batching: str) -> dict | None:
    """--valid FILE: scored in the mode the model will be embedded in (document batching: document mode)."""
    if s.valid is None:
        check(s.valid_every is None, "--valid-every needs --valid FILE (held-out text to score)")
        return None
    check(Path(s.valid).is_file(), f"--valid {s.valid}: no such file (held-out text, one sentence per line)")
    return {"file": s.valid, "every": s.valid_every or VALID_EVERY,
            "mode": "document" if batching == "document" else "sentence"}


def resumed_run(s: TrainSettings, out: Path) -> tuple[dict, RunConfig, Vocab]:
    """The stored settings; a flag that would change the computation is refused, not silently ignored."""
    check_flags(s)
    check((out / RUN_FILE).is_file(), f"{out}: --resume needs a run directory made by `elmo train` ({RUN_FILE} is missing)")
    run = read_run_file(out / RUN_FILE)
    options = read_options(out / OPTIONS_NAME).to_options()
    stored = {name: options.get(key) for name, (key, _) in OPTION_KEYS.items()}
    stored.update({name: run.get(name, default) for name, default in RUN_KEYS.items()}, lr=options.get("learning_rate"), train=run.get("train"))
    for name, old in stored.items():
        new = getattr(s, name)
        if new is not None and name not in CAN_CHANGE_ON_RESUME and new != old:
            raise InputError(f"{as_flag(name, new)}: the run in {out} was started with {as_flag(name, old, True)}; a "
                             f"resumed run keeps its settings")
    max_steps = run.get("max_steps")
    if s.epochs is not None:
        options["n_epochs"], max_steps = s.epochs, None
    if s.max_steps is not None:
        max_steps = s.max_steps
    _check_same_fine_tune(s, run, out)
    _check_same_start(s, run, options, out)
    valid = run.get("valid")
    if valid and s.valid_every is not None:
        valid = dict(valid, every=s.valid_every)
    config = RunConfig.from_json(dict(run, max_steps=max_steps, control=_control(s, run.get("control", {})), valid=valid))
    validate(options, config)
    return options, config, Vocab.load(out / VOCAB_NAME)


def _check_same_fine_tune(s: TrainSettings, run: dict, out: Path) -> None:
    """--softmax-steps and --valid are part of what a run computes: a resumed run keeps its own."""
    phase = (run.get("finetune") or {}).get("softmax_steps", 0)
    check(s.softmax_steps is None or s.softmax_steps == phase,
          f"--softmax-steps {s.softmax_steps}: the run in {out} was started with {phase}; a resumed run keeps its settings")
    valid = (run.get("valid") or {}).get("file")
    check(s.valid is None or s.valid == valid,
          f"--valid {s.valid}: the run in {out} was started with {valid}; a resumed run keeps its settings")
    check(s.valid_every is None or valid is not None, f"--valid-every: the run in {out} scores no held-out text")


def _check_same_start(s: TrainSettings, run: dict, options: dict, out: Path) -> None:
    """--init-from, --vocab and --options/--preset say what a run starts from and computes: a resumed run keeps its
    own, so a different one is refused rather than ignored."""
    keeps = "a resumed run keeps its settings"
    started = run.get("init_from")
    if s.init_from is not None and not _same_place(s.init_from, started):
        check(False, f"--init-from {s.init_from}: the run in {out} was started "
                     f"{f'from {started}' if started else 'from fresh weights, without --init-from'}; {keeps}")
    if s.vocab is not None and Vocab.load(s.vocab).tokens != Vocab.load(out / VOCAB_NAME).tokens:
        check(False, f"--vocab {s.vocab}: not the vocabulary the run in {out} was started with "
                     f"({out / VOCAB_NAME}); {keeps}")
    if s.options is not None:
        given, stored = _what_options_decide(s.options), _what_options_decide(options)
        differing = sorted(key for key in given if given[key] != stored.get(key))
        check(not differing, f"--options/--preset: {differing[0] if differing else ''} differs from the run in {out} "
                             f"({out / OPTIONS_NAME}); {keeps}")


def _same_place(given: str, stored: str | None) -> bool:
    """The same model reference: the same text, or paths to the same file or folder."""
    if stored is None:
        return False
    if given == stored:
        return True
    try:
        return os.path.exists(given) and os.path.exists(stored) and os.path.samefile(given, stored)
    except OSError:
        return False


def _what_options_decide(options: dict) -> dict:
    """An options object's architecture and training keys, as a run's options.json holds them (n_characters aside:
    a run stores the training table's 261)."""
    decided = {key: copy.deepcopy(options[key]) for key in ("lstm", "char_cnn") if key in options}
    if isinstance(decided.get("char_cnn"), dict):
        decided["char_cnn"].pop("n_characters", None)
    decided.update({key: options[key] for key, _ in OPTION_KEYS.values() if key in options and key != "n_epochs"})
    return decided


def as_flag(name: str, value, plain: bool = False) -> str:
    """A setting as the flag that chooses it (--full-softmax, not True); a bool without a flag as the API's keyword;
    `plain`: other values alone (the flag is named beside them)."""
    if (name, value) in FLAGS:
        return FLAGS[(name, value)]
    if isinstance(value, bool):
        return f"{name}={value}"
    return str(value) if plain else f"--{name.replace('_', '-')} {value}"


def _control(s: TrainSettings, stored: dict) -> dict:
    """Control's values: the flags', else the run's stored ones, else CONTROL_DEFAULTS."""
    control = {k: getattr(s, k) if getattr(s, k) is not None else stored.get(k, v) for k, v in CONTROL_DEFAULTS.items()}
    check(all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in control.values()),
          "--checkpoint-every, --checkpoint-minutes, --keep-checkpoints and --log-every must be positive")
    return control


FLAGS = {("sampled", False): "--full-softmax", ("sampled", True): "--sampled-softmax",
         ("first_layer_dropout", False): "--no-first-layer-dropout"}


def read_run_file(path: Path) -> dict:
    """run.json, as `elmo train` wrote it: a JSON object; anything else is one error naming the file."""
    try:
        run = json.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as e:
        raise InputError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg}); was the run "
                         "interrupted while writing it?") from None
    check(isinstance(run, dict), f"{path}: expected a JSON object of run settings, found {type(run).__name__}")
    for name, default in RUN_KEYS.items():
        value = run.get(name, default)
        check(type(value) is type(default) or (isinstance(default, (int, float)) and isinstance(value, (int, float))
                                                and not isinstance(value, bool)),
              f"{path}: '{name}' must be {type(default).__name__}, found {value!r}")
    train = run.get("train")
    check(isinstance(train, list) and all(isinstance(t, str) for t in train),
          f"{path}: 'train' must be a list of file names, found {train!r}")
    check(run.get("max_steps") is None or (isinstance(run["max_steps"], int) and run["max_steps"] >= 1),
          f"{path}: 'max_steps' must be a positive integer or null, found {run.get('max_steps')!r}")
    check(isinstance(run.get("chunk_lines", CHUNK_LINES), int) and run.get("chunk_lines", CHUNK_LINES) >= 1,
          f"{path}: 'chunk_lines' must be a positive integer, found {run.get('chunk_lines')!r}")
    check(run.get("init_from") is None or isinstance(run["init_from"], str),
          f"{path}: 'init_from' must be a model name or path, or null, found {run.get('init_from')!r}")
    check(isinstance(run.get("control", {}), dict), f"{path}: 'control' must be an object")
    for name in ("finetune", "valid"):
        check(run.get(name) is None or isinstance(run[name], dict), f"{path}: '{name}' must be an object or null")
    return run


def total_steps(options: dict, run: RunConfig, files: list[str], world: int) -> int:
    """--max-steps (both phases of a fine-tune), else bilm-tf's n_epochs * int(n_train_tokens / (batch * unroll *
    devices)) after the softmax phase, if any."""
    if run.max_steps:
        return int(run.max_steps)
    if not options.get("n_train_tokens"):
        print(f"counting the corpus' tokens to turn {options['n_epochs']} epochs into steps "
              "(give --max-steps, or n_train_tokens in the options, to skip this)", file=sys.stderr)
        options["n_train_tokens"] = count_targets(files)
    per_step = options["batch_size"] * options["unroll_steps"] * world
    return run.softmax_steps + max(1, int(options["n_epochs"] * max(1, options["n_train_tokens"] // per_step)))
