"""Helpers over nested structures (tuples, named tuples, dicts, lists).

A thin layer over `optree`, a C++ pytree library, so that the hot paths of
rollout and training do not walk structures in Python. ``None`` is a leaf-less
node (it disappears from flattened lists), as in optree.
"""
import optree

__all__ = ["map_structure", "flatten", "unflatten", "structure"]


def map_structure(fn, *nests):
    """Applies ``fn`` to the corresponding leaves of ``nests``.

    Args:
        fn: called as ``fn(leaf0, leaf1, ...)``.
        *nests: nests with the same structure.

    Returns:
        A nest of the same structure as ``nests[0]`` holding the results.
    """
    return optree.tree_map(fn, *nests, none_is_leaf=False)


def flatten(nest):
    """Returns the leaves of ``nest`` as a list, in a deterministic order."""
    return optree.tree_leaves(nest, none_is_leaf=False)


def structure(nest):
    """Returns the tree structure of ``nest`` (for `unflatten`)."""
    return optree.tree_structure(nest, none_is_leaf=False)


def unflatten(treespec, leaves):
    """Builds a nest with structure ``treespec`` from ``leaves``."""
    return optree.tree_unflatten(treespec, leaves)
