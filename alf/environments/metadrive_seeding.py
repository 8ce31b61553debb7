"""A faster `get_np_random` for MetaDrive, with the same random streams.

MetaDrive seeds a new ``numpy.random.RandomState`` about 100 times per
reset (every vehicle, its navigation and its parameter space gets one),
through ``metadrive.utils.random_utils.get_np_random``: a ``RandomState()``
seeded from the operating system's entropy (a ``SeedSequence`` that hashes
624 words), then seeded again with MetaDrive's hash of ``seed``. Only the
second seeding matters. Measured on the 2-core machine (2026-11-26) that
costs ~110 us a call, a third of a steady-state reset's ~43 ms, and under a
learning policy that crashes every ~65 steps, about 9% of an environment
step (docs/benchmarks.md).

`install` replaces that function, in every MetaDrive module that holds it
(`holders`), by one that builds the generator's state with MetaDrive's
seeding only (~45 us). Before it replaces anything it checks that both
give the same generator state for a few seeds; if they do not (another
MetaDrive or numpy), it leaves MetaDrive as it is. `uninstall` puts
MetaDrive's function back. Environment workers call `install`; the module
is free of torch imports, like the rest of the worker side.
"""
import sys
from types import ModuleType
from typing import Callable, List, Optional

import numpy as np
from numpy.random.bit_generator import ISeedSequence

#: Seeds whose generator states must match before the replacement is used:
#: small, large (over 32 bits) and zero.
CHECK_SEEDS = (0, 1, 1234, 2**40 + 7)


class _NoEntropy(ISeedSequence):
    """A seed sequence that hands ``MT19937`` a constant initial state. The
    state is overwritten at once by MetaDrive's seeding, so the operating
    system's entropy, and the hashing that turns it into 624 words, would
    be wasted."""

    _STATE = np.zeros(624, np.uint32)

    def generate_state(self, n_words, dtype=np.uint32):
        if n_words != len(self._STATE) or np.dtype(dtype) != np.uint32:
            return np.zeros(n_words, dtype)
        return self._STATE


_NO_ENTROPY = _NoEntropy()


def _fast(random_utils) -> Callable:
    original = random_utils.get_np_random

    def get_np_random(seed=None, return_seed=False):
        if seed is not None and not (isinstance(seed, int) and 0 <= seed):
            # MetaDrive's own error for a bad seed.
            return original(seed, return_seed)
        seed = random_utils.create_seed(seed)
        bit_generator = np.random.MT19937(_NO_ENTROPY)
        bit_generator._legacy_seeding(
            random_utils._int_list_from_bigint(random_utils.hash_seed(seed)))
        rng = np.random.RandomState(bit_generator)
        return (rng, seed) if return_seed else rng

    get_np_random.__doc__ = original.__doc__
    get_np_random.alf_original = original  # type: ignore[attr-defined]
    return get_np_random


def _same_states(a: Callable, b: Callable) -> bool:
    for seed in CHECK_SEEDS:
        sa, sb = a(seed).get_state(), b(seed).get_state()
        if sa[0] != sb[0] or not np.array_equal(sa[1], sb[1]) \
                or tuple(sa[2:]) != tuple(sb[2:]):
            return False
    return True


def _metadrive_own(fn):
    """MetaDrive's function behind ``fn`` (``fn`` itself unless it is
    alf's replacement)."""
    return getattr(fn, "alf_original", fn)


def _original():
    from metadrive.utils import random_utils
    return random_utils, _metadrive_own(random_utils.get_np_random)


def holders() -> List[ModuleType]:
    """The loaded MetaDrive modules that hold MetaDrive's `get_np_random`
    or alf's replacement of it (each imported it by name, so each holds its
    own reference)."""
    _, original = _original()
    return [
        module for name, module in list(sys.modules.items())
        if (name == "metadrive" or name.startswith("metadrive.")) and
        _metadrive_own(getattr(module, "get_np_random", None)) is original
    ]


def install() -> Optional[int]:
    """Replaces MetaDrive's `get_np_random` in every loaded MetaDrive
    module that holds it (call it after the environment's class is
    imported, which loads the modules that reset uses).

    Returns:
        How many modules now use the faster function, or None if it was not
        installed (its generator states differ from MetaDrive's).
    """
    random_utils, original = _original()
    try:
        fast = _fast(random_utils)
        if not _same_states(original, fast):
            return None
    except (AttributeError, TypeError, ValueError):
        # A numpy or MetaDrive without the pieces it relies on.
        return None
    modules = holders()
    for module in modules:
        vars(module)["get_np_random"] = fast
    return len(modules)


def uninstall() -> int:
    """Gives every MetaDrive module its own `get_np_random` back (for
    comparisons; a later `install` finds the same modules).

    Returns:
        How many modules hold MetaDrive's function now.
    """
    _, original = _original()
    modules = holders()
    for module in modules:
        vars(module)["get_np_random"] = original
    return len(modules)
