"""Telling a peer's failure from a cause.

When one rank crashes, dies or stalls, every other rank's next collective
fails too. Launchers report the cause once and the survivors' errors as
consequences; this module recognises those consequences and gives their
gist in one line.
"""
import torch.distributed as dist

# Lower-case phrases of gloo's, NCCL's and the stores' errors about a peer.
_PEER_FAILURE = ("connection reset", "connection closed", "broken pipe",
                 "connection refused", "timed out", "timeout")


def peer_failure_reason(error: BaseException) -> str:
    """The gist of a peer failure, e.g. "Connection reset by peer" (gloo's
    messages run to several hundred characters of file names and advice).

    Args:
        error: what a collective raised.

    Returns:
        At most 160 characters: the phrase about the peer with its
        sentence, else the first line of the message, else the error's type.
    """
    text = str(error)
    lower = text.lower()
    for phrase in _PEER_FAILURE:
        i = lower.find(phrase)
        if i >= 0:
            # A sentence ends at a full stop before a space or the end,
            # not at the dots of an address ("peer [127.0.0.1]:29500").
            end = min((j for j in (text.find(". ", i), text.find("\n", i),
                                   len(text)) if j >= 0))
            # After the last "] " or ": " before it (gloo's file and line,
            # torch's prefix), if any.
            start = max([j + 2 for j in (text.rfind("] ", 0, i),
                                         text.rfind(": ", 0, i)) if j >= 0],
                        default=0)
            return text[start:end].strip().rstrip(".")[:160]
    return text.strip().splitlines()[0][:160] if text.strip() else \
        type(error).__name__


def is_peer_failure(error: BaseException) -> bool:
    """Whether ``error`` is a collective failing because another rank
    failed, died or stalled: a consequence, not the cause, of a failure.

    Args:
        error: any exception a rank raised.

    Returns:
        True for torch's ``DistError`` and for a ``RuntimeError`` whose
        message speaks of a lost connection or a timeout.
    """
    if isinstance(error, getattr(dist, "DistError", ())):
        return True
    text = str(error).lower()
    return isinstance(error, RuntimeError) and any(
        s in text for s in _PEER_FAILURE)
