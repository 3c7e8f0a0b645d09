"""A yardstick for the PTB biLM's learning curve: a plain word-level LSTM LM with Kim et al.'s recipe.

Two LSTM layers of 300 over 300-dim word embeddings (`nn.LSTM`, nothing from this package), dropout
0.5 between the layers and before the softmax, all weights uniform in [-0.05, 0.05], SGD at lr 1,
gradient norm clipped at 5, the loss summed over 35 steps of batch means; the corpus read in order
as 20 contiguous streams (Zaremba et al. / Kim et al. batching). Prints the training perplexity
every 50 steps and the validation perplexity (in order, state carried) after each epoch, so the
first epochs of `ptb_char_small.py` can be compared with what this recipe gives a plain model.
`--bidirectional` adds a backward LSTM stack sharing the embedding and the softmax, trained on the
mean of the two directions' losses as our biLM; the forward LM is what is reported.

    python benchmarks/ptb_word_reference.py --epochs 1 --threads 1
"""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

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

    def __init__(self, vocab_size: int, dim: int = 300, dropout: float = 0.5, bidirectional: bool = False,
                 elmo_lstm: bool = False):
        super().__init__()
        self.embed, self.out = nn.Embedding(vocab_size, dim), nn.Linear(dim, vocab_size)
        make = _ElmoLstm if elmo_lstm else (lambda: nn.LSTM(dim, dim, batch_first=True))
        self.lstms = nn.ModuleList([make() for _ in range(2)])
        if bidirectional:
            self.backward_lstms = nn.ModuleList([make() for _ in range(2)])
        self.dropout = dropout
        for name, p in self.named_parameters():
            if not elmo_lstm or "lstms" not in name:
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

    def __init__(self, dim: int = 300):
        super().__init__()
        from elmo.bilm import LstmLayer
        from elmo.options import BiLMConfig

        config = BiLMConfig.from_options({
            "lstm": {"dim": dim, "projection_dim": dim, "n_layers": 1, "cell_clip": None, "proj_clip": None,
                     "use_skip_connections": False},
            "char_cnn": {"activation": "tanh", "embedding": {"dim": 4}, "filters": [[1, 4]], "n_highway": 0,
                         "max_characters_per_token": 50, "n_characters": 261}})
        self.layer = LstmLayer(dim, config)

    def forward(self, x, state):
        h0, c0 = state
        out, (c, h) = self.layer(x, torch.full((x.shape[0],), x.shape[1]), (c0[0], h0[0]))
        return out, (h[None], c[None])


def zero_states(rows: int, dim: int = 300):
    return [(torch.zeros(1, rows, dim), torch.zeros(1, rows, dim)) for _ in range(2)]


@torch.no_grad()
def valid_perplexity(model: WordLM, ids: torch.Tensor, unroll: int) -> float:
    model.eval()
    states, nll = zero_states(1), 0.0
    for i in range(0, len(ids) - 1, unroll):
        y = ids[i + 1 : i + unroll + 1]
        logits, states = model(ids[i : i + len(y)][None], states)
        nll += F.cross_entropy(logits[0], y, reduction="sum").item()
    model.train()
    return math.exp(nll / (len(ids) - 1))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default=str(DATA))
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=1.0)
    p.add_argument("--bidirectional", action="store_true",
                   help="train a word-level biLM (the loss: mean of the two directions, as ours) and report the forward LM")
    p.add_argument("--elmo-lstm", action="store_true", help="use this package's LSTM layer instead of nn.LSTM")
    p.add_argument("--shuffle-sentences", action="store_true",
                   help="shuffle the training sentences each epoch before cutting the streams (as our biLM's batching)")
    args = p.parse_args()
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    data, rows, unroll = Path(args.data), 20, 35
    words = (data / "ptb.train.txt").read_text().replace("\n", " <eos> ").split()
    vocab = {w: i for i, w in enumerate(sorted(set(words)))}
    valid_ids = read_ids(data / "ptb.valid.txt", vocab)
    shuffle = torch.Generator().manual_seed(args.seed) if args.shuffle_sentences else None
    model = WordLM(len(vocab), bidirectional=args.bidirectional, elmo_lstm=args.elmo_lstm)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    train_ids = read_ids(data / "ptb.train.txt", vocab)
    for epoch in range(1, args.epochs + 1):
        if shuffle is not None:
            train_ids = read_ids(data / "ptb.train.txt", vocab, shuffle)
        streams = train_ids[: len(train_ids) // rows * rows].view(rows, -1)
        reversed_streams = streams.flip(1)  # the backward LM reads each row's text from its end
        steps = (streams.shape[1] - 1) // unroll
        states, back_states, total = zero_states(rows), zero_states(rows), 0.0
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
            nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            optimizer.step()
            optimizer.zero_grad()
            total += loss.item()
            if (step + 1) % 50 == 0:
                print(f"epoch {epoch} step {step + 1}: train ppl {math.exp(total / 50):.1f}", flush=True)
                total = 0.0
        print(f"epoch {epoch}: valid ppl {valid_perplexity(model, valid_ids, unroll):.1f}", flush=True)


if __name__ == "__main__":
    main()
