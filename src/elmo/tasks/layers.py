"""Pieces shared by the task models: the batch, the task's own word representation, the ELMo mixes."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import torch
from torch import nn

from elmo.model.scalar_mix import ScalarMix

N_CHAR_IDS = 262  # batch_to_ids codes: 0 = padding, 1..261 = bytes and markers
PAD_ID = 261  # the in-token padding code (PAD_CHAR + 1) that fills a token's unused slots


@dataclass
class TaskBatch:
    """Padded inputs of a batch: word ids (B, T), char ids (B, T, 50), mask (B, T), cached ELMo layers
    (B, L+1, T, D) or None, and targets (tags (B, T) or labels (B,)) or None."""

    words: torch.Tensor
    chars: torch.Tensor
    mask: torch.Tensor
    elmo: torch.Tensor | None = None
    targets: torch.Tensor | None = None


@dataclass
class ModelConfig:
    """Everything needed to rebuild a task model before loading its weights."""

    kind: str  # "tagger" or "classifier"
    labels: list[str]
    vocab_size: int
    static_dim: int = 0  # 0: no static word vectors
    char_filters: int = 50  # 0: no character CNN
    char_dim: int = 16
    hidden: int = 200
    num_layers: int = 1
    dropout: float = 0.5
    elmo_layers: int = 0  # L+1 of the biLM, 0 without ELMo
    elmo_dim: int = 0
    output_mix: bool = False
    crf: bool = False
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


class CharCNN(nn.Module):
    """Character convolution with max pooling: a word vector for any token, OOV included."""

    def __init__(self, char_dim: int, filters: int, width: int = 3):
        super().__init__()
        self.embed = nn.Embedding(N_CHAR_IDS, char_dim, padding_idx=0)
        self.conv = nn.Conv1d(char_dim, filters, width, padding=width // 2)

    def forward(self, chars: torch.Tensor) -> torch.Tensor:
        # Cut the 50 slots to the batch's longest word: most words are short, and the padding columns
        # were most of the convolution's cost. Train and predict both do this, so they agree.
        used = ((chars != PAD_ID) & (chars != 0)).flatten(0, 1).any(0).nonzero()
        chars = chars[:, :, : int(used.max()) + 1] if len(used) else chars[:, :, :1]
        b, t, c = chars.shape
        x = self.embed(chars.view(b * t, c)).transpose(1, 2)  # (B*T, char_dim, C)
        return torch.relu(self.conv(x)).max(dim=2).values.view(b, t, -1)


class WordRepresentation(nn.Module):
    """The task's own context-free word vector: [frozen static vector ; char CNN], as in the paper's baselines."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.static = nn.Embedding(cfg.vocab_size, cfg.static_dim, padding_idx=0) if cfg.static_dim else None
        if self.static is not None:
            self.static.weight.requires_grad_(False)
        self.chars = CharCNN(cfg.char_dim, cfg.char_filters) if cfg.char_filters else None
        self.dim = cfg.static_dim + cfg.char_filters

    def forward(self, batch: TaskBatch) -> torch.Tensor | None:
        parts = []
        if self.static is not None:
            parts.append(self.static(batch.words))
        if self.chars is not None:
            parts.append(self.chars(batch.chars))
        return torch.cat(parts, dim=-1) if parts else None


def make_mix(cfg: ModelConfig) -> ScalarMix | None:
    return ScalarMix(cfg.elmo_layers) if cfg.elmo_layers else None


def mix_layers(mix: ScalarMix, elmo: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B, L+1, T, D) cached layers -> (B, T, D) task-specific ELMo vector."""
    return mix([elmo[:, j] for j in range(elmo.shape[1])], mask)


def mix_summary(mix: ScalarMix | None) -> dict | None:
    """The learned layer weights s = softmax(w) and scale gamma, for reports and presets."""
    if mix is None:
        return None
    return {"weights": [round(float(w), 6) for w in mix.weights().detach()], "gamma": round(float(mix.gamma.detach()), 6)}


def input_dim(cfg: ModelConfig) -> int:
    d = cfg.static_dim + cfg.char_filters + cfg.elmo_dim
    if d == 0:
        raise ValueError("the model has no input: give static vectors, a char CNN or ELMo")
    return d


def run_lstm(lstm: nn.LSTM, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """A (bi)LSTM over padded sequences that never reads the padding (so backward states are right)."""
    lengths = mask.sum(1).cpu()
    packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
    out, _ = lstm(packed)
    out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])
    return out
