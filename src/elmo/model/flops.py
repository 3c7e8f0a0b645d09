"""Floating-point work per token of a biLM, from its options: the yardstick for "% of the machine's limit".

The arithmetic is `BiLMConfig.forward_flops_per_token` / `train_flops_per_token` (src/elmo/model/options.py);
these take options.json's dict as the benchmarks hold it.
"""

from __future__ import annotations

from .options import BiLMConfig


def forward_flops_per_token(options: dict | BiLMConfig) -> float:
    """Multiply-adds x 2 of one token through the char CNN, highways, projection and both LSTM stacks."""
    return _config(options).forward_flops_per_token


def train_flops_per_token(options: dict | BiLMConfig, negatives: int) -> float:
    """Forward FLOPs plus both directions' sampled-softmax logits, times 3 for forward + backward."""
    return _config(options).train_flops_per_token(negatives)


def _config(options: dict | BiLMConfig) -> BiLMConfig:
    return options if isinstance(options, BiLMConfig) else BiLMConfig.from_options(options, source="options")
