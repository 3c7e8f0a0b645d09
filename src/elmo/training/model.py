"""bilm-tf's training graph: two LMs sharing the character encoder and the softmax (docs/format.md section 7)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from elmo.model.bilm import BiLM, CharEncoder, LstmLayer
from elmo.model.chars import N_CODES, PAD_CHAR
from elmo.model.lstm_kernels import LstmState
from elmo.model.options import BiLMConfig

from .batchers import Batch
from .softmax import LogUniformSampler, Softmax

States = tuple[list[LstmState], list[LstmState]]  # forward, backward


class LanguageModel(nn.Module):
    """Per-position losses of the forward and backward LMs for one `Batch`.

    Dropout (training only) hits each LSTM layer's input and the top output before the softmax, as
    bilm-tf's DropoutWrapper (the first layer's input only with `first_layer_dropout`); there is
    none in the character encoder. With a sampler, training uses
    the sampled softmax, one fresh sample per direction per call; evaluation always uses the full one.
    """

    def __init__(self, config: BiLMConfig, vocab_size: int, dropout: float = 0.0, sampler: LogUniformSampler | None = None,
                 bilm: BiLM | None = None, softmax: Softmax | None = None, first_layer_dropout: bool = True):
        super().__init__()
        self.bilm = bilm if bilm is not None else BiLM(config, char_rows=N_CODES)
        self.softmax = softmax if softmax is not None else Softmax(vocab_size, config.projection_dim)
        self.dropout = dropout
        for stack in (self.bilm.forward_lstm, self.bilm.backward_lstm):
            stack.dropout, stack.first_layer_dropout = dropout, first_layer_dropout
        self.sampler = sampler

    def forward(self, batch: Batch, states: States | None = None, streaming: bool = True
                ) -> tuple[torch.Tensor, torch.Tensor, States]:
        """-> (fwd nll, bwd nll) over the valid positions (flattened), and the final LSTM states.

        `streaming`: rows are windows of continuing streams; the LSTM runs every row over the full
        window (it is causal, so steps after a row's end cannot change the losses kept). Otherwise
        rows are whole sentences sorted by descending length, each run over its own length.
        """
        tokens = self.bilm.char_encoder(batch.char_ids)
        tokens = torch.cat([tokens.new_zeros(1, tokens.shape[1]), tokens])  # index 0 = no token
        steps = batch.fwd_inputs.shape[1]
        lengths = torch.full_like(batch.lengths, steps) if streaming else batch.lengths
        if states is not None and batch.reset is not None:
            states = reset_states(states, batch.reset)
        fwd_states, bwd_states = states if states is not None else (None, None)
        fwd, fwd_final = self.bilm.forward_lstm(tokens[batch.fwd_inputs], lengths, fwd_states)
        bwd, bwd_final = self.bilm.backward_lstm(tokens[batch.bwd_inputs], lengths, bwd_states)
        losses = []
        for top, targets in ((fwd[-1], batch.fwd_targets), (bwd[-1], batch.bwd_targets)):
            h = F.dropout(top, self.dropout, training=self.training)[batch.mask]
            y = targets[batch.mask]
            if self.training and self.sampler is not None:
                losses.append(self.softmax.sampled_nll(h, y, self.sampler.sample(h.device)))
            else:
                losses.append(self.softmax.full_nll(h, y))
        return losses[0], losses[1], (fwd_final, bwd_final)


def new_language_model(config: BiLMConfig, vocab_size: int, weight_init: str = "bilm-tf", **kwargs) -> LanguageModel:
    """A LanguageModel with fresh weights, drawn as `elmo train --weight-init` says: bilm-tf's (those the
    modules draw when built) or Kim et al.'s (kim_initialise_ after that). benchmarks/ptb_char_small.py
    draws its initial model here too. `kwargs`: LanguageModel's (dropout, sampler, ...)."""
    model = LanguageModel(config, vocab_size, **kwargs)
    if weight_init == "kim":
        kim_initialise_(model)
    return model


def reset_states(states: States, rows: torch.Tensor) -> States:
    """The states with the given rows (a (B,) bool mask) set to zero: those rows start a new stream."""
    keep = (~rows.to(states[0][0][0].device)).unsqueeze(1)
    return tuple([(c * keep, h * keep) for c, h in direction] for direction in states)


def detach_states(states: States) -> States:
    """Truncated BPTT: keep the values, cut the graph at the window boundary."""
    return tuple([(c.detach(), h.detach()) for c, h in direction] for direction in states)


@torch.no_grad()
def kim_initialise_(module: nn.Module, scale: float = 0.05) -> None:
    """Kim et al. (2016)'s initialisation in place (lstm-char-cnn's main.lua), where bilm-tf's is the default.

    Every parameter U(-scale, scale), drawn in `module.parameters()` order (a BiLM and then its Softmax
    draw as one LanguageModel would), then the constants Kim keeps: the highway carry bias -2, the
    padding character's vector zero (Kim's stays zero; ours then trains), and the LSTM forget bias
    without TensorFlow's built-in +1. On PTB it trains to a lower perplexity (docs/training.md, run 3).
    """
    for param in module.parameters():
        param.uniform_(-scale, scale)
    for part in module.modules():
        if isinstance(part, CharEncoder):
            if part.config.token_input is not None or part.char_embed.shape[0] != N_CODES:
                raise ValueError(f"Kim's initialisation is for the training table of {N_CODES} byte codes, "
                                 f"found {part.char_embed.shape[0]} rows")
            for bias in part.highway_carry_b:
                bias.fill_(-2.0)
            part.char_embed[PAD_CHAR].zero_()
        elif isinstance(part, LstmLayer):
            part.B[2 * part.cell_dim : 3 * part.cell_dim] -= 1.0  # gates i, j, f, o
