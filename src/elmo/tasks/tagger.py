"""Sequence tagger: [word repr ; ELMo mix] -> BiLSTM -> (optional output mix) -> per-token scores (+ CRF)."""

from __future__ import annotations

import torch
from torch import nn

from .crf import CRF, bio_constraints
from .layers import ModelConfig, TaskBatch, WordRepresentation, input_dim, make_mix, mix_layers, mix_summary, run_lstm


class Tagger(nn.Module):
    """BiLSTM(-CRF) tagger in the style of the paper's NER baseline (Peters et al. 2017, without the LM).

    ELMo enters as the paper describes: a learned scalar mix of the frozen biLM layers concatenated to
    the word representation, and optionally a second mix concatenated to the BiLSTM output.
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.words = WordRepresentation(cfg)
        self.input_mix = make_mix(cfg)
        self.output_mix = make_mix(cfg) if cfg.output_mix else None
        self.dropout = nn.Dropout(cfg.dropout)
        self.encoder = nn.LSTM(input_dim(cfg), cfg.hidden, num_layers=cfg.num_layers, bidirectional=True,
                               batch_first=True, dropout=cfg.dropout if cfg.num_layers > 1 else 0.0)
        out_dim = 2 * cfg.hidden + (cfg.elmo_dim if cfg.output_mix else 0)
        self.scores = nn.Linear(out_dim, len(cfg.labels))
        self.crf = CRF(len(cfg.labels), *bio_constraints(cfg.labels)) if cfg.crf else None

    def input_parts(self, batch: TaskBatch) -> dict[str, torch.Tensor]:
        """The encoder's input in its two halves, the paper's [x; ELMo]: {"word": x, "elmo": mixed layers}."""
        parts = {}
        x = self.words(batch)
        if x is not None:
            parts["word"] = x
        if self.input_mix is not None:
            parts["elmo"] = mix_layers(self.input_mix, batch.elmo, batch.mask)
        return parts

    def emissions(self, batch: TaskBatch) -> torch.Tensor:
        x = torch.cat(list(self.input_parts(batch).values()), dim=-1)
        h = run_lstm(self.encoder, self.dropout(x), batch.mask)
        if self.output_mix is not None:
            h = torch.cat([h, mix_layers(self.output_mix, batch.elmo, batch.mask)], dim=-1)
        return self.scores(self.dropout(h))

    def loss(self, batch: TaskBatch) -> torch.Tensor:
        """Mean over sentences of the CRF negative log-likelihood, or mean token cross-entropy without CRF."""
        e = self.emissions(batch)
        if self.crf is not None:
            return self.crf.neg_log_likelihood(e, batch.targets, batch.mask) / e.shape[0]
        return nn.functional.cross_entropy(e[batch.mask], batch.targets[batch.mask])

    @torch.no_grad()
    def decode(self, batch: TaskBatch) -> list[list[int]]:
        e = self.emissions(batch)
        if self.crf is not None:
            return self.crf.viterbi(e, batch.mask)
        best = e.argmax(-1)
        return [best[b, : int(n)].tolist() for b, n in enumerate(batch.mask.sum(1))]

    def mixes(self) -> dict:
        return {"input": mix_summary(self.input_mix), "output": mix_summary(self.output_mix)}
