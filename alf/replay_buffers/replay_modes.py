"""The one place that reads the former spellings of a replay strategy.

Before `Replay` objects, an algorithm took ``replay`` as a string and the
prioritized options as ``priority_alpha`` and ``priority_beta``. Runs'
saved ``config.gin`` files still spell it so (``play`` rebuilds runs from
them), so `as_replay` turns those values into strategies, with a warning
naming the new spelling.
"""
from typing import Dict, Optional, Union

from alf.replay_buffers.prioritized_replay import (PrioritizedGlobalReplay,
                                                   PrioritizedReplay)
from alf.replay_buffers.replay import Replay, UniformReplay
from alf.utils.deprecation import warn_deprecated
from alf.utils.errors import ConfigError

#: The former ``replay`` strings and the strategies they name.
REPLAY_MODES: Dict[str, type] = {
    "uniform": UniformReplay,
    "prioritized": PrioritizedReplay,
    "prioritized_global": PrioritizedGlobalReplay,
}


def as_replay(replay: Union[Replay, str, None],
              priority_alpha: Optional[float] = None,
              priority_beta: Optional[float] = None) -> Replay:
    """The strategy an algorithm's ``replay`` argument asks for.

    Args:
        replay: a `Replay`; None for `UniformReplay`; or, deprecated, one of
            the `REPLAY_MODES` strings (a warning, once per string in
            each process, rank 0 only, names the new spelling).
        priority_alpha, priority_beta: deprecated; with a prioritized mode
            string, the strategy's ``alpha`` and ``beta``.

    Raises:
        ConfigError: one line, for an unknown string or another type (naming
            the valid values), or ``priority_*`` given with a `Replay` or
            None (set the strategy's own options instead).
    """
    if isinstance(replay, str):
        if replay not in REPLAY_MODES:
            raise ConfigError(
                f"replay={replay!r}; valid: {tuple(REPLAY_MODES)} (former "
                f"spellings) or a Replay object such as "
                f"@{REPLAY_MODES['prioritized'].__name__}()")
        cls = REPLAY_MODES[replay]
        warn_deprecated(
            f"replay={replay!r} is deprecated; use replay=@{cls.__name__}() "
            f"in gin ({cls.__name__}() in Python)" +
            ("" if cls is UniformReplay else
             f", with {cls.__name__}.alpha and .beta for priority_alpha "
             "and priority_beta"))
        if cls is UniformReplay:
            return cls()
        options = dict(alpha=priority_alpha, beta=priority_beta)
        return cls(**{k: v for k, v in options.items() if v is not None})
    if priority_alpha is not None or priority_beta is not None:
        raise ConfigError(
            "priority_alpha and priority_beta only go with a replay mode "
            "string (deprecated); choose the strategy and set its own "
            "options: replay = @PrioritizedReplay() with "
            "PrioritizedReplay.alpha and PrioritizedReplay.beta")
    if replay is None:
        return UniformReplay()
    if isinstance(replay, type) and issubclass(replay, Replay):
        raise ConfigError(
            f"replay={replay.__name__} is a class; pass an object: "
            f"@{replay.__name__}() in gin (with the parentheses)")
    if not isinstance(replay, Replay):
        raise ConfigError(
            f"replay={replay!r} is a {type(replay).__name__}; valid: a Replay "
            f"object such as @PrioritizedReplay(), or one of "
            f"{tuple(REPLAY_MODES)}")
    return replay
