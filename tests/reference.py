"""A deliberately plain biLM: per-width conv1d, a per-step loop over every padded step, no sorting,
no dedup, per-sentence reversal. The fast paths in elmo.model.bilm are tested against it."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def char_encoder(enc, ids: torch.Tensor) -> torch.Tensor:
    x = F.embedding(ids, enc.embedding_table())  # (N, 50, d)
    pooled = []
    for w, b in zip(enc.conv_weights, enc.conv_biases):
        y = F.conv1d(x.transpose(1, 2), w.permute(2, 1, 0), b)  # (N, n, 50-w+1)
        pooled.append(y.max(dim=2).values)
    h = torch.cat(pooled, dim=1)
    h = torch.relu(h) if enc.config.activation == "relu" else torch.tanh(h)
    for k in range(enc.config.n_highway):
        g = torch.sigmoid(h @ enc.highway_carry_w[k] + enc.highway_carry_b[k])
        t = torch.relu(h @ enc.highway_transform_w[k] + enc.highway_transform_b[k])
        h = g * t + (1 - g) * h
    if enc.proj_w is not None:
        h = h @ enc.proj_w + enc.proj_b
    return h


def lstm_sequence(layer, xs: torch.Tensor, c: torch.Tensor, h: torch.Tensor):
    """One sentence (n, in) through one TF LSTMCell with projection; returns outputs and final state."""
    H = layer.cell_dim
    outs = []
    for x in xs:
        z = torch.cat([x, h]) @ layer.W_0 + layer.B
        i, j, f, o = z[:H], z[H : 2 * H], z[2 * H : 3 * H], z[3 * H :]
        c = torch.sigmoid(f + 1.0) * c + torch.sigmoid(i) * torch.tanh(j)
        if layer.cell_clip is not None:
            c = c.clamp(-layer.cell_clip, layer.cell_clip)
        h = torch.sigmoid(o) * torch.tanh(c)
        if layer.W_P_0 is not None:
            h = h @ layer.W_P_0
            if layer.proj_clip is not None:
                h = h.clamp(-layer.proj_clip, layer.proj_clip)
        outs.append(h)
    return torch.stack(outs), c, h


def bilm_sentence(bilm, tokens_ids: torch.Tensor) -> list[torch.Tensor]:
    """All layers (L+1, n+2, 2P) for one sentence's ids (n, 50), from zero state, markers included."""
    from elmo.model.chars import BOS_IDS, EOS_IDS

    ids = torch.cat([BOS_IDS[None], tokens_ids, EOS_IDS[None]])
    x = char_encoder(bilm.char_encoder, ids)
    layers = [torch.cat([x, x], dim=-1)]
    directions = []
    for stack, seq in ((bilm.forward_lstm, x), (bilm.backward_lstm, x.flip(0))):
        outs, inp = [], seq
        for k, layer in enumerate(stack.layers):
            zero_c, zero_h = torch.zeros(layer.cell_dim), torch.zeros(layer.out_dim)
            out, _, _ = lstm_sequence(layer, inp, zero_c, zero_h)
            if k > 0 and bilm.config.use_skip_connections:
                out = out + inp
            outs.append(out)
            inp = out
        directions.append(outs)
    for f, b in zip(*directions):
        layers.append(torch.cat([f, b.flip(0)], dim=-1))
    return layers
