"""A yardstick for the PTB biLM's learning curve: a plain word-level LSTM LM with Kim et al.'s recipe.

Two LSTM layers of 300 over 300-dim word embeddings (`nn.LSTM`, nothing from this package; `--dim`), dropout
0.5 between the layers and before the softmax, all weights uniform in [-0.05, 0.05], SGD at lr 1,
gradient norm clipped at 5, the loss summed over 35 steps of batch means; the corpus read in order
as 20 contiguous streams (Zaremba et al. / Kim et al. batching). Prints the training perplexity
every 50 steps and the validation perplexity (in order, state carried) after each epoch, so the
first epochs of `ptb_char_small.py` can be compared with what this recipe gives a plain model.
`--bidirectional` adds a backward LSTM stack sharing the embedding and the softmax, trained on the
mean of the two directions' losses as our biLM; the forward LM is what is reported. The other flags
swap in one of our parts at a time (`--elmo-lstm`, `--char-cnn` and its variants): docs/training.md
has the table, which showed the 525 -> 300 projection after the highway layer stalling training.

    python benchmarks/ptb_word_reference.py --epochs 1 --threads 1

Kim's schedule is complete here: the lr halves after an epoch that improves validation perplexity by
less than 1, and after the last epoch the test set is scored. The default width, 300, is the char
model's LSTM; Kim et al.'s LSTM-Word-Small (test 97.6) is 200 wide, embeddings and LSTM
(`run_models.sh` in yoonkim/lstm-char-cnn), so `--dim 200 --epochs 25` is the run to hold against
97.6: a check of the recipe and the evaluation protocol apart from the character model. With `--out DIR` the model and schedule are saved after every epoch
and the same command continues from there:

    python benchmarks/ptb_word_reference.py --epochs 25 --threads 2 --out ../runs/ptb-word-25
"""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from elmo.files.fileio import atomic_path

SHARED = Path(os.environ.get("ELMO_SHARED", Path(__file__).resolve().parents[1].parent / "shared"))
DATA = SHARED / "data" / "ptb_mikolov"


def read_ids(path: Path, vocab: dict[str, int], shuffle: torch.Generator | None = None) -> torch.Tensor:
    """The text as one id stream, `<eos>` after each line; with `shuffle`, the lines in a random order."""
    lines = path.read_text().splitlines()
    if shuffle is not None:
        lines = [lines[i] for i in torch.randperm(len(lines), generator=shuffle)]
    words = " <eos> ".join(lines + [""]).split()
    return torch.tensor([vocab.get(w, vocab["<unk>"]) for w in words])


class WordLM(nn.Module):
    """With `bidirectional`, a second LSTM stack reads the text backwards, sharing the embedding and softmax."""

    def __init__(self, words: list[str], dim: int = 300, dropout: float = 0.5, bidirectional: bool = False,
                 elmo_lstm: bool = False, char_cnn: bool = False, kim_chars: bool = False, char_projection: bool = True):
        super().__init__()
        self.dim = dim
        self.embed = CharTokens(words, kim_chars, char_projection) if char_cnn else nn.Embedding(len(words), dim)
        self.out = nn.Linear(dim, len(words))
        width = getattr(self.embed, "dim", dim)

        def make(inputs: int) -> nn.Module:
            return _ElmoLstm(inputs) if elmo_lstm else nn.LSTM(inputs, dim, batch_first=True)

        self.lstms = nn.ModuleList([make(width), make(dim)])
        if bidirectional:
            self.backward_lstms = nn.ModuleList([make(width), make(dim)])
        self.dropout = dropout
        for name, p in self.named_parameters():
            if not ((elmo_lstm and "lstms" in name) or (char_cnn and name.startswith("embed."))):
                nn.init.uniform_(p, -0.05, 0.05)

    def forward(self, x, states, backward: bool = False):
        h, finals = self.embed(x), []
        for lstm, state in zip(self.backward_lstms if backward else self.lstms, states):
            h, final = lstm(h, state)
            h = F.dropout(h, self.dropout, self.training)
            finals.append(tuple(t.detach() for t in final))
        return self.out(h), finals


class _ElmoLstm(nn.Module):
    """This package's LSTM layer (its own initialisation) behind nn.LSTM's batch-first interface."""

    def __init__(self, inputs: int = 300):
        super().__init__()
        from ptb_char_small import kim_small

        from elmo.model.bilm import LstmLayer
        from elmo.model.options import BiLMConfig

        self.layer = LstmLayer(inputs, BiLMConfig.from_options(kim_small(300)))  # 300 cells, no projection

    def forward(self, x, state):
        h0, c0 = state
        out, (c, h) = self.layer(x, torch.full((x.shape[0],), x.shape[1]), (c0[0], h0[0]))
        return out, (h[None], c[None])


class CharTokens(nn.Module):
    """This package's character encoder with `ptb_char_small.py`'s sizes, per word id.

    Without `projection`, the 525 highway outputs are the word vector (Kim et al.'s model), not
    projected to 300. `kim`: Kim et al.'s character side instead of bilm-tf's: every weight U(-0.05, 0.05) (the
    highway's carry bias still -2, his constant), words padded only to the longest word, and the
    padding character's vector fixed at zero.
    """

    def __init__(self, words: list[str], kim: bool = False, projection: bool = True):
        super().__init__()
        from ptb_char_small import kim_small

        from elmo.model.bilm import CharEncoder
        from elmo.model.chars import EOS_TOKEN, PAD_CHAR, token_to_ids
        from elmo.model.options import BiLMConfig

        options = kim_small(300 if projection else 525)
        self.encoder = CharEncoder(BiLMConfig.from_options(options))
        self.dim = options["lstm"]["projection_dim"]
        spellings = torch.tensor([token_to_ids(EOS_TOKEN if w == "<eos>" else w) for w in words])
        if kim:
            longest = max(len(w.encode()) for w in words) + 2
            spellings = spellings[:, :longest]
            for p in self.encoder.parameters():
                nn.init.uniform_(p, -0.05, 0.05)
            with torch.no_grad():
                for b in self.encoder.highway_carry_b:
                    b.fill_(-2.0)
                self.encoder.char_embed[PAD_CHAR].zero_()
            self.encoder.char_embed.register_hook(lambda g: g.index_fill(0, torch.tensor([PAD_CHAR]), 0.0))
        self.register_buffer("spellings", spellings)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        words, where = x.unique(return_inverse=True)  # each distinct word through the CNN once
        return self.encoder(self.spellings[words])[where]


def zero_states(rows: int, dim: int = 300):
    return [(torch.zeros(1, rows, dim), torch.zeros(1, rows, dim)) for _ in range(2)]


@torch.no_grad()
def valid_perplexity(model: WordLM, ids: torch.Tensor, unroll: int) -> float:
    model.eval()
    states, nll = zero_states(1, model.dim), 0.0
    for i in range(0, len(ids) - 1, unroll):
        y = ids[i + 1 : i + unroll + 1]
        logits, states = model(ids[i : i + len(y)][None], states)
        nll += F.cross_entropy(logits[0], y, reduction="sum").item()
    model.train()
    return math.exp(nll / (len(ids) - 1))


def main() -> None:
    p = _parser()
    args = p.parse_args()
    if args.dim != 300 and (args.char_cnn or args.elmo_lstm):
        p.error("--dim sets the word model's width; --char-cnn and --elmo-lstm have the char model's 300")
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    data, unroll = Path(args.data), 35
    words = (data / "ptb.train.txt").read_text().replace("\n", " <eos> ").split()
    names = sorted(set(words))
    vocab = {w: i for i, w in enumerate(names)}
    valid_ids = read_ids(data / "ptb.valid.txt", vocab)
    shuffle = torch.Generator().manual_seed(args.seed) if args.shuffle_sentences else None
    model = WordLM(names, dim=args.dim, bidirectional=args.bidirectional, elmo_lstm=args.elmo_lstm, char_cnn=args.char_cnn,
                   kim_chars=args.kim_chars, char_projection=not args.no_char_projection)
    optimizer, groups = make_optimizer(model, args)
    train_ids = read_ids(data / "ptb.train.txt", vocab)
    saved = args.out / "state.pt" if args.out else None
    schedule = resume(saved, model, optimizer, shuffle)
    for epoch in range(schedule["epoch"] + 1, args.epochs + 1):
        if shuffle is not None:
            train_ids = read_ids(data / "ptb.train.txt", vocab, shuffle)
        train_epoch(model, optimizer, groups, train_ids, epoch, args)
        valid = valid_perplexity(model, valid_ids, unroll)
        print(f"epoch {epoch}: valid ppl {valid:.1f}", flush=True)
        if args.optimizer == "sgd" and valid > schedule["best"] - 1.0:  # Kim's rule: halve on a gain under 1
            for group in optimizer.param_groups:
                group["lr"] /= 2
            print(f"lr {optimizer.param_groups[0]['lr']:g} from epoch {epoch + 1}", flush=True)
        schedule = {"epoch": epoch, "best": min(schedule["best"], valid)}
        if saved:
            saved.parent.mkdir(parents=True, exist_ok=True)
            with atomic_path(saved) as tmp:
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "rng": torch.get_rng_state(),
                            "shuffle": shuffle.get_state() if shuffle is not None else None, "schedule": schedule}, tmp)
    if schedule["epoch"] == args.epochs:
        test = valid_perplexity(model, read_ids(data / "ptb.test.txt", vocab), unroll)
        print(f"test ppl after epoch {args.epochs}: {test:.1f}", flush=True)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default=str(DATA))
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--dim", type=int, default=300,
                   help="word embedding and LSTM width (Kim et al.'s LSTM-Word-Small: 200; not with --char-cnn/--elmo-lstm)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--optimizer", choices=["sgd", "adagrad"], default="sgd",
                   help="adagrad: bilm-tf's (initial accumulator 1.0), the default of `elmo train`")
    p.add_argument("--lr", type=float, help="default: 1 for SGD (Kim's), 0.2 for Adagrad (bilm-tf's)")
    p.add_argument("--bidirectional", action="store_true",
                   help="train a word-level biLM (the loss: mean of the two directions, as ours) and report the forward LM")
    p.add_argument("--elmo-lstm", action="store_true", help="use this package's LSTM layer instead of nn.LSTM")
    p.add_argument("--char-cnn", action="store_true",
                   help="build the word vectors with this package's character encoder (ptb_char_small.py's sizes)")
    p.add_argument("--kim-chars", action="store_true",
                   help="with --char-cnn: Kim et al.'s initialisation and padding on the character side")
    p.add_argument("--no-char-projection", action="store_true",
                   help="with --char-cnn: the 525 highway outputs feed the LSTM directly (Kim et al.'s model)")
    p.add_argument("--char-lr-scale", type=float, default=1.0,
                   help="with --char-cnn and SGD: the character encoder's learning rate, as a fraction of --lr")
    p.add_argument("--clip-separately", action="store_true",
                   help="with --char-cnn: clip the character encoder's gradient and the rest's at 5 each, not jointly")
    p.add_argument("--out", type=Path, help="save after every epoch to OUT/state.pt; rerunning the command continues")
    p.add_argument("--shuffle-sentences", action="store_true",
                   help="shuffle the training sentences each epoch before cutting the streams (as our biLM's batching)")
    return p


def make_optimizer(model: WordLM, args) -> tuple[torch.optim.Optimizer, list[list[nn.Parameter]]]:
    """SGD (the character encoder at its own rate) or Adagrad, and the parameter groups clipped apart
    with --clip-separately: the character encoder's and the rest's."""
    chars = [p for name, p in model.named_parameters() if name.startswith("embed.encoder.")]
    rest = [p for name, p in model.named_parameters() if not name.startswith("embed.encoder.")]
    if args.optimizer == "sgd":
        lr = args.lr or 1.0
        optimizer = torch.optim.SGD([{"params": rest}, {"params": chars, "lr": lr * args.char_lr_scale}], lr=lr)
    else:
        optimizer = torch.optim.Adagrad(model.parameters(), lr=args.lr or 0.2, initial_accumulator_value=1.0)
    return optimizer, [chars, rest]


def resume(saved: Path | None, model: WordLM, optimizer, shuffle: torch.Generator | None) -> dict:
    """The schedule ({"epoch", "best"}) after the last saved epoch, with the model, optimizer and random
    states put back; epoch 0 when nothing was saved."""
    if not (saved and saved.exists()):
        return {"epoch": 0, "best": math.inf}
    state = torch.load(saved, weights_only=False)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    torch.set_rng_state(state["rng"])
    if shuffle is not None:
        shuffle.set_state(state["shuffle"])
    print(f"continuing after epoch {state['schedule']['epoch']} from {saved}", flush=True)
    return state["schedule"]


def train_epoch(model: WordLM, optimizer, groups, train_ids: torch.Tensor, epoch: int, args, rows: int = 20,
                unroll: int = 35) -> None:
    """One pass over the text as `rows` contiguous streams in windows of `unroll` steps, the state carried;
    the training perplexity and mean gradient norm printed every 50 steps."""
    streams = train_ids[: len(train_ids) // rows * rows].view(rows, -1)
    reversed_streams = streams.flip(1)  # the backward LM reads each row's text from its end
    steps = (streams.shape[1] - 1) // unroll
    states, back_states, total, norms = zero_states(rows, args.dim), zero_states(rows, args.dim), 0.0, 0.0
    for step in range(steps):
        window = slice(step * unroll, (step + 1) * unroll)
        target = slice(step * unroll + 1, (step + 1) * unroll + 1)
        logits, states = model(streams[:, window], states)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), streams[:, target].reshape(-1))
        objective = loss
        if args.bidirectional:
            logits, back_states = model(reversed_streams[:, window], back_states, backward=True)
            back = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), reversed_streams[:, target].reshape(-1))
            objective = 0.5 * (loss + back)
        (objective * unroll).backward()
        if args.clip_separately:
            norm = sum(nn.utils.clip_grad_norm_(group, 5.0) ** 2 for group in groups) ** 0.5
        else:
            norm = nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        norms += float(norm)
        optimizer.step()
        optimizer.zero_grad()
        total += loss.item()
        if (step + 1) % 50 == 0:
            print(f"epoch {epoch} step {step + 1}: train ppl {math.exp(total / 50):.1f}, "
                  f"mean gradient norm {norms / 50:.2f}", flush=True)
            total = norms = 0.0


if __name__ == "__main__":
    main()
