"""Check, beside AllenNLP 2.10.1 itself, that `Elmo` state_dicts move both ways, strictly.

    bash ../shared/tools/allennlp-peer-venv.sh ../allennlp-venv      # once; outside the repo
    PYTHONPATH=src ../allennlp-venv/bin/python scripts/check_allennlp_state_dict.py

AllenNLP is never a dependency of this package; this script is the only thing that imports both.
On the shared fixture model, for a plain `Elmo` (2 representations, non-default mixes, biLM weights
moved off the file's values so nothing can come from weights.hdf5), one with `vocab_to_cache`, and a
tagger holding `self.elmo = Elmo(...)`, it checks:

  1. AllenNLP's state_dict -> `elmo.Elmo` with random weights, strict; same outputs
  2. `elmo.Elmo`'s state_dict -> AllenNLP's `Elmo`, strict; same outputs
  3. the two state_dicts of the same model have the same keys, in the same order, and shapes

"Same outputs" is the project's fixture criterion, numpy.allclose(atol=1e-6) (default rtol=1e-5):
the two implementations round differently in float32 (AllenNLP adds the input and recurrent
products of each step separately), by about 1e-6 at most. The maximum |diff| is printed too.
With `vocab_to_cache` the biLM weights are left as the file has them: AllenNLP computes the <S>/</S>
vectors once, at construction, and does not keep them in its state_dict, so after loading other
CNN weights its cached path still uses the old markers (ours recomputes them from the loaded
weights). With frozen ELMo weights, the common case, the two agree.
Outputs are compared stateless (a fresh AllenNLP module's first call starts from zero state), in
eval mode, on a batch with an empty row. Exits 1 on the first failure.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import torch
from torch import nn

warnings.filterwarnings("ignore")
from allennlp.modules.elmo import Elmo as AllenElmo  # noqa: E402
from allennlp.modules.elmo import batch_to_ids  # noqa: E402

import elmo  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
MODEL = REPO.parent / "shared" / "fixtures" / "allennlp-elmo"
OPTIONS, WEIGHTS = str(MODEL / "options.json"), str(MODEL / "lm_weights.hdf5")
MIXES = [([0.3, -1.0, 2.0], 1.7), ([-2.0, 1.0, 0.5], 0.4)]
ATOL, RTOL = 1e-6, 1e-5


def fine_tuned(model: nn.Module, bilm: bool = True) -> nn.Module:
    """Non-default mixes, the word cache's rows moved (not row 0: padding, which AllenNLP keeps zero
    and tells padding by), and with `bilm` every biLM weight moved by a small seeded step, as after
    fine-tuning."""
    gen = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("_word_embedding.weight", "_word_cache")):
                p[1:].add_(torch.randn(p[1:].shape, generator=gen) * 0.01)
            elif bilm and "scalar_mix" not in name and not name.startswith("tags."):
                p.add_(torch.randn(p.shape, generator=gen) * 0.01 * (p.abs().mean() + 1e-3))
        for mix, (weights, gamma) in zip(_mixes(model), MIXES):
            for p, value in zip(mix.scalar_parameters, weights):
                p.fill_(value)
            mix.gamma.fill_(gamma)
    return model.eval()


def _mixes(model: nn.Module) -> list:
    return [m for name, m in model.named_modules() if name.split(".")[-1].startswith("scalar_mix_")]


class Tagger(nn.Module):
    def __init__(self, make_elmo):
        super().__init__()
        self.elmo = make_elmo()
        self.tags = nn.Linear(32, 5)

    def forward(self, ids, word_ids=None):
        out = self.elmo(ids, word_ids)
        return {"elmo_representations": [self.tags(r) for r in out["elmo_representations"]], "mask": out["mask"]}


def compare(name: str, a: nn.Module, b: nn.Module, ids, word_ids=None) -> float:
    with torch.no_grad():
        out_a, out_b = a(ids, word_ids), b(ids, word_ids)
    if not torch.equal(out_a["mask"], out_b["mask"]):
        raise SystemExit(f"FAIL {name}: masks differ")
    pairs = list(zip(out_a["elmo_representations"], out_b["elmo_representations"]))
    worst = max(float((x - y).abs().max()) for x, y in pairs)
    close = all(torch.allclose(x, y, atol=ATOL, rtol=RTOL) for x, y in pairs)
    print(f"{'ok' if close else 'FAIL':4} {name}: max |diff| {worst:.3g}, allclose(atol={ATOL}, rtol={RTOL}) {close}")
    if not close:
        raise SystemExit(1)
    return worst


def same_keys(name: str, a: dict, b: dict) -> None:
    if list(a) != list(b) or any(a[k].shape != b[k].shape for k in a):
        raise SystemExit(f"FAIL {name}: keys/shapes differ:\n  {list(a)}\n  {list(b)}")
    print(f"ok   {name}: {len(a)} keys, same names, order and shapes")


def check(label: str, make_allen, make_ours, ids, word_ids=None, bilm: bool = True) -> None:
    allen = fine_tuned(make_allen(), bilm)
    torch.manual_seed(1)
    ours = make_ours().eval()
    ours.load_state_dict(allen.state_dict(), strict=True)
    compare(f"{label}: AllenNLP state_dict -> elmo.Elmo (strict)", allen, ours, ids, word_ids)

    ours = make_ours()
    ours.load_state_dict(make_allen().state_dict(), strict=True)  # start from the file's weights, as AllenNLP does
    ours = fine_tuned(ours, bilm)
    allen = make_allen().eval()
    allen.load_state_dict(ours.state_dict(), strict=True)
    compare(f"{label}: elmo.Elmo state_dict -> AllenNLP Elmo (strict)", ours, allen, ids, word_ids)
    same_keys(f"{label}: state_dict keys", ours.state_dict(), allen.state_dict())


def main() -> None:
    lists = json.loads((MODEL / "sentences.json").read_text())
    sentences = [lists[1][9].split(), lists[0][3].split(), [], lists[2][9].split()]
    ids = batch_to_ids(sentences)
    vocab = ["@@PADDING@@"] + sorted({w for s in sentences for w in s})
    index = {w: i for i, w in enumerate(vocab)}
    word_ids = torch.zeros(ids.shape[:2], dtype=torch.long)
    for r, s in enumerate(sentences):
        word_ids[r, : len(s)] = torch.tensor([index[w] for w in s], dtype=torch.long)

    check("Elmo", lambda: AllenElmo(OPTIONS, WEIGHTS, 2, dropout=0.0),
          lambda: elmo.Elmo(OPTIONS, None, 2, dropout=0.0), ids)
    check("Elmo(vocab_to_cache)", lambda: AllenElmo(OPTIONS, WEIGHTS, 1, dropout=0.0, vocab_to_cache=vocab),
          lambda: elmo.Elmo(OPTIONS, None, 1, dropout=0.0, vocab_to_cache=vocab), ids, word_ids, bilm=False)
    check("tagger holding Elmo", lambda: Tagger(lambda: AllenElmo(OPTIONS, WEIGHTS, 2, dropout=0.0)),
          lambda: Tagger(lambda: elmo.Elmo(OPTIONS, None, 2, dropout=0.0)), ids)
    print("all checks passed")


if __name__ == "__main__":
    sys.exit(main())
