"""SeqVec's and bio_embeddings' calls, run on AllenNLP's own ELMo code; runs inside the AllenNLP peer virtualenv only.

Started by scripts/make_seqvec_references.py with the peer venv's python (../shared/tools/allennlp-peer-venv.sh:
AllenNLP 2.10.1, whose `_ElmoBiLm` is the module AllenNLP 0.9's `ElmoEmbedder` wrapped, with its LSTM states kept
between calls as 0.9 kept them). AllenNLP 0.9 itself, SeqVec's package and bio_embeddings need Python <= 3.8 and
torch < 1.9 and cannot be installed here, so their few lines around `_ElmoBiLm` are written out below as they are in
their sources (allennlp v0.9.0 commands/elmo.py `ElmoEmbedder.batch_to_embeddings` / `embed_batch`;
bio_embeddings v0.2.2 embed/seqvec_embedder.py and embedder_interfaces.py). Imports nothing from this project.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from allennlp.modules.elmo import _ElmoBiLm, batch_to_ids
from allennlp.nn.util import remove_sentence_boundaries

WARMUP = "MGSSHHHHHHSSGLVPRGSHMASVQKFPGDANCDGIVDISDAVLIMQTMANPSKYQMTDKGRINADVTGNSDGVTVLDAQFIQSYCLGLVELPPVE"


class ElmoEmbedder09:
    """allennlp 0.9's `ElmoEmbedder` (CPU): `_ElmoBiLm` stateful, boundaries removed, one array per sentence."""

    def __init__(self, options_file: str, weight_file: str) -> None:
        self.elmo_bilm = _ElmoBiLm(options_file, weight_file).eval()

    @torch.no_grad()
    def embed_batch(self, batch: list[list[str]]) -> list[np.ndarray]:
        output = self.elmo_bilm(batch_to_ids(batch))
        pairs = [remove_sentence_boundaries(layer, output["mask"]) for layer in output["activations"]]
        activations = torch.cat([p[0].unsqueeze(1) for p in pairs], dim=1)
        mask = pairs[0][1]
        return [activations[i, :, : int(mask[i].sum()), :].numpy() for i in range(len(batch))]

    def embed_sentence(self, sentence: list[str]) -> np.ndarray:
        return self.embed_batch([sentence])[0]

    def embed_sentences(self, sentences: list[list[str]], batch_size: int = 64):
        for i in range(0, len(sentences), batch_size):
            yield from self.embed_batch(sentences[i : i + batch_size])


class SeqVecEmbedderPeer:
    """bio_embeddings' `SeqVecEmbedder` on the CPU: 4 warm-up embeddings, `embed`, `embed_many`, `reduce_per_protein`."""

    def __init__(self, options_file: str, weights_file: str, warmup_rounds: int = 4) -> None:
        self._model = ElmoEmbedder09(options_file, weights_file)
        for _ in range(warmup_rounds):
            self.embed(WARMUP)

    def embed(self, sequence: str) -> np.ndarray:
        return self._model.embed_sentence(list(sequence))

    def embed_batch(self, batch: list[str]):
        yield from self._model.embed_batch([list(s) for s in batch])

    def embed_many(self, sequences, batch_size=None):
        if not batch_size:
            for s in sequences:
                yield self.embed(s)
            return
        batch, length = [], 0
        for sequence in sequences:
            if len(sequence) > batch_size:
                yield from self.embed_batch([sequence])
                continue
            if length + len(sequence) >= batch_size:
                yield from self.embed_batch(batch)
                batch, length = [], 0
            batch.append(sequence)
            length += len(sequence)
        yield from self.embed_batch(batch)

    @staticmethod
    def reduce_per_protein(embedding):
        return embedding.sum(0).mean(0)


def references(options: str, weights: str, columns: slice) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    # SeqVec's README: embed_sentence(list(seq)) on a fresh embedder, then embed_sentences of the sorted pair.
    embedder = ElmoEmbedder09(options, weights)
    out["readme_sentence"] = embedder.embed_sentence(list("SEQWENCE"))[..., columns]
    seqs = [list("SEQWENCE"), list("PROTEIN")]
    seqs.sort(key=len)
    for i, e in enumerate(embedder.embed_sentences(seqs)):
        out[f"readme_sentences_{i}"] = e[..., columns]
    # bio_embeddings: warm-up, embed, reduce_per_protein, embed_many with a residue budget.
    bio = SeqVecEmbedderPeer(options, weights)
    embedding = bio.embed("SEQVENCE")  # bio_embeddings' README
    out["bio_embed"] = embedding[..., columns]
    out["bio_reduced"] = bio.reduce_per_protein(embedding)
    for i, e in enumerate(bio.embed_many(["PROTEIN", "SEQVENCE", "MKTAYIAKQR"], batch_size=16)):
        out[f"bio_many_{i}"] = e[..., columns]
    # Stateless: every call from zero state.
    bilm = ElmoEmbedder09(options, weights)
    for name, seq in (("stateless_seqwence", "SEQWENCE"), ("stateless_warmup", WARMUP)):
        bilm.elmo_bilm._elmo_lstm.reset_states()
        out[name] = bilm.embed_sentence(list(seq))[..., columns]
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--options", required=True)
    p.add_argument("--weights", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--column-step", type=int, default=8)
    args = p.parse_args()
    torch.set_num_threads(1)
    np.savez_compressed(args.out, **references(args.options, args.weights, slice(None, None, args.column_step)))


if __name__ == "__main__":
    main()
