"""Matrix robust PCA by the inexact augmented Lagrange multiplier method.

The paper's matrix baseline ("RPCA", Candes et al. 2011, solved as in Lin, Chen
and Ma 2010, Algorithm 5). No well-kept Python library implements exactly this
algorithm with these defaults (scikit-learn and SciPy have none), so it lives here,
tested, for the benchmark and the evaluation.
"""

import warnings
from dataclasses import dataclass

import numpy as np

from core.solver.kdrsdl import ConvergenceWarning
from core.solver.penalty import ETA, MU_CAP


@dataclass(frozen=True)
class RPCAResult:
    """Output of :func:`rpca_ialm`.

    Attributes
    ----------
    L : ndarray, shape (N, m, n)
        Low-rank part, frames restored to their shape.
    S : ndarray, shape (N, m, n)
        Sparse part.
    n_iter : int
    converged : bool
    rank : int
        Rank of the final low-rank matrix (mn x N).
    err : ndarray, shape (n_iter,)
        ``|D - L - S|_F / |D|_F`` per iteration.
    """

    L: np.ndarray
    S: np.ndarray
    n_iter: int
    converged: bool
    rank: int
    err: np.ndarray


def rpca_ialm(
    X: np.ndarray, *, lam: float | None = None, tol: float = 1e-7, max_iter: int = 1000, rho: float = 1.5
) -> RPCAResult:
    """Principal component pursuit, ``min |L|_* + lam |S|_1  s.t.  D = L + S``.

    Frames are the columns of ``D`` (mn x N). Defaults of Lin et al.:
    ``lam = 1/sqrt(max(mn, N))``, ``Y0 = D / max(|D|_2, |D|_inf / lam)``,
    ``mu0 = 1.25 / |D|_2``, ``mu_max = 1e7 mu0``, ``mu <- min(rho mu, mu_max)`` with
    ``rho = 1.5``; stop when ``|D - L - S|_F / |D|_F < tol``. Every iteration takes a
    thin SVD of the mn x N matrix, which is what KDRSDL's Kronecker structure avoids.

    Parameters
    ----------
    X : ndarray, shape (N, m, n), float32 or float64
        Frames, values typically in [0, 1]. Computed in the dtype of ``X``.
    lam : float, optional
        Weight of ``|S|_1`` (> 0).
    tol : float
        Stopping tolerance (> 0).
    max_iter : int
        Maximum number of iterations (>= 1).
    rho : float
        Growth factor of ``mu`` (> 1).

    Returns
    -------
    RPCAResult

    Raises
    ------
    ValueError
        If ``X`` is not a non-empty finite 3-D float array, or a parameter is out of range.

    Warns
    -----
    ConvergenceWarning
        If ``max_iter`` is reached.
    """
    X = np.asarray(X)
    if X.ndim != 3 or 0 in X.shape:
        raise ValueError(f"X must be a non-empty array of shape (N, m, n), got shape {X.shape}")
    if X.dtype not in (np.float32, np.float64):
        raise ValueError(f"X must be float32 or float64, got {X.dtype}")
    if not np.isfinite(X).all():
        raise ValueError("X contains non-finite values (NaN or inf)")
    N, m, n = X.shape
    D = np.ascontiguousarray(X.reshape(N, m * n).T)
    if lam is None:
        lam = 1.0 / np.sqrt(max(m * n, N))
    if not lam > 0 or not tol > 0 or not rho > 1 or max_iter < 1:
        raise ValueError(f"need lam > 0, tol > 0, rho > 1, max_iter >= 1; got {lam}, {tol}, {rho}, {max_iter}")
    norm_fro = np.linalg.norm(D)
    norm_two = np.linalg.norm(D, 2)
    norm_inf = np.abs(D).max() / lam
    if norm_fro == 0:
        zeros = np.zeros_like(X)
        return RPCAResult(L=zeros, S=zeros.copy(), n_iter=0, converged=True, rank=0, err=np.zeros(0))
    Y = D / max(norm_two, norm_inf)
    mu = ETA / norm_two
    mu_max = mu * MU_CAP
    S = np.zeros_like(D)
    L = np.zeros_like(D)
    errs = []
    converged = False
    rank = 0
    for _ in range(max_iter):
        T = D - S + Y / mu
        U, sig, Vt = np.linalg.svd(T, full_matrices=False)
        sig = sig - 1.0 / mu
        rank = int(np.count_nonzero(sig > 0))
        L = (U[:, :rank] * sig[:rank]) @ Vt[:rank]
        T = D - L + Y / mu
        S = np.sign(T) * np.maximum(np.abs(T) - lam / mu, 0)
        Z = D - L - S
        Y += mu * Z
        mu = min(mu * rho, mu_max)
        errs.append(float(np.linalg.norm(Z) / norm_fro))
        if errs[-1] < tol:
            converged = True
            break
    if not converged:
        warnings.warn(
            f"RPCA (inexact ALM) did not converge in {max_iter} iterations: error {errs[-1]:.3g} > tol {tol:.3g}",
            ConvergenceWarning,
            stacklevel=2,
        )
    return RPCAResult(
        L=np.ascontiguousarray(L.T).reshape(N, m, n),
        S=np.ascontiguousarray(S.T).reshape(N, m, n),
        n_iter=len(errs),
        converged=converged,
        rank=rank,
        err=np.asarray(errs),
    )
