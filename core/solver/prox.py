"""Proximal operators used by Algorithm 1 of Bahri et al. (ICCV 2017)."""

import numpy as np


def shrink(
    x: np.ndarray, tau: float | np.ndarray, out: np.ndarray | None = None, work: np.ndarray | None = None
) -> np.ndarray:
    """Soft-thresholding (the proximal operator of ``tau * |.|_1``), element-wise.

    ``shrink(x, tau) = sign(x) * max(|x| - tau, 0)``, the operator written
    :math:`\\mathcal{S}_\\tau` in Algorithm 1 of the paper (steps for E and R).

    Parameters
    ----------
    x : ndarray, any shape, float32 or float64
        Input values.
    tau : float
        Threshold, >= 0, in the units of ``x``.
    out : ndarray, optional
        Output array of the same shape and dtype as ``x``; may be ``x`` itself
        (the operation is then done in place).
    work : ndarray, optional
        Scratch array of the same shape and dtype as ``x``, distinct from
        ``x`` and ``out``; avoids a temporary allocation. On return it holds
        ``clip(x, -tau, tau) = x - shrink(x, tau)``, which callers may use (the
        solver's S step does).

    Returns
    -------
    ndarray
        ``out`` if given, otherwise a new array, same shape and dtype as ``x``.

    Notes
    -----
    Computed as ``x - clip(x, -tau, tau)``: two passes over memory instead
    of the four of the sign/abs/max form, and exactly equal to it.
    """
    tau = float(tau)  # a NumPy float64 scalar would promote float32 arrays (NEP 50)
    clipped = np.clip(x, -tau, tau, out=work)
    return np.subtract(x, clipped, out=out)
