"""Image denoising under salt-and-pepper noise, as the paper measures it (Section 5.2).

A stack of images (Yale-B faces: one image per slice; a colour image: one channel per slice)
is corrupted slice by slice, decomposed as ``X_i = A R_i B^T + E_i`` by
:func:`core.solver.kdrsdl`, and the low-rank part ``L`` is the denoised stack. The matrix
baseline is RPCA (inexact ALM) with the slices as the columns of one matrix.

The parameter rule (:func:`kdrsdl_params`), one for every benchmark and noise level:

- ``alpha``: the paper's 1e-3 up to 30% noise, and 6e-3 above, where the paper uses 1e-2. At
  60% noise, alpha from 6e-3 to 8e-3 beats 1e-2 on both benchmarks in PSNR and in FSIM (Yale:
  28.45 dB / 0.900 at 6e-3 against 28.08 / 0.897; Facade: 24.65 / 0.924 against 24.60 / 0.912,
  docs/results.md, "Image denoising"); up to 30%, alpha from 5e-4 to 3e-3 moves PSNR by under 0.8 dB;
- ``rank = min(m, n) // 2``: the authors' ``min(m, n)`` leaves the dictionary room to fit
  the noise once half the pixels are corrupted (Yale at 60%, this rule's lam, alpha 1e-2: PSNR 21.7 dB at
  rank 168, 28.1 at 84; Facade: 24.6 at both), and costs about 4x the time;
- ``lam = 0.6 / (density sqrt(m n))``: over the square root of a slice's pixel count, and
  falling as the noise density rises, so that the sparse part takes more of a more corrupted
  stack (the paper ties ``alpha`` to the density too). The authors' ``1 / sqrt(N max(m, n))``
  grows as the stack gets thinner: on the three slices of a colour image it is ten times too
  large (Facade at 60%: 9.6 dB against 24.6). At 10% noise, ``1 / sqrt(m n)`` lets the sparse
  part take image detail (Facade: 27.9 dB against 35.7 with the rule);
- ``tol = 1e-5``, at most 150 iterations, float32 (the same PSNR as float64 to 0.01 dB on Yale
  at 60% and Facade at 30%, in 55-60% of the time).
"""

from typing import Any

import numpy as np

from core.solver import kdrsdl
from core.solver.rpca import rpca_ialm


def salt_and_pepper(X: np.ndarray, density: float, seed: int) -> np.ndarray:
    """Salt-and-pepper noise on every slice separately.

    Parameters
    ----------
    X : ndarray, shape (N, m, n), float
        Clean images, intensity in [0, 1].
    density : float
        Share of the pixels of each slice corrupted, in [0, 1]: half set to 0, half to 1.
    seed : int
        Seed of :func:`numpy.random.default_rng` (the same seed gives the same noise).

    Returns
    -------
    ndarray, shape (N, m, n), same dtype as ``X``

    Raises
    ------
    ValueError
        If ``density`` is outside [0, 1].
    """
    if not 0 <= density <= 1:
        raise ValueError(f"density must be in [0, 1], got {density!r}")
    rng = np.random.default_rng(seed)
    Y = np.array(X, copy=True)
    for i in range(len(Y)):
        u = rng.random(Y[i].shape)
        Y[i][u < density / 2] = 0
        Y[i][(u >= density / 2) & (u < density)] = 1
    return Y


def psnr(clean: np.ndarray, restored: np.ndarray) -> float:
    """Mean over the slices of the peak signal-to-noise ratio, in dB (peak 1).

    Parameters
    ----------
    clean, restored : ndarray, shape (N, m, n), float
        Intensity in [0, 1]; ``restored`` is clipped to [0, 1] first, as an image is.

    Returns
    -------
    float
        ``mean_i 10 log10(1 / MSE_i)``, the paper's per-image mean.
    """
    clean = np.asarray(clean, np.float64)
    err = clean - np.clip(np.asarray(restored, np.float64), 0, 1)
    mse = (err**2).reshape(len(clean), -1).mean(axis=1)
    return float(np.mean(10 * np.log10(1 / np.maximum(mse, 1e-20))))


def kdrsdl_params(shape: tuple[int, int, int], density: float) -> dict[str, Any]:
    """The parameter rule (see the module docstring).

    Parameters
    ----------
    shape : (int, int, int)
        The stack's shape (N, m, n).
    density : float
        The salt-and-pepper density, in (0, 1].

    Returns
    -------
    dict
        ``rank``, ``lam``, ``alpha``, ``tol``, ``max_iter`` for :func:`core.solver.kdrsdl`.

    Raises
    ------
    ValueError
        If ``density`` is outside (0, 1].
    """
    _, m, n = shape
    if not 0 < density <= 1:
        raise ValueError(f"density must be in (0, 1], got {density!r}")
    return {
        "rank": min(m, n) // 2,
        "lam": float(0.6 / (density * np.sqrt(m * n))),
        "alpha": 1e-3 if density <= 0.3 else 6e-3,
        "tol": 1e-5,
        "max_iter": 150,
    }


def denoise_kdrsdl(Y: np.ndarray, density: float, **override: Any) -> tuple[np.ndarray, dict[str, Any]]:
    """Denoise with KDRSDL under the parameter rule.

    Parameters
    ----------
    Y : ndarray, shape (N, m, n), float
        Noisy images in [0, 1]; computed in float32.
    density : float
        The noise density (chooses ``alpha``, as the paper does).
    **override
        Parameters of :func:`core.solver.kdrsdl` that replace the rule's (e.g. ``lam`` in a sweep).

    Returns
    -------
    L : ndarray, shape (N, m, n), float32
        The low-rank part ``A R_i B^T``, the denoised images (not clipped).
    params : dict
        The parameters used.
    """
    params = {**kdrsdl_params(np.shape(Y), density), **override}
    res = kdrsdl(
        np.asarray(Y, np.float32),
        params["rank"],
        lam=params["lam"],
        alpha=params["alpha"],
        tol=params["tol"],
        max_iter=params["max_iter"],
    )
    return res.L, params


def denoise_rpca(Y: np.ndarray, tol: float = 1e-7, max_iter: int = 1000) -> tuple[np.ndarray, dict[str, Any]]:
    """Denoise with RPCA (inexact ALM; Lin et al.'s defaults), the slices as the matrix's columns.

    Parameters
    ----------
    Y : ndarray, shape (N, m, n), float
        Noisy images in [0, 1]; computed in float32.

    Returns
    -------
    L : ndarray, shape (N, m, n), float32
    params : dict
    """
    res = rpca_ialm(np.asarray(Y, np.float32), tol=tol, max_iter=max_iter)
    return res.L, {"lam": "1/sqrt(max(mn, N))", "tol": tol, "max_iter": max_iter}
