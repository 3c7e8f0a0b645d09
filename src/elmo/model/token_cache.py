"""An exact memo of the character encoder's token vectors, for inference with frozen weights
(`BiLM.token_vectors` consults it when no gradient is wanted).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from typing import Protocol

import torch


class TokenEncoder(Protocol):
    """What the cache needs of the character encoder (`bilm.CharEncoder` is one): its weights, to notice a
    change; its int8 products (None for float); and (N, 50) ids -> (N, P) vectors. Named here, not imported from
    bilm.py, so the memo sits below the model that uses it."""

    int8: object | None

    def parameters(self) -> Iterator[torch.nn.Parameter]: ...

    def __call__(self, ids: torch.Tensor) -> torch.Tensor: ...


class TokenCache:
    """An exact memo of the char encoder's outputs by token ids, for inference with frozen weights.

    Frequent tokens (the, of, ",") are then encoded once per model rather than once per batch. Any
    change to an encoder weight (an optimizer step, loading, moving devices) or to autocast empties
    it; a capacity overflow drops the oldest entries first.
    """

    def __init__(self, capacity: int = 1 << 16):
        self.capacity = capacity
        self._rows: OrderedDict[bytes, torch.Tensor] = OrderedDict()
        self._stamp: tuple | None = None

    def clear(self) -> None:
        self._rows.clear()

    def __call__(self, encoder: TokenEncoder, ids: torch.Tensor) -> torch.Tensor:
        """ids (N, 50) of distinct tokens -> (N, P), computing only the tokens not seen before."""
        stamp = (tuple((p.data_ptr(), p._version) for p in encoder.parameters()),
                 torch.is_autocast_enabled(ids.device.type), encoder.int8)  # bf16, int8 and fp32 vectors never mix
        if stamp != self._stamp:
            self._rows.clear()
            self._stamp = stamp
        # int16 keys for byte codes; lexicon ids (ELMoForManyLangs words) may need int32
        key_type = torch.int16 if ids.numel() == 0 or int(ids.max()) < 1 << 15 else torch.int32
        keys = [row.tobytes() for row in ids.to("cpu", key_type).numpy()]
        missing = [i for i, key in enumerate(keys) if key not in self._rows]
        if missing:
            for i, vector in zip(missing, encoder(ids[missing])):
                self._rows[keys[i]] = vector
        for key in keys:
            self._rows.move_to_end(key)
        vectors = torch.stack([self._rows[key] for key in keys])
        while len(self._rows) > self.capacity:
            self._rows.popitem(last=False)
        return vectors
