r"""Why attention divides the scores by :math:`\sqrt{d_k}`: moments, entropy, Jacobian.

The reusable pieces of chapter 02 ("Why divide by sqrt(d_k)"):

* :func:`expected_dot_product_mean`, :func:`expected_dot_product_variance` -- the
  formulas for :math:`q\cdot k` with i.i.d. components (means and variances given);
* :func:`dot_product_moments` -- the general formula from means and covariances;
* :func:`sample_dot_products`, :func:`dot_product_stats` -- the Monte Carlo check;
* :func:`dot_product_kurtosis`, :func:`variance_relative_se` -- how precise that
  check is, i.e. the tolerance a test may use;
* :func:`softmax_entropy`, :func:`softmax_jacobian`, :func:`jacobian_norm` -- what an
  unscaled score does to the softmax and its gradient;
* :func:`explorer_figure` -- the plotly explorer over d_k and the temperature that
  works on the static book page (two sliders: one animates frames, one restyles).

Everything here is NumPy (float64); plotly is imported inside :func:`explorer_figure`.
"""
from __future__ import annotations

import math
from typing import Any, NamedTuple, Sequence, Union

import numpy as np

from . import _checks
from ._checks import is_torch_tensor
from .reference import softmax

__all__ = [
    "expected_dot_product_mean",
    "expected_dot_product_variance",
    "dot_product_moments",
    "sample_dot_products",
    "dot_product_stats",
    "DotProductStats",
    "dot_product_kurtosis",
    "variance_relative_se",
    "softmax_entropy",
    "softmax_jacobian",
    "jacobian_norm",
    "explorer_figure",
]

Seed = Union[None, int, np.random.Generator]


# --------------------------------------------------------------------------- checks
def _prob_array(name: str, p: object) -> np.ndarray:
    if is_torch_tensor(p):
        p = p.detach().to("cpu").double().numpy()  # type: ignore[attr-defined]
    arr = np.asarray(p)
    if not (np.issubdtype(arr.dtype, np.floating)):
        raise TypeError(f"{name} must be a floating-point array of probabilities; got dtype {arr.dtype}")
    if arr.ndim == 0:
        raise ValueError(f"{name} must have at least one axis (the keys); got a 0-d value")
    if np.isnan(arr).any():
        raise ValueError(f"{name} contains NaN")
    if (arr < 0).any():
        raise ValueError(f"{name} must be non-negative (softmax weights); min is {arr.min()}")
    return arr


# --------------------------------------------------------------------------- formulas
def expected_dot_product_mean(d_k: int, mu_q: float = 0.0, mu_k: float = 0.0) -> float:
    r"""Mean of :math:`q\cdot k`: :math:`E[q\cdot k] = d_k\,\mu_q\,\mu_k`.

    For q and k independent, each with components of mean ``mu_q`` (``mu_k``).
    Explained in chapter 02.
    """
    d_k = _checks.check_positive_int("d_k", d_k)
    return d_k * _checks.check_real("mu_q", mu_q) * _checks.check_real("mu_k", mu_k)


def expected_dot_product_variance(
    d_k: int,
    sigma_q: float = 1.0,
    sigma_k: float = 1.0,
    mu_q: float = 0.0,
    mu_k: float = 0.0,
) -> float:
    r"""Variance of :math:`q\cdot k = \sum_{i=1}^{d_k} q_i k_i`.

    .. math:: \operatorname{Var}(q\cdot k) = d_k\,(\sigma_q^2\sigma_k^2 + \mu_q^2\sigma_k^2
              + \mu_k^2\sigma_q^2)

    Assumes q independent of k, and the d_k products :math:`q_i k_i` uncorrelated (e.g.
    i.i.d. components), with component means ``mu_q``, ``mu_k`` and standard deviations
    ``sigma_q``, ``sigma_k``. With zero means it is :math:`d_k\sigma_q^2\sigma_k^2`, so
    the scale :math:`1/\sqrt{d_k}` gives variance :math:`\sigma_q^2\sigma_k^2` (1 for unit
    variances). No Gaussian assumption is needed. Explained in chapter 02.

    Raises TypeError/ValueError for a non-integer or non-positive ``d_k``, negative
    standard deviations and non-finite numbers.
    """
    d_k = _checks.check_positive_int("d_k", d_k)
    sq = _checks.check_real("sigma_q", sigma_q, nonnegative=True)
    sk = _checks.check_real("sigma_k", sigma_k, nonnegative=True)
    mq, mk = _checks.check_real("mu_q", mu_q), _checks.check_real("mu_k", mu_k)
    return d_k * (sq**2 * sk**2 + mq**2 * sk**2 + mk**2 * sq**2)


def dot_product_moments(
    mean_q: object, cov_q: object, mean_k: object, cov_k: object
) -> tuple:
    r"""Mean and variance of :math:`q\cdot k` for independent q, k of any distribution.

    .. math:: E[q\cdot k] = \mu_q\cdot\mu_k, \qquad
              \operatorname{Var}(q\cdot k) = \operatorname{tr}(\Sigma_q\Sigma_k)
              + \mu_q^\top\Sigma_k\mu_q + \mu_k^\top\Sigma_q\mu_k

    Shapes: ``mean_q``, ``mean_k`` (d_k,); ``cov_q``, ``cov_k`` (d_k, d_k). Only the first
    two moments and the independence of q and k are used. Returns ``(mean, variance)``
    as floats. Explained in chapter 02 (what breaks the 1/sqrt(d_k) argument).
    """
    mq, mk = (np.asarray(m, dtype=np.float64) for m in (mean_q, mean_k))
    cq, ck = (np.asarray(c, dtype=np.float64) for c in (cov_q, cov_k))
    if mq.ndim != 1 or mk.shape != mq.shape:
        raise ValueError(f"mean_q and mean_k must both have shape (d_k,); got {mq.shape} and {mk.shape}")
    d = mq.shape[0]
    for name, c in (("cov_q", cq), ("cov_k", ck)):
        if c.shape != (d, d):
            raise ValueError(f"{name} must have shape (d_k, d_k) = ({d}, {d}); got {c.shape}")
        if not np.allclose(c, c.T):
            raise ValueError(f"{name} must be symmetric (a covariance matrix)")
    mean = float(mq @ mk)
    var = float(np.sum(cq * ck.T) + mq @ ck @ mq + mk @ cq @ mk)  # tr(Σq Σk) + ...
    return mean, var


# --------------------------------------------------------------------------- Monte Carlo
def sample_dot_products(
    d_k: int,
    n_samples: int,
    sigma_q: float = 1.0,
    sigma_k: float = 1.0,
    mu_q: float = 0.0,
    mu_k: float = 0.0,
    rng: Seed = None,
    chunk_elements: int = 1 << 21,
) -> np.ndarray:
    r"""``n_samples`` independent draws of :math:`q\cdot k`, shape (n_samples,), float64.

    q and k have i.i.d. Gaussian components :math:`\mathcal N(\mu_q, \sigma_q^2)` and
    :math:`\mathcal N(\mu_k, \sigma_k^2)`. Drawn in chunks of about ``chunk_elements``
    numbers, so memory stays small for d_k = 1024. ``rng``: a Generator or a seed.
    Explained in chapter 02.
    """
    d_k = _checks.check_positive_int("d_k", d_k)
    n_samples = _checks.check_positive_int("n_samples", n_samples)
    sq = _checks.check_real("sigma_q", sigma_q, nonnegative=True)
    sk = _checks.check_real("sigma_k", sigma_k, nonnegative=True)
    mq, mk = _checks.check_real("mu_q", mu_q), _checks.check_real("mu_k", mu_k)
    chunk_elements = _checks.check_positive_int("chunk_elements", chunk_elements)
    gen = _checks.check_seed(rng, "rng")
    rows = max(1, chunk_elements // d_k)
    out = np.empty(n_samples)
    for start in range(0, n_samples, rows):
        n = min(rows, n_samples - start)
        q = mq + sq * gen.standard_normal((n, d_k))  # (n, d_k)
        k = mk + sk * gen.standard_normal((n, d_k))  # (n, d_k)
        out[start:start + n] = np.einsum("nd,nd->n", q, k)  # (n,) row-wise q·k
    return out


class DotProductStats(NamedTuple):
    """Sample statistics of q·k draws (see :func:`dot_product_stats`)."""

    d_k: int
    n_samples: int
    mean: float
    var: float
    kurtosis: float


def dot_product_stats(
    d_k: int,
    n_samples: int,
    sigma_q: float = 1.0,
    sigma_k: float = 1.0,
    mu_q: float = 0.0,
    mu_k: float = 0.0,
    rng: Seed = None,
) -> DotProductStats:
    r"""Measured mean, variance (ddof=1) and kurtosis of ``n_samples`` draws of q·k.

    Kurtosis is :math:`E[(x-\bar x)^4]/\operatorname{Var}(x)^2` (3 for a Gaussian).
    Arguments as in :func:`sample_dot_products`. Explained in chapter 02.
    """
    x = sample_dot_products(d_k, n_samples, sigma_q, sigma_k, mu_q, mu_k, rng=rng)
    if x.size < 2:
        raise ValueError("dot_product_stats needs n_samples >= 2 to measure a variance")
    c = x - x.mean()
    m2 = float(np.mean(c**2))
    kurt = float(np.mean(c**4) / m2**2) if m2 > 0 else float("nan")
    return DotProductStats(int(d_k), int(n_samples), float(x.mean()), float(x.var(ddof=1)), kurt)


def dot_product_kurtosis(d_k: int) -> float:
    r"""Kurtosis of :math:`q\cdot k` for zero-mean Gaussian q, k: :math:`3 + 6/d_k`.

    One product of independent zero-mean normals has :math:`E[(q_ik_i)^4] =
    E[q_i^4]E[k_i^4] = 9\sigma_q^4\sigma_k^4`, kurtosis 9 (excess 6); a sum of d_k
    independent copies divides the excess by d_k. Explained in chapter 02.
    """
    return 3.0 + 6.0 / _checks.check_positive_int("d_k", d_k)


def variance_relative_se(n_samples: int, kurtosis: float = 3.0) -> float:
    r"""Relative standard error of a sample variance: :math:`\sqrt{(\kappa - 1)/N}`.

    From :math:`\operatorname{Var}(s^2) \approx (\mu_4 - \sigma^4)/N` for N independent
    samples of a variable with kurtosis :math:`\kappa = \mu_4/\sigma^4` (large N).
    Explained in chapter 02, where it sets the Monte Carlo tolerance.
    """
    n = _checks.check_positive_int("n_samples", n_samples)
    kappa = _checks.check_real("kurtosis", kurtosis)
    if kappa < 1:
        raise ValueError(f"kurtosis is always >= 1; got {kappa}")
    return math.sqrt((kappa - 1.0) / n)


# --------------------------------------------------------------------------- softmax
def softmax_entropy(weights: object, axis: int = -1) -> np.ndarray:
    r"""Entropy in nats of each distribution along ``axis``: :math:`H(p) = -\sum_j p_j\log p_j`.

    Uses :math:`0\log 0 = 0`. H is 0 for a one-hot row and :math:`\log n` for a uniform row
    of n entries. A row of all zeros (a fully masked query, see chapter 01) has no
    distribution; it gets entropy **0**, like a one-hot row, so such rows never produce
    NaN. Shape: ``weights`` (..., n, ...) -> the shape without ``axis``.

    Raises TypeError for non-float input and ValueError for NaN, negative weights, or rows
    that neither sum to 1 (within 1e-6 in float64, 1e-3 otherwise) nor are all zero.
    Explained in chapter 02.
    """
    p = _prob_array("weights", weights)
    total = p.sum(axis=axis)
    tol = 1e-6 if p.dtype == np.float64 else 1e-3
    bad = ~((np.abs(total - 1) <= tol) | (total == 0))
    if bad.any():
        raise ValueError(
            f"weights must sum to 1 along axis {axis} (or be all zero); got sums "
            f"{np.asarray(total)[bad].ravel()[:3]}"
        )
    p = p.astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = p * np.log(1.0 / np.where(p > 0, p, 1.0))  # p log(1/p); 0 at p = 0
    return terms.sum(axis=axis)


def softmax_jacobian(p: object) -> np.ndarray:
    r"""Jacobian of the softmax at weights p: :math:`J = \operatorname{diag}(p) - p\,p^\top`.

    :math:`J_{ij} = \partial p_i / \partial s_j = p_i(\delta_{ij} - p_j)` where
    :math:`p = \operatorname{softmax}(s)`. Batched: p (..., n) -> J (..., n, n).
    J is symmetric positive semi-definite, its rows sum to 0, and it vanishes at a
    one-hot p (a saturated softmax passes no gradient to its scores).
    Explained in chapter 02.
    """
    p = _prob_array("p", p).astype(np.float64)
    eye = np.eye(p.shape[-1])
    return p[..., :, None] * eye - p[..., :, None] * p[..., None, :]  # (..., n, n)


def jacobian_norm(p: object, ord: str = "spectral") -> np.ndarray:
    r"""Norm of the softmax Jacobian at p, for every row: shape (...,) for p (..., n).

    ``ord="spectral"`` (default): the largest eigenvalue of J (J is symmetric PSD), the
    most a unit change of the scores can move the weights; :math:`1/n` at a uniform p,
    at most 1/2, and 0 at a one-hot p. ``ord="fro"``: the Frobenius norm.
    Explained in chapter 02.
    """
    if ord not in ("spectral", "fro"):
        raise ValueError(f"ord must be 'spectral' or 'fro'; got {ord!r}")
    J = softmax_jacobian(p)  # (..., n, n)
    if ord == "fro":
        return np.sqrt((J**2).sum(axis=(-2, -1)))
    return np.linalg.eigvalsh(J)[..., -1]


# --------------------------------------------------------------------------- explorer
def _step_density(x: np.ndarray, bins: int = 40):
    """A histogram of x as (bin centres, densities), bins symmetric around 0."""
    lim = float(np.abs(x).max()) or 1.0
    dens, edges = np.histogram(x, bins=bins, range=(-lim, lim), density=True)
    return 0.5 * (edges[1:] + edges[:-1]), dens


def explorer_figure(
    d_ks: Sequence[int] = (1, 4, 16, 64, 256, 1024),
    temperatures: Sequence[float] = (0.25, 0.5, 1.0, 2.0, 4.0),
    n_keys: int = 32,
    n_queries: int = 64,
    rng: Seed = 0,
    initial_d_k: int = 64,
    initial_temperature: float = 1.0,
) -> Any:
    r"""Plotly explorer: d_k and temperature T -> scores and one query's weights.

    For every d_k, ``n_queries`` queries and ``n_keys`` keys with i.i.d. N(0, 1)
    components give scores :math:`s = q\cdot k` (n_queries, n_keys). Left: the
    distribution of all scores, scaled :math:`s/\sqrt{d_k}` and unscaled :math:`s`.
    Middle / right: the weights of query 0 over its keys (sorted by score),
    :math:`\operatorname{softmax}(s/(T\sqrt{d_k}))` and :math:`\operatorname{softmax}(s/T)`,
    with the largest weight and the entropy in the legend.

    It works on a static page with no kernel, with two independent sliders:

    * **d_k** (``sliders[0]``): each step *animates* to a precomputed frame named
      ``"d_k=64"``. A frame holds new data for *all* traces, every temperature's
      included, but no ``visible`` flags, so animating keeps what the other slider
      shows; it also sets the score panel's axis ranges explicitly (an animation does
      not recompute autoranges);
    * **T** (``sliders[1]``): each step *restyles* the ``visible`` flags, showing the
      two weight charts of that temperature and hiding the others.

    So every (d_k, T) pair is reachable from any state, with no JavaScript callback.
    Returns a ``plotly.graph_objects.Figure``. Explained in chapter 02.
    """
    d_ks = [_checks.check_positive_int("d_ks[i]", d) for d in d_ks]
    temps = [_checks.check_real("temperatures[i]", t) for t in temperatures]
    if not d_ks or not temps:
        raise ValueError("explorer_figure needs at least one d_k and one temperature")
    if any(t <= 0 for t in temps):
        raise ValueError(f"temperatures must be > 0; got {temps}")
    if initial_d_k not in d_ks:
        raise ValueError(f"initial_d_k={initial_d_k} is not one of d_ks={d_ks}")
    if initial_temperature not in temps:
        raise ValueError(f"initial_temperature={initial_temperature} is not one of {temps}")
    n_keys = _checks.check_positive_int("n_keys", n_keys)
    n_queries = _checks.check_positive_int("n_queries", n_queries)
    gen = _checks.check_seed(rng, "rng")
    import plotly.graph_objects as go  # noqa: PLC0415  (after the checks: bad input fails without plotly)
    from plotly.subplots import make_subplots  # noqa: PLC0415

    # scores for every d_k, computed once: (n_queries, n_keys)
    scores = {}
    for d in d_ks:
        Q = gen.standard_normal((n_queries, d))  # (n_queries, d_k)
        K = gen.standard_normal((n_keys, d))  # (n_keys, d_k)
        scores[d] = Q @ K.T  # (n_queries, n_keys)
    colours = {"scaled": "#1f77b4", "unscaled": "#d62728"}

    def traces(d: int) -> list:
        """The 2 score densities, then 2 weight bar charts per temperature."""
        s = scores[d]
        order = np.argsort(-s[0])  # query 0's keys, best first
        out = []
        for kind, x in (("scaled", s / math.sqrt(d)), ("unscaled", s)):
            xc, dens = _step_density(x.ravel())
            out.append(go.Scatter(
                x=xc, y=dens, mode="lines", line_shape="hvh",
                line_color=colours[kind], fill="tozeroy",
                name=f"{kind} scores: std {x.std():.3g}", xaxis="x", yaxis="y"))
        for t in temps:
            for col, kind, f in ((2, "scaled", 1 / (t * math.sqrt(d))), (3, "unscaled", 1 / t)):
                w = softmax(f * s[0])[order]  # (n_keys,)
                h = float(softmax_entropy(w))
                out.append(go.Bar(
                    x=np.arange(n_keys), y=w, marker_color=colours[kind],
                    name=f"{kind} weights: max {w.max():.2f}, entropy {h:.2f} nats",
                    xaxis=f"x{col}", yaxis=f"y{col}"))
        return out

    def ranges(d: int) -> dict:
        """Explicit axis ranges for the score panel (animate keeps stale autoranges)."""
        s = scores[d]
        r = 1.05 * max(float(np.abs(s).max()), float(np.abs(s).max()) / math.sqrt(d))
        top = max(float(_step_density(x.ravel())[1].max()) for x in (s, s / math.sqrt(d)))
        return {"xaxis.range": [-r, r], "yaxis.range": [0, 1.08 * top]}

    fig = make_subplots(
        rows=1, cols=3, column_widths=[0.38, 0.31, 0.31], horizontal_spacing=0.08,
        subplot_titles=("all scores (before T)",
                        "query 0: scaled weights",
                        "query 0: unscaled weights"))
    t0 = temps.index(initial_temperature)
    n_traces = 2 + 2 * len(temps)

    def visible(j: int) -> list:
        return [i < 2 or (i - 2) // 2 == j for i in range(n_traces)]

    for tr, vis in zip(traces(initial_d_k), visible(t0)):
        tr.visible = vis
        fig.add_trace(tr)
    fig.update_layout(**ranges(initial_d_k))
    fig.frames = [go.Frame(data=traces(d), name=f"d_k={d}", layout=ranges(d)) for d in d_ks]

    dk_steps = [{
        "method": "animate", "label": str(d),
        "args": [[f"d_k={d}"], {"mode": "immediate", "frame": {"duration": 0, "redraw": True},
                                "transition": {"duration": 0}}],
    } for d in d_ks]
    t_steps = [{"method": "restyle", "label": f"{t:g}", "args": [{"visible": visible(j)}]}
               for j, t in enumerate(temps)]
    fig.update_layout(
        title={"text": "Scores and weights as d_k and the temperature T change"},
        height=680, margin=dict(t=80, b=250, l=60, r=20), bargap=0.1,
        legend=dict(orientation="h", x=0.5, xanchor="center", y=-0.62, yanchor="top"),
        sliders=[
            {"active": d_ks.index(initial_d_k), "steps": dk_steps, "x": 0.0, "len": 0.48,
             "y": -0.2, "yanchor": "top", "pad": {"t": 30},
             "currentvalue": {"prefix": "d_k = ", "font": {"size": 14}}},
            {"active": t0, "steps": t_steps, "x": 0.52, "len": 0.48,
             "y": -0.2, "yanchor": "top", "pad": {"t": 30},
             "currentvalue": {"prefix": "temperature T = ", "font": {"size": 14}}},
        ],
    )
    fig.update_xaxes(title_text="score q·k (scaled: ÷√d_k)", row=1, col=1)
    fig.update_yaxes(title_text="density", row=1, col=1)
    for col in (2, 3):
        fig.update_xaxes(title_text="key (sorted by score)", row=1, col=col)
        fig.update_yaxes(range=[0, 1.05], row=1, col=col)
    fig.update_yaxes(title_text="attention weight", row=1, col=2)
    return fig
