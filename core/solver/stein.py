"""The Stein equation of the K-step of Algorithm 1, batched over slices.

Every slice i solves (paper Section 3.2, the K update)::

    muK K_i + mu (A^T A) K_i (B^T B) = C_i

with the same symmetric positive semi-definite A^T A and B^T B for all slices.
"""

import numpy as np
import scipy.linalg

from core.solver.products import fold, unfold


def stein_solve(AtA: np.ndarray, BtB: np.ndarray, C: np.ndarray, mu: float, muK: float) -> np.ndarray:
    """Solve ``muK K_i + mu AtA K_i BtB = C_i`` for every slice at once.

    One eigendecomposition of each Gram matrix, ``AtA = P diag(a) P^T`` and
    ``BtB = Q diag(b) Q^T``, turns every equation into an element-wise division::

        K_i = P [ (P^T C_i Q) / (muK + mu a b^T) ] Q^T

    costing O(r^3) per slice instead of the O(r^6) of the vectorised
    (r^2 x r^2) Kronecker system (paper Section 3.2; docs/algorithm.md, "The Stein step").

    Parameters
    ----------
    AtA, BtB : ndarray, shape (r, r), float32 or float64
        Symmetric positive semi-definite Gram matrices ``A^T A`` and ``B^T B``.
    C : ndarray, shape (N, r, r), same dtype
        Right-hand sides, one per slice.
    mu, muK : float
        Penalty parameters, ``mu >= 0`` and ``muK > 0``; ``muK > 0`` keeps every
        denominator positive, so the solution is unique.

    Returns
    -------
    K : ndarray, shape (N, r, r), dtype of ``C``
        The solutions.

    Raises
    ------
    ValueError
        If ``muK <= 0`` (the equation may then be singular).
    """
    return fold(stein_solve_unfolded(AtA, BtB, unfold(C), mu, muK))


def stein_solve_unfolded(AtA: np.ndarray, BtB: np.ndarray, C: np.ndarray, mu: float, muK: float) -> np.ndarray:
    """:func:`stein_solve` on unfolded cores, the window solver's layout.

    Four GEMMs on reshapes of the (r, N*r) / (r*N, r) matrices, no copies
    (:mod:`core.solver.products`).

    Parameters
    ----------
    AtA, BtB : ndarray, shape (r, r), float32 or float64
    C : ndarray, shape (r, N, r), C-contiguous
        Right-hand sides, slice i is ``C[:, i, :]``.
    mu, muK : float
        As in :func:`stein_solve`.

    Returns
    -------
    K : ndarray, shape (r, N, r), C-contiguous, dtype of ``C``

    Raises
    ------
    ValueError
        If ``muK <= 0``.
    """
    if not muK > 0:
        raise ValueError(f"muK must be > 0, got {muK}")
    # NumPy's LAPACK, not SciPy's: SciPy wheels bundle a second OpenBLAS whose idle
    # threads compete with NumPy's (core.solver.products, the unfolded layout section).
    a, P = np.linalg.eigh(AtA)
    b, Q = np.linalg.eigh(BtB)
    # Rounding can make the smallest eigenvalues slightly negative; they are >= 0.
    np.maximum(a, 0, out=a)
    np.maximum(b, 0, out=b)
    dt = C.dtype
    P, Q = P.astype(dt, copy=False), Q.astype(dt, copy=False)
    r, N, _ = C.shape
    denom = (muK + mu * np.outer(a, b)).astype(dt)
    T = ((P.T @ C.reshape(r, N * r)).reshape(r * N, r) @ Q).reshape(r, N, r)  # P^T C_i Q
    T /= denom[:, None, :]
    return ((P @ T.reshape(r, N * r)).reshape(r * N, r) @ Q.T).reshape(r, N, r)


def stein_solve_direct(AtA: np.ndarray, BtB: np.ndarray, C: np.ndarray, mu: float, muK: float) -> np.ndarray:
    """Reference solver: the vectorised (r^2 x r^2) Kronecker system, slice by slice.

    ``vec(muK K + mu AtA K BtB) = (muK I + mu BtB^T (x) AtA) vec(K)`` with
    column-major ``vec``. O(r^6) time and O(r^4) memory: for tests only.

    Parameters
    ----------
    AtA, BtB : ndarray, shape (r, r)
    C : ndarray, shape (N, r, r)
    mu, muK : float

    Returns
    -------
    K : ndarray, shape (N, r, r)
    """
    r = AtA.shape[0]
    G = muK * np.eye(r * r) + mu * np.kron(BtB.T, AtA)
    K = np.empty_like(C)
    for i, Ci in enumerate(C):
        K[i] = scipy.linalg.solve(G, Ci.reshape(-1, order="F")).reshape(r, r, order="F")
    return K
