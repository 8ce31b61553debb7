"""Return and advantage estimators over [T, B] tensors."""
import torch


def generalized_advantage_estimation(rewards: torch.Tensor,
                                     values: torch.Tensor,
                                     next_values: torch.Tensor,
                                     terminated: torch.Tensor,
                                     truncated: torch.Tensor, gamma: float,
                                     gae_lambda: float) -> torch.Tensor:
    """GAE(lambda) advantages, cut at every episode end.

    Row ``t`` is the transition (s_t, a_t, r_t, s'_t). ``next_values[t]`` is
    V(s'_t), the value of the observation that really followed the action (the
    final observation when the episode ended), so:

    * termination: ``delta_t = r_t - V(s_t)`` (no bootstrap);
    * truncation (time limit): ``delta_t = r_t + gamma V(s'_t) - V(s_t)``;
    * either one stops the recursion, so no advantage mixes two episodes.

    Args:
        rewards, values, next_values: float tensors of shape [T, B].
        terminated, truncated: bool tensors of shape [T, B].
        gamma: discount.
        gae_lambda: GAE's lambda (0: one-step TD, 1: Monte Carlo).

    Returns:
        Advantages of shape [T, B]; the lambda-returns are
        ``advantages + values``.
    """
    not_term = (~terminated).to(rewards.dtype)
    deltas = rewards + gamma * not_term * next_values - values
    carry = gamma * gae_lambda * (~(terminated | truncated)).to(rewards.dtype)
    advantages = torch.empty_like(deltas)
    last = torch.zeros_like(deltas[0])
    for t in range(deltas.shape[0] - 1, -1, -1):
        last = deltas[t] + carry[t] * last
        advantages[t] = last
    return advantages
