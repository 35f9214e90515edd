"""tandem.torch.elastic: Horovod Elastic's TorchState over tandem's
collectives (docs/elastic.md, "The elastic API"), with tandem.elastic's
run, State and ObjectState.

    state = tandem.torch.elastic.TorchState(model, optimizer, epoch=0, batch=0)

    @tandem.torch.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, epochs):
            for state.batch in range(state.batch, batches):
                ...
                optimizer.step()
                state.commit()
            state.batch = 0
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from tandem.elastic import ObjectState, State, broadcast_object, run

__all__ = ["ObjectState", "State", "TorchState", "broadcast_object", "run"]


class TorchState(ObjectState):
    """A model's parameters and buffers and an optimizer's state (momentum,
    step counts, hyper-parameters), plus keyword arguments as in
    ObjectState. save() copies the state_dicts in memory, restore() loads
    them back (and drops the gradient reductions of a step that a change
    interrupted, for tandem.torch's DistributedOptimizer), sync() broadcasts
    rank 0's."""

    def __init__(self, model: torch.nn.Module | None = None, optimizer: Any = None,
                 **kwargs: Any) -> None:
        self.model = model
        self.optimizer = optimizer
        self._model_saved: dict[str, torch.Tensor] | None = None
        self._optimizer_saved: dict[str, Any] | None = None
        super().__init__(**kwargs)

    def save(self) -> None:
        if self.model is not None:
            self._model_saved = {k: v.detach().clone()
                                 for k, v in self.model.state_dict().items()}
        if self.optimizer is not None:
            self._optimizer_saved = copy.deepcopy(self.optimizer.state_dict())
        super().save()

    def restore(self) -> None:
        abandon = getattr(self.optimizer, "abandon_step", None)
        if abandon is not None:
            abandon()
        if self.model is not None and self._model_saved is not None:
            self.model.load_state_dict(self._model_saved)
        if self.optimizer is not None and self._optimizer_saved is not None:
            self.optimizer.load_state_dict(copy.deepcopy(self._optimizer_saved))
        super().restore()

    def sync(self) -> None:
        from tandem import torch as tandem_torch  # tandem.torch imports this module
        if self.model is not None:
            tandem_torch.broadcast_parameters(self.model.state_dict(), root_rank=0)
        if self.optimizer is not None:
            tandem_torch.broadcast_optimizer_state(self.optimizer, root_rank=0)
        super().sync()  # the keyword arguments, then save()
