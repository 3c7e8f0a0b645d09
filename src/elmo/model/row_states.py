"""The biLM's stateful mode (doc 4.8): each batch row keeps its final LSTM states for the next call,
as the original tools do, so a long text fed in pieces reads as one.
"""

from __future__ import annotations

import torch

from .lstm_kernels import LstmState


class RowStates:
    """Per direction and layer, each batch row's final (c, h), where that row's next call starts.

    Rows beyond those stored start from zero (and are stored from then on); a call with fewer rows
    leaves the other rows' states as they were. `by_direction` is None until the first call.
    """

    def __init__(self):
        self.by_direction: dict[str, list[LstmState]] | None = None

    def clear(self) -> None:
        self.by_direction = None

    def initial(self, stacks: dict, batch: int, like: torch.Tensor,
                order: torch.Tensor) -> tuple[list[LstmState], list[LstmState]]:
        """The forward and backward stacks' (`stacks`, by direction) starting states for `batch` rows in `order`."""
        if self.by_direction is None:
            self.by_direction = {direction: [layer.zero_state(0, like) for layer in stack.layers]
                                 for direction, stack in stacks.items()}
        picked = {}
        for direction, states in self.by_direction.items():
            rows = []
            for k, (c, h) in enumerate(states):
                if c.shape[0] < batch:  # new rows start from zero
                    c = torch.cat([c, c.new_zeros(batch - c.shape[0], c.shape[1])])
                    h = torch.cat([h, h.new_zeros(batch - h.shape[0], h.shape[1])])
                    states[k] = (c, h)
                rows.append((c[:batch][order], h[:batch][order]))
            picked[direction] = rows
        return picked["forward"], picked["backward"]

    def store(self, fwd_final: list[LstmState], bwd_final: list[LstmState], unsort: torch.Tensor) -> None:
        """Keep the call's final states (rows in the call's sorted order; `unsort` puts them back)."""
        for direction, finals in (("forward", fwd_final), ("backward", bwd_final)):
            states = self.by_direction[direction]
            for k, (c, h) in enumerate(finals):
                old_c, old_h = states[k]
                n = c.shape[0]
                states[k] = (
                    torch.cat([c.detach()[unsort], old_c[n:]]),
                    torch.cat([h.detach()[unsort], old_h[n:]]),
                )
