"""TwoLossA2C (two_loss_algorithm.py) that also makes a helper module
without parameters data-distributed: a user's mistake, which alf reports
in one line and does not retry (the same code would fail again)."""
import gin
import torch
from torch import nn

import alf
from two_loss_algorithm import TwoLossA2C


class Doubler(nn.Module):
    @alf.data_distributed
    def scale(self, x: torch.Tensor) -> torch.Tensor:
        return 2 * x


@gin.configurable
class MisusedDDPA2C(TwoLossA2C):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.doubler = Doubler()

    def _step(self, optimizer: torch.optim.Optimizer, loss: torch.Tensor):
        super()._step(optimizer, self.doubler.scale(loss))
