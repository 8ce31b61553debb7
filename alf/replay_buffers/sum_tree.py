"""A sum tree over item priorities, vectorised in torch.

A complete binary tree stored in one tensor: leaves ``L .. 2L-1`` hold the
priorities of items ``0 .. L-1`` (``L`` is the capacity rounded up to a power
of two; the padding leaves stay 0), every inner node ``k`` holds the sum of
its children ``2k`` and ``2k+1``, and node 1 holds the total. An update of
``n`` items and a search for ``n`` prefix sums each cost ``log2(L)``
vectorised steps over ``n`` elements, with no per-item Python loop.
"""
from typing import Optional, Tuple

import torch
from torch import nn


class SumTree(nn.Module):
    """Priorities of ``capacity`` items with O(log n) sampling and updates.

    The tree is a registered buffer (float64, so that millions of small
    priorities add up without losing the small ones), so it follows
    ``.to(device)`` and, if ``persistent``, checkpoints.

    Args:
        capacity: number of items.
        persistent: whether the tree goes into ``state_dict``.
    """

    tree: torch.Tensor
    min_tree: torch.Tensor

    def __init__(self, capacity: int, persistent: bool = False):
        super().__init__()
        if capacity < 1:
            raise ValueError(f"SumTree capacity {capacity} must be positive")
        self.capacity = capacity
        self._leaves = _num_leaves(capacity)
        self._depth = self._leaves.bit_length() - 1
        self.register_buffer("tree", torch.zeros(2 * self._leaves,
                                                 dtype=torch.float64),
                             persistent=persistent)
        # The same tree with min instead of sum, over items with a positive
        # priority (empty ones are +inf): prioritized replay's largest
        # importance weight comes from the smallest priority.
        self.register_buffer("min_tree", torch.full((2 * self._leaves, ),
                                                    float("inf"),
                                                    dtype=torch.float64),
                             persistent=persistent)

    @staticmethod
    def storage_bytes(capacity: int) -> int:
        """Bytes of the two trees of a SumTree of ``capacity`` items."""
        return 2 * 2 * _num_leaves(capacity) * 8  # sum and min, float64

    def total(self) -> torch.Tensor:
        """The sum of all priorities (a 0-dim float64 tensor)."""
        return self.tree[1]

    def min(self) -> torch.Tensor:
        """The smallest positive priority (+inf if there is none)."""
        return self.min_tree[1]

    def get(self, indices: torch.Tensor) -> torch.Tensor:
        """Priorities of ``indices``."""
        return self.tree[indices.to(self.tree.device) + self._leaves]

    def update(self, indices: torch.Tensor, priorities: torch.Tensor) -> None:
        """Sets the priorities of ``indices`` (for a repeated index, the
        last value given wins).

        Raises:
            ValueError: for an index out of range or a negative or non-finite
                priority.
        """
        indices = indices.to(self.tree.device, torch.int64).reshape(-1)
        priorities = priorities.to(self.tree.device,
                                   torch.float64).reshape(-1)
        if indices.numel() != priorities.numel():
            raise ValueError(f"{indices.numel()} indices but "
                             f"{priorities.numel()} priorities")
        if indices.numel() == 0:
            return
        if bool(((indices < 0) | (indices >= self.capacity)).any()):
            raise ValueError(f"SumTree.update: index out of range "
                             f"[0, {self.capacity})")
        bad = ~torch.isfinite(priorities) | (priorities < 0)
        if bool(bad.any()):
            raise ValueError(
                f"priorities must be finite and >= 0; got "
                f"{priorities[bad][0].item()} at item "
                f"{indices[bad][0].item()}")
        # Keep the last occurrence of each index (index_put_ with repeated
        # indices writes in an unspecified order); a stable sort also leaves
        # the nodes of every level sorted, so duplicates are neighbours.
        indices, perm = torch.sort(indices, stable=True)
        last = torch.ones_like(indices, dtype=torch.bool)
        last[:-1] = indices[1:] != indices[:-1]
        nodes = indices[last] + self._leaves
        values = priorities[perm[last]]
        self.tree[nodes] = values
        self.min_tree[nodes] = torch.where(values > 0, values, float("inf"))
        for _ in range(self._depth):
            # Siblings share a parent; writing it twice writes the same sum.
            nodes = nodes // 2
            self.tree[nodes] = self.tree[2 * nodes] + self.tree[2 * nodes + 1]
            self.min_tree[nodes] = torch.minimum(self.min_tree[2 * nodes],
                                                 self.min_tree[2 * nodes + 1])

    def find(self, prefix: torch.Tensor) -> torch.Tensor:
        """For each value ``u`` in ``prefix`` (in ``[0, total)``), the item
        ``i`` with ``sum(p[:i]) <= u < sum(p[:i+1])``; never an item of
        priority 0, even when rounding puts ``u`` at the very end."""
        u = prefix.to(self.tree.device, torch.float64).clone()
        node = torch.ones_like(u, dtype=torch.int64)
        for _ in range(self._depth):
            left = self.tree[2 * node]
            right = self.tree[2 * node + 1]
            go_right = (u >= left) & (right > 0)
            u = torch.where(go_right, u - left, u)
            node = 2 * node + go_right
        return node - self._leaves

    def sample(self, n: int, generator: Optional[torch.Generator] = None
               ) -> Tuple[torch.Tensor, torch.Tensor]:
        """Draws ``n`` items independently, item ``i`` with probability
        ``p_i / total``.

        Returns:
            ``(indices, priorities)``, each of shape [n].

        Raises:
            ValueError: if every priority is 0.
        """
        total = float(self.total())
        if n and not total > 0:
            raise ValueError("cannot sample: every priority is 0")
        u = torch.rand(n, generator=generator, dtype=torch.float64) * total
        indices = self.find(u)
        return indices, self.get(indices)


def _num_leaves(capacity: int) -> int:
    """``capacity`` rounded up to a power of two."""
    return 1 << max(capacity - 1, 0).bit_length()
