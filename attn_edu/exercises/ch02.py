"""Chapter 02's self-checking exercise: the mean and variance of q·k when the
assumptions behind 1/sqrt(d_k) fail."""
from __future__ import annotations

from typing import List, Optional

import numpy as np

from ..scaling import dot_product_moments as _gold_moments
from ..i18n import gettext as _
from ._harness import Case, checker, describe

__all__ = ["check_dot_product_moments"]


@checker("dot_product_moments", chapter=2)
def check_dot_product_moments() -> List[Case]:
    r"""Grade ``fn(mean_q, cov_q, mean_k, cov_k) -> (mean, variance)`` of :math:`q\cdot k`
    for independent q and k:

    .. math:: E[q\cdot k] = \mu_q\cdot\mu_k, \qquad
              \operatorname{Var}(q\cdot k) = \operatorname{tr}(\Sigma_q\Sigma_k)
              + \mu_q^\top\Sigma_k\mu_q + \mu_k^\top\Sigma_q\mu_k .

    Shapes: means (d_k,), covariances (d_k, d_k). The hidden cases: the textbook case
    (zero means, identity covariances), different variances, non-zero means in q only and
    in both, a correlation in one vector and in both, LayerNorm'ed inputs, d_k = 1 and an
    odd d_k with unequal diagonal entries.
    """
    rng = np.random.default_rng(22)

    def spd(d):  # a random covariance matrix (symmetric positive definite)
        a = rng.standard_normal((d, d))
        return a @ a.T / d + 0.1 * np.eye(d)

    def equicorrelated(d, rho):
        return (1 - rho) * np.eye(d) + rho * np.ones((d, d))

    d = 8
    zero, eye = np.zeros(d), np.eye(d)
    layer_norm = d / (d - 1) * (eye - np.ones((d, d)) / d)
    inputs = [
        ("zero means, identity covariances (d_k = 8): variance d_k", zero, eye, zero, eye),
        ("sigma_q = 0.5, sigma_k = 3: variance d_k sigma_q^2 sigma_k^2", zero, 0.25 * eye, zero, 9 * eye),
        ("a mean in q only (mu_q = 2)", np.full(d, 2.0), eye, zero, eye),
        ("means in both q and k", np.full(d, 0.5), eye, np.full(d, -1.0), 2 * eye),
        ("q correlated (rho = 0.5), k isotropic", zero, equicorrelated(d, 0.5), zero, eye),
        ("q and k both correlated (rho = 0.5): grows like d_k^2", zero, equicorrelated(d, 0.5),
         zero, equicorrelated(d, 0.5)),
        ("LayerNorm'ed q and k (components sum to 0)", zero, layer_norm, zero, layer_norm),
        ("d_k = 1", np.array([1.5]), np.array([[2.0]]), np.array([-0.5]), np.array([[0.5]])),
        ("d_k = 5, unequal means and general covariances", rng.standard_normal(5), spd(5),
         rng.standard_normal(5), spd(5)),
    ]
    return [Case(name, (mq, cq, mk, ck), _judge(*_gold_moments(mq, cq, mk, ck)),
                 shown=f"d_k = {len(mq)}; {name}")
            for name, mq, cq, mk, ck in inputs]


def _judge(mean: float, var: float):
    """A complaint naming the mean or the variance, or None when both agree (1e-9 relative)."""

    def judge(got) -> Optional[str]:
        try:
            g_mean, g_var = (float(x) for x in got)
        except (TypeError, ValueError):
            return _("expected a pair (mean, variance), got {got}").format(got=describe(got))
        for what, g, e in ((_("the mean should be {want}, got {got}"), g_mean, mean),
                           (_("the variance should be {want}, got {got}"), g_var, var)):
            if not abs(g - e) <= 1e-9 * max(1.0, abs(e)):
                return what.format(want=f"{e:.6g}", got=f"{g:.6g}")
        return None

    return judge
