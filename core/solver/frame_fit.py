"""Robust cores of new frames on a fixed dictionary (A, B) and mean M.

docs/algorithm.md, "Per-frame cores": with A, B (and M) fixed, a frame's (K, R, E) is
solved by the same updates as Algorithm 1 restricted to that frame: O(m n r) per
frame and iteration. Used for every new frame in the streaming model and to
initialise the new slices of a warm-started window.
"""

from dataclasses import dataclass

import numpy as np

from core.solver.penalty import ETA
from core.solver.products import left_multiply, right_multiply, sandwich
from core.solver.prox import shrink
from core.solver.stein import stein_solve


@dataclass(frozen=True)
class CoreFit:
    """Output of :func:`fit_cores`.

    Attributes
    ----------
    K, R, Y : ndarray, shape (F, r, r)
        Split cores, sparse cores and their multipliers.
    E, Lam : ndarray, shape (F, m, n)
        Sparse part and its multipliers.
    mu, muK : float
        Penalties reached.
    n_iter : int
    """

    K: np.ndarray
    R: np.ndarray
    E: np.ndarray
    Lam: np.ndarray
    Y: np.ndarray
    mu: float
    muK: float
    n_iter: int


def pinv_psd(G: np.ndarray, rtol: float = 1e-6, atol: float = 1e-10) -> np.ndarray:
    """Pseudo-inverse of a symmetric positive semi-definite matrix.

    Eigenvalues below ``max(rtol * largest, atol)`` count as zero; the absolute
    floor keeps a vanishing matrix (entries ~1e-50) from being inverted into
    ~1e50.

    Parameters
    ----------
    G : ndarray, shape (r, r), float64
    rtol, atol : float

    Returns
    -------
    ndarray, shape (r, r), float64
    """
    w, V = np.linalg.eigh(0.5 * (G + G.T))
    keep = w > max(rtol * (w.max() if w.size else 0.0), atol)
    return (V[:, keep] / w[keep]) @ V[:, keep].T


def least_squares_cores(A: np.ndarray, B: np.ndarray, Xc: np.ndarray) -> np.ndarray:
    """``K_i = (A^T A)^-1 A^T Xc_i B (B^T B)^-1``: least-squares cores on fixed A, B.

    Parameters
    ----------
    A : ndarray, shape (m, r)
    B : ndarray, shape (n, r)
    Xc : ndarray, shape (F, m, n)
        Frames, mean already subtracted in mean mode.

    Returns
    -------
    ndarray, shape (F, r, r), dtype of ``Xc``

    Notes
    -----
    Pseudo-inverses of the Gram matrices (:func:`pinv_psd`) give the minimum-norm
    cores when A or B is rank-deficient, as with an over-specified r, and zero
    cores when the dictionary has collapsed (in mean mode on a static scene, M
    holds everything and A, B shrink towards 0).
    """
    AtA_inv = pinv_psd((A.T @ A).astype(np.float64))
    BtB_inv = pinv_psd((B.T @ B).astype(np.float64))
    AtXB = left_multiply(A.T, right_multiply(Xc, B))
    return left_multiply(AtA_inv.astype(Xc.dtype), right_multiply(AtXB, BtB_inv.astype(Xc.dtype)))


def fit_cores(
    A: np.ndarray,
    B: np.ndarray,
    Xc: np.ndarray,
    *,
    lam: float,
    alpha: float,
    mu_end: float,
    mu_ratio: float,
    rho: float = 1.2,
    max_iter: int = 60,
) -> CoreFit:
    """Solve the cores and sparse parts of frames on a fixed dictionary.

    The ADMM updates of Algorithm 1 (paper Section 3.2) for ``E``, ``K`` (Stein
    equation), ``R`` and the duals, with ``A`` and ``B`` held fixed. Starts from
    the least-squares cores, ``E = Lambda = Y = 0`` and ``mu = 1.25 F / sum_i
    |Xc_i|_F`` (the paper's initialisation over these frames), and grows ``mu`` by
    ``rho`` per iteration until it reaches ``mu_end`` or ``max_iter`` iterations
    ran; ``muK = mu / mu_ratio`` throughout.

    Parameters
    ----------
    A : ndarray, shape (m, r)
    B : ndarray, shape (n, r)
    Xc : ndarray, shape (F, m, n), float32 or float64
        Frames (minus the robust mean in mean mode), values around [0, 1].
    lam, alpha : float
        Weights of ``|E|_1`` and ``|R|_1`` (> 0), as in :func:`core.solver.kdrsdl`.
    mu_end : float
        Penalty at which to stop (> 0); the window solver's ``mu``.
    mu_ratio : float
        ``mu / muK`` (> 0), the window solver's ratio.
    rho : float
        Growth factor of the penalties (> 1).
    max_iter : int
        Maximum number of iterations (>= 1).

    Returns
    -------
    CoreFit
    """
    F = Xc.shape[0]
    norms = np.linalg.norm(Xc.reshape(F, -1), axis=1).sum()
    mu = float(min(ETA * F / norms, mu_end)) if norms > 0 else float(mu_end)
    K = least_squares_cores(A, B, Xc)
    R = K.copy()
    Y = np.zeros_like(K)
    E = np.zeros_like(Xc)
    Lam = np.zeros_like(Xc)
    W = np.empty_like(Xc)
    AtA = A.T @ A
    BtB = B.T @ B
    LK = sandwich(A, K, B)
    n_iter = 0
    for n_iter in range(1, max_iter + 1):  # noqa: B007 (n_iter is returned: the iterations run)
        muK = mu / mu_ratio
        np.multiply(Lam, 1.0 / mu, out=E)
        E += Xc
        E -= LK
        shrink(E, lam / mu, out=E, work=W)
        np.subtract(Xc, E, out=W)  # Xt
        W *= mu
        W += Lam  # S = mu Xt + Lambda
        C = left_multiply(A.T, right_multiply(W, B))
        C += muK * R
        C += Y
        K = stein_solve(AtA, BtB, C, mu, muK)
        R = shrink(K - Y / muK, alpha / muK)
        sandwich(A, K, B, out=LK)
        # Lambda += mu (Xt - A K B^T), i.e. Lambda = S - mu A K B^T
        np.multiply(LK, mu, out=Lam)
        np.subtract(W, Lam, out=Lam)
        Y += muK * (R - K)
        if mu >= mu_end:
            break
        mu = min(mu_end, rho * mu)
    return CoreFit(K=K, R=R, E=E, Lam=Lam, Y=Y, mu=mu, muK=mu / mu_ratio, n_iter=n_iter)


class FrameFitter:
    """:func:`fit_cores` for one frame at a time, the fixed dictionary's factorisations made once.

    Between refits every frame is fitted on the same ``A`` and ``B``; the Gram matrices, their
    pseudo-inverses (the least-squares start) and their eigendecompositions (the Stein step,
    :func:`core.solver.stein.stein_solve`) are therefore computed here once, and each
    :meth:`fit` runs only the updates of Algorithm 1 on one ``(m, n)`` frame.

    Parameters
    ----------
    A : ndarray, shape (m, r), float32 or float64
    B : ndarray, shape (n, r), same dtype
    """

    def __init__(self, A: np.ndarray, B: np.ndarray) -> None:
        self.A = np.ascontiguousarray(A)
        self.B = np.ascontiguousarray(B)
        dt = self.A.dtype
        AtA = (self.A.T @ self.A).astype(np.float64)
        BtB = (self.B.T @ self.B).astype(np.float64)
        self.AtA_inv = pinv_psd(AtA).astype(dt)
        self.BtB_inv = pinv_psd(BtB).astype(dt)
        a, P = np.linalg.eigh(AtA)
        b, Q = np.linalg.eigh(BtB)
        self.ab = np.outer(np.maximum(a, 0), np.maximum(b, 0))  # float64, as stein_solve's
        self.P, self.Q = P.astype(dt), Q.astype(dt)

    def fit(
        self,
        Xc: np.ndarray,
        *,
        lam: float,
        alpha: float,
        mu_end: float,
        mu_ratio: float,
        rho: float = 1.2,
        max_iter: int = 60,
    ) -> np.ndarray:
        """The sparse core ``R`` of one frame: :func:`fit_cores`'s ``R[0]`` for ``Xc[None]``.

        Parameters
        ----------
        Xc : ndarray, shape (m, n), dtype of ``A``
            The frame minus the robust mean.
        lam, alpha, mu_end, mu_ratio, rho, max_iter
            As for :func:`fit_cores`.

        Returns
        -------
        ndarray, shape (r, r), dtype of ``Xc``
        """
        A, B, P, Q = self.A, self.B, self.P, self.Q
        dt = Xc.dtype
        norm = float(np.linalg.norm(Xc))
        mu = float(min(ETA / norm, mu_end)) if norm > 0 else float(mu_end)
        K = self.AtA_inv @ (A.T @ Xc @ B) @ self.BtB_inv
        R = K.copy()
        Y = np.zeros_like(K)
        Lam = np.zeros_like(Xc)
        LK = A @ K @ B.T
        for _ in range(max_iter):
            muK = mu / mu_ratio
            E = Lam * dt.type(1.0 / mu)
            E += Xc
            E -= LK
            E = shrink(E, lam / mu)
            W = Xc - E
            W *= dt.type(mu)
            W += Lam  # S = mu (Xc - E) + Lambda
            C = A.T @ W @ B
            C += dt.type(muK) * R
            C += Y
            T = P.T @ C @ Q
            T /= (muK + mu * self.ab).astype(dt)
            K = P @ T @ Q.T
            R = shrink(K - Y / dt.type(muK), alpha / muK)
            LK = A @ K @ B.T
            Lam = W - dt.type(mu) * LK
            Y += dt.type(muK) * (R - K)
            if mu >= mu_end:
                break
            mu = min(mu_end, rho * mu)
        return R
