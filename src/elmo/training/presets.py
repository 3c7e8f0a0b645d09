"""Named architectures for `elmo train --preset NAME` (options.json contents, bilm-tf style).

`original` is the released 2x4096_512_2048cnn_2xhighway model, `small` AllenNLP's
2x1024_128_2048cnn_1xhighway, and `tiny` a model two CPU cores can train on tens of millions of
tokens in a few hours. Training keys (batch size, learning rate, ...) default to the original
recipe (`trainer.OPTION_KEYS`); only `tiny` sets one, 2048 negatives, because with 8192 the
sampled softmax would cost more than the rest of the model.
"""

from __future__ import annotations

import copy

from elmo.errors import InputError

ORIGINAL_FILTERS = [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]]


def _options(filters, n_highway, dim, projection_dim, char_dim=16) -> dict:
    return {
        "lstm": {"dim": dim, "projection_dim": projection_dim, "n_layers": 2, "cell_clip": 3, "proj_clip": 3,
                 "use_skip_connections": True},
        "char_cnn": {"activation": "relu", "embedding": {"dim": char_dim}, "filters": filters, "n_highway": n_highway,
                     "max_characters_per_token": 50, "n_characters": 261},
    }


PRESETS = {
    "original": _options(ORIGINAL_FILTERS, 2, 4096, 512),
    "small": _options(ORIGINAL_FILTERS, 1, 1024, 128),
    "tiny": dict(_options([[1, 16], [2, 16], [3, 32], [4, 64], [5, 128]], 1, 256, 64), n_negative_samples_batch=2048),
}


def preset_options(name: str) -> dict:
    if name not in PRESETS:
        raise InputError(f"--preset {name}: unknown preset; choose one of {', '.join(PRESETS)}")
    return copy.deepcopy(PRESETS[name])
