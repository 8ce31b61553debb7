"""Statistical checks for tests, in torch (no scipy needed)."""
import torch


def chi_square_pvalue(observed, expected) -> float:
    """Pearson's chi-square goodness-of-fit p-value (df = categories - 1).

    ``expected`` is rescaled to ``observed``'s total; categories with an
    expected count of 0 must have no observations and are left out.
    """
    observed = torch.as_tensor(observed, dtype=torch.float64)
    expected = torch.as_tensor(expected, dtype=torch.float64)
    expected = expected / expected.sum() * observed.sum()
    keep = expected > 0
    assert observed[~keep].sum() == 0, "observed an impossible category"
    o, e = observed[keep], expected[keep]
    statistic = ((o - e)**2 / e).sum()
    df = torch.tensor(float(len(o) - 1), dtype=torch.float64)
    return float(torch.special.gammaincc(df / 2, statistic / 2))
