"""Sentence classifier in the spirit of the BCN (McCann et al. 2017), the paper's SST-5 model.

[word repr ; ELMo mix] -> encoder BiLSTM -> self biattention -> integrator BiLSTM (+ optional output
mix) -> max/min/mean/self-attentive pooling -> MLP. A single sentence attends to itself, as the
BCN does for single-sentence classification.
"""

from __future__ import annotations

import torch
from torch import nn

from .layers import ModelConfig, TaskBatch, WordRepresentation, input_dim, make_mix, mix_layers, mix_summary, run_lstm

NEG = -1e4


class SentenceClassifier(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        h = cfg.hidden
        self.words = WordRepresentation(cfg)
        self.input_mix = make_mix(cfg)
        self.output_mix = make_mix(cfg) if cfg.output_mix else None
        self.dropout = nn.Dropout(cfg.dropout)
        self.encoder = nn.LSTM(input_dim(cfg), h, batch_first=True, bidirectional=True)
        self.integrator = nn.LSTM(6 * h, h, batch_first=True, bidirectional=True)
        pooled_dim = 2 * h + (cfg.elmo_dim if cfg.output_mix else 0)
        self.attend = nn.Linear(pooled_dim, 1)
        self.mlp = nn.Sequential(nn.Dropout(cfg.dropout), nn.Linear(4 * pooled_dim, h), nn.ReLU(),
                                 nn.Dropout(cfg.dropout), nn.Linear(h, len(cfg.labels)))

    def logits(self, batch: TaskBatch) -> torch.Tensor:
        mask = batch.mask
        parts = [p for p in [self.words(batch)] if p is not None]
        if self.input_mix is not None:
            parts.append(mix_layers(self.input_mix, batch.elmo, mask))
        x = run_lstm(self.encoder, self.dropout(torch.cat(parts, dim=-1)), mask)  # (B, T, 2h)
        affinity = torch.bmm(x, x.transpose(1, 2)).masked_fill(~mask.unsqueeze(1), NEG)
        context = torch.bmm(torch.softmax(affinity, dim=-1), x)
        y = run_lstm(self.integrator, self.dropout(torch.cat([x, x - context, x * context], dim=-1)), mask)
        if self.output_mix is not None:
            y = torch.cat([y, mix_layers(self.output_mix, batch.elmo, mask)], dim=-1)
        m = mask.unsqueeze(-1)
        pooled_max = y.masked_fill(~m, NEG).max(1).values
        pooled_min = y.masked_fill(~m, -NEG).min(1).values
        pooled_mean = (y * m).sum(1) / m.sum(1)
        weights = torch.softmax(self.attend(y).squeeze(-1).masked_fill(~mask, NEG), dim=1)
        pooled_attn = torch.bmm(weights.unsqueeze(1), y).squeeze(1)
        return self.mlp(torch.cat([pooled_max, pooled_min, pooled_mean, pooled_attn], dim=-1))

    def loss(self, batch: TaskBatch) -> torch.Tensor:
        return nn.functional.cross_entropy(self.logits(batch), batch.targets)

    @torch.no_grad()
    def decode(self, batch: TaskBatch) -> list[int]:
        return self.logits(batch).argmax(-1).tolist()

    def mixes(self) -> dict:
        return {"input": mix_summary(self.input_mix), "output": mix_summary(self.output_mix)}
