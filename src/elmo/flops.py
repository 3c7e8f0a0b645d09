"""Floating-point work per token of a biLM, from its options: the yardstick for "% of the machine's limit"."""

from __future__ import annotations


def forward_flops_per_token(options: dict) -> float:
    """Multiply-adds x 2 of one token through the char CNN, highways, projection and both LSTM stacks."""
    cnn, lstm = options["char_cnn"], options["lstm"]
    d, n_filters = cnn["embedding"]["dim"], sum(n for _, n in cnn["filters"])
    width = cnn.get("max_characters_per_token", 50)
    macs = sum((width - w + 1) * w * d * n for w, n in cnn["filters"])
    macs += cnn.get("n_highway", 0) * 2 * n_filters * n_filters
    P, H = lstm["projection_dim"], lstm["dim"]
    if n_filters != P:
        macs += n_filters * P
    per_layer = 2 * P * 4 * H + (H * P if H != P else 0)
    macs += 2 * lstm["n_layers"] * per_layer
    return 2.0 * macs


def train_flops_per_token(options: dict, negatives: int) -> float:
    """Forward FLOPs plus both directions' sampled-softmax logits, times 3 for forward + backward."""
    P = options["lstm"]["projection_dim"]
    return 3.0 * (forward_flops_per_token(options) + 2 * 2 * P * (negatives + 1))
