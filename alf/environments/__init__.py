"""Environments: batched gymnasium environments returning torch tensors.

Submodules are imported where used (``alf.environments.suite_gym``), so that
environment worker processes, which import `alf.environments.env_fn`, do not
pay for torch.
"""
