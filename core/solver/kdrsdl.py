"""Algorithm 1 of Bahri, Panagakis, Zafeiriou, "Robust Kronecker-Decomposable
Component Analysis for Low-Rank Modeling", ICCV 2017 (KDRSDL), batch solver.
"""

import threading
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from core.solver.blocks import row_blocks
from core.solver.frame_fit import fit_cores
from core.solver.penalty import ETA, MU_CAP
from core.solver.products import fold, left_unfolded, right_unfolded, sandwich, slice_norms_unfolded, unfold
from core.solver.prox import shrink
from core.solver.state import KDRSDLState
from core.solver.stein import stein_solve_unfolded

#: What :func:`core.solver.fused.sweep` reads for the robust mean outside mean mode.
_NO_MEAN = np.zeros((0, 0), np.float32)


class ConvergenceWarning(UserWarning):
    """The solver stopped at ``max_iter`` before the stopping criterion met ``tol``."""


class Cancelled(Exception):
    """The solve was cancelled through its ``cancel`` event (no result)."""


def _check(cancel: threading.Event | None) -> None:
    if cancel is not None and cancel.is_set():
        raise Cancelled("KDRSDL solve cancelled")


@dataclass(frozen=True)
class KDRSDLResult:
    """The output of :func:`kdrsdl`.

    Attributes
    ----------
    A : ndarray, shape (m, r)
    B : ndarray, shape (n, r)
    R : ndarray, shape (N, r, r)
        Sparse cores; the low-rank part is ``L_i = M + A R_i B^T``.
    E : ndarray, shape (N, m, n)
        Sparse part (foreground, outliers).
    M : ndarray, shape (m, n), or None
        Robust mean (mean mode), None otherwise.
    n_iter : int
        Iterations run.
    converged : bool
        Whether the stopping criterion fell below ``tol``.
    err_rec, err_split : ndarray, shape (n_iter,), float64
        Per-iteration ``max_i |Xt_i - A R_i B^T|_F / |X_i|_F`` and
        ``max_i |R_i - K_i|_F / |R_i|_F`` (unsquared, as the authors' code). With
        ``lazy_criterion``, ``err_rec`` is NaN at the iterations where it was not computed.
    warm_start : bool
        Whether the solve started from ``init``.
    state : KDRSDLState
        Everything a warm start needs.
    """

    A: np.ndarray
    B: np.ndarray
    R: np.ndarray
    E: np.ndarray
    M: np.ndarray | None
    n_iter: int
    converged: bool
    err_rec: np.ndarray
    err_split: np.ndarray
    warm_start: bool
    state: KDRSDLState

    @property
    def K(self) -> np.ndarray:
        """Split variable ``K``, shape (N, r, r)."""
        return self.state.K

    @property
    def criterion(self) -> np.ndarray:
        """Per-iteration stopping criterion ``max(err_rec, err_split)``, shape (n_iter,) (NaN where
        ``err_rec`` was not computed, :func:`kdrsdl`'s ``lazy_criterion``)."""
        return np.maximum(self.err_rec, self.err_split)

    @property
    def L(self) -> np.ndarray:
        """Low-rank part ``L_i = M + A R_i B^T``, shape (N, m, n), computed on access."""
        L = sandwich(self.A, self.R, self.B)
        if self.M is not None:
            L += self.M
        return L


def _right_divide_spd(num, G, dtype):
    """``num / G`` (MATLAB right division) for ``G = I + (positive semi-definite)``, r x r.

    In exact arithmetic every eigenvalue of ``G`` is >= 1. At large mu the identity
    is lost to rounding (even in float64) and Cholesky can fail, so the solve goes
    through ``eigh`` with the eigenvalues clamped at 1: ``num V diag(1/w) V^T``.
    """
    w, V = np.linalg.eigh(0.5 * (G + G.T))
    np.maximum(w, 1.0, out=w)
    X = ((num.astype(np.float64) @ V) / w) @ V.T
    return np.ascontiguousarray(X, dtype=dtype)


def _validate_X(X):
    X = np.asarray(X)
    if X.ndim != 3:
        raise ValueError(f"X must have 3 dimensions (N frames, m rows, n columns), got shape {X.shape}")
    if 0 in X.shape:
        raise ValueError(f"X must not be empty, got shape {X.shape}")
    if X.dtype not in (np.float32, np.float64):
        raise ValueError(
            f"X must be float32 or float64 with values around [0, 1] (divide 8-bit frames by 255), got {X.dtype}"
        )
    if not np.isfinite(X).all():
        raise ValueError("X contains non-finite values (NaN or inf)")
    if X.transpose(1, 0, 2).flags.c_contiguous:  # already the loop's unfolded layout: no copy
        return X
    return np.ascontiguousarray(X)


def _positive(name, value):
    if not (np.isscalar(value) and np.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


def _cold_init(X, r, mean, align_signs, cancel=None):
    """Paper Section 4 initialisation: per-slice thin SVD, averaged singular vectors.

    ``X`` is (N, m, n); the cores and pixel stacks come back unfolded,
    (r, N, r) and (m, N, n) (:mod:`core.solver.products`). One SVD per slice, with
    ``cancel`` checked between them (a slice of 720 x 1280 takes about a second).
    """
    N, m, n = X.shape
    U = np.empty((N, m, r), X.dtype)
    V = np.empty((N, n, r), X.dtype)
    s = np.empty((N, min(m, n)), X.dtype)
    for i in range(N):
        _check(cancel)
        u, s[i], vt = np.linalg.svd(X[i], full_matrices=False)
        U[i], V[i] = u[:, :r], vt[:r].T
    if align_signs:
        # Documented deviation: flip each slice's singular pairs to agree with the first
        # slice's before averaging, so that opposite signs do not cancel (docs/algorithm.md, "Algorithm 1").
        sgn = np.sign(np.einsum("imr,mr->ir", U, U[0]))
        sgn[sgn == 0] = 1
        U = U * sgn[:, None, :]
        V = V * sgn[:, None, :]
    A = np.ascontiguousarray(U.mean(axis=0))
    B = np.ascontiguousarray(V.mean(axis=0))
    K = np.zeros((r, N, r), dtype=X.dtype)
    idx = np.arange(r)
    K[idx, :, idx] = s[:, :r].T
    R = K.copy()
    M = np.zeros((m, n), dtype=X.dtype) if mean else None
    norm_R = slice_norms_unfolded(R, np.float64).sum()
    muK0 = float(ETA * N / norm_R) if norm_R > 0 else ETA
    return A, B, K, R, np.zeros((m, N, n), dtype=X.dtype), np.zeros_like(K), M, muK0


def _balance(A, R, B, alpha):
    """Scales ``(c, d, 1/(c d))`` for ``A, B, R`` that leave every ``A R_i B^T`` unchanged
    and minimise ``(|cA|_F^2 + |dB|_F^2) / 2 + alpha |R / (c d)|_1``.

    The factorisation's scale is otherwise free: at a large (capped) mu the
    regularisers barely act and, over many warm starts, A and B drift towards 0 and
    R towards infinity (measured on a 1700-frame video: |A| 0.44 -> 0.005, |R| 1e4 ->
    2e7), degrading the background. With t = c d: minimising over c for a fixed t
    gives ``c^2 = t |B| / |A|`` and the cost ``t |A| |B| + alpha |R|_1 / t``, so
    ``t = sqrt(alpha |R|_1 / (|A| |B|))``. A documented addition to the paper's
    warm start; it moves towards the regularised optimum and leaves L as it was.
    """
    a, b = float(np.linalg.norm(A)), float(np.linalg.norm(B))
    rho1 = float(np.abs(R).sum(dtype=np.float64))
    if not (a > 1e-6 and b > 1e-6 and rho1 > 0 and np.isfinite(a * b * rho1)):
        return 1.0, 1.0, 1.0  # a collapsed dictionary (L = M in mean mode): nothing to balance
    t = np.sqrt(alpha * rho1 / (a * b))
    c = np.sqrt(t * b / a)
    return c, t / c, 1.0 / t


def _warm_init(X, init, r, mean, mu0, rho, backoff, lam, alpha, rebalance):
    N, m, n = X.shape
    dt = X.dtype
    if init.frame_shape != (m, n) or init.rank != r:
        raise ValueError(
            f"init has frame shape {init.frame_shape} and rank {init.rank}, "
            f"but X has frame shape {(m, n)} and rank {r} was asked"
        )
    N_old = init.n_slices
    if N_old > N:
        raise ValueError(f"init holds {N_old} slices, more than the {N} frames of X (slide it first)")
    A = np.array(init.A, dtype=dt)
    B = np.array(init.B, dtype=dt)
    if mean:
        M = np.array(init.M, dtype=dt) if init.M is not None else np.zeros((m, n), dtype=dt)
    else:
        M = None
    K = np.empty((r, N, r), dtype=dt)  # unfolded, as the solver's loop keeps them
    scale_A, scale_B, scale_R = _balance(A, init.R, B, alpha) if rebalance else (1.0, 1.0, 1.0)
    A *= scale_A
    B *= scale_B
    # Back mu off from its final (possibly capped) value so that the E threshold
    # lam/mu is not ~0 (which freezes the background), and scale muK by the same factor
    # so that mu/muK is unchanged (docs/algorithm.md, "Warm start").
    mu = float(max(mu0, init.mu * rho ** (-backoff)))
    muK = float(init.muK * (mu / init.mu))
    new = None
    if N > N_old:
        # New slices: a robust fit on the kept A, B (and M), with mu ramped from these
        # frames' mu0 up to the window's mu, so that E, Lambda and the cores of the new
        # frames are consistent with the penalty they continue at (a plain
        # least-squares core with E = 0 lets E absorb the whole residual at large mu).
        # Made before the window's Lambda, so that the fit's temporaries and that window-sized
        # array are never held at once; the frames C-contiguous whatever X's layout.
        Xnew = np.subtract(X[N_old:], M, order="C") if mean else np.ascontiguousarray(X[N_old:])
        fit = fit_cores(A, B, Xnew, lam=lam, alpha=alpha, mu_end=mu, mu_ratio=mu / muK, rho=rho)
        new = (fit.K, fit.R, fit.Lam, fit.Y)  # not the fit's E: the first iteration makes E
        del Xnew, fit
    # init.E is not needed: the first iteration makes E from X, M, A K B^T and Lambda.
    Lam = np.zeros((m, N, n), dtype=dt)
    Y = np.zeros_like(K)
    R = np.empty_like(K)
    for U, old, scale in ((K, init.K, scale_R), (Lam, init.Lam, 1.0), (Y, init.Y, scale_R), (R, init.R, scale_R)):
        np.multiply(old.transpose(1, 0, 2), scale, out=U[:, :N_old])
    if new is not None:
        for U, a in zip((K, R, Lam, Y), new, strict=True):
            U[:, N_old:] = a.transpose(1, 0, 2)
    return A, B, K, R, Lam, Y, M, init.muK0, mu, muK


def _check_args(X, rank, lam, alpha, tol, rho, max_iter, init, backoff):
    """The arguments of :func:`kdrsdl` checked and completed with their defaults.

    Returns
    -------
    tuple
        ``(X, r, lam, alpha, tol, rho, backoff)``: ``X`` C-contiguous, ``r`` an int, the rest floats.

    Raises
    ------
    ValueError
        As :func:`kdrsdl` lists.
    """
    X = _validate_X(X)
    N, m, n = X.shape
    if rank is None:
        rank = min(m, n)
    if not isinstance(rank, (int, np.integer)) or not 1 <= rank <= min(m, n):
        raise ValueError(f"rank must be an integer in 1..{min(m, n)} (min(m, n)), got {rank!r}")
    lam = _positive("lam", 1.0 / np.sqrt(N * max(m, n)) if lam is None else lam)
    alpha = _positive("alpha", alpha)
    tol = _positive("tol", tol)
    rho = float(rho)
    if not (np.isfinite(rho) and rho > 1):
        raise ValueError(f"rho must be a finite number > 1, got {rho!r}")
    if not isinstance(max_iter, (int, np.integer)) or max_iter < 1:
        raise ValueError(f"max_iter must be an integer >= 1, got {max_iter!r}")
    if init is not None and not isinstance(init, KDRSDLState):
        raise ValueError(f"init must be a KDRSDLState (result.state), got {type(init).__name__}")
    if backoff is None:
        backoff = 20 if init is not None and init.n_slices < N else 0
    if not (np.isfinite(backoff) and backoff >= 0):
        raise ValueError(f"backoff must be a finite number >= 0, got {backoff!r}")
    return X, int(rank), lam, alpha, tol, rho, backoff


@dataclass
class _Pixels:
    """The loop's pixel-sized arrays, unfolded (m, N, n), and the constants the sweep reads.

    Two scaled variables stand for S and Lambda (the same iterates, fewer passes; :func:`_sweep`):
    ``T = S / mu = Xt + Lambda / mu`` and ``Q = Lambda / mu``, with mu the penalty of the E step
    that reads them. ``TB`` is ``T_i B`` (m, N, r), made block by block with ``T``. A sweep makes
    iteration k + 1's E before iteration k's criterion is known, and reads no E: where that
    criterion is computed (it may stop the solve, which then returns iteration k's E), the new E
    goes to a second buffer, ``E_prev`` (made at the first such sweep; None until then), elsewhere
    over the old one (a warm refit on its budget computes it only at its last iteration, which
    makes no new E: a window less in memory). ``W`` and ``LK`` are block scratch (rows of the
    largest block, N, n).
    """

    X1: np.ndarray
    X_mean: np.ndarray | None  # mean over frames of X (mean mode), (m, n)
    lam: float
    T: np.ndarray
    Q: np.ndarray
    TB: np.ndarray
    E: np.ndarray
    E_prev: np.ndarray | None
    W: np.ndarray
    LK: np.ndarray
    blocks: list[slice]

    @classmethod
    def allocate(cls, X1, Lam, mu, r, lam, mean):
        """Buffers for frames ``X1`` (m, N, n); ``Lam`` (the solver's own array) becomes ``Q``."""
        m, N, n = X1.shape
        blocks = row_blocks(m, N * n * X1.itemsize)
        k_max = max(b.stop - b.start for b in blocks)
        Lam *= 1.0 / mu
        return cls(
            X1=X1,
            X_mean=X1.mean(axis=1) if mean else None,
            lam=lam,
            T=np.empty_like(X1),
            Q=Lam,
            TB=np.empty((m, N, r), dtype=X1.dtype),
            E=np.empty_like(X1),
            E_prev=None,
            W=np.empty((k_max, N, n), dtype=X1.dtype),
            LK=np.empty((k_max, N, n), dtype=X1.dtype),
            blocks=blocks,
        )


def _sweep(px, rows, AK, AR, B, M, c, E, mu, criterion=True, fused=None):
    """Iteration k's step 7 and criterion, then iteration k + 1's steps 1-2, on ``rows``.

    ``AK`` = A K_i (m, N, r); ``AR`` = A R_i (m, N, r) of iteration k, or None in the first
    sweep (no iteration k); ``c`` = mu_k / mu_{k+1}; ``criterion`` False skips the criterion
    (one of the sweep's three products) and returns None. ``E`` is the buffer for iteration k + 1's
    E, or None in a final sweep (no iteration k + 1); ``mu`` = mu_{k+1}. ``M`` (mean mode, else
    None) is updated in place. Returns, over these rows, the per-slice sums of
    ``|Xt - A R_i B^T|^2`` (iteration k's stopping criterion, divided through by mu_k), or None.

    With ``T = S / mu`` and ``Q = Lambda / mu`` (mu = mu_k before step 7):
      criterion  mu_k (Xt - A R_i B^T) / mu_k = T - Q - A R_i B^T
      step 7     Lambda <- S - mu_k A K_i B^T,  so  Q <- c (T - A K_i B^T)
      step 1     Z = X - M - A K_i B^T + Q,  E = shrink(Z) = Z - clip(Z)
      step 2     T = Xt + Q = A K_i B^T + clip(Z) + M - M'
    (``Xt = X - E - M'`` substituted: exactly the same quantity, fewer passes).

    ``fused``: :func:`core.solver.fused.sweep`, which makes step 7 and steps 1-2 in one compiled
    pass over the rows (the same bits), or None for numpy's passes.
    """
    k = rows.stop - rows.start
    w, lk, t, q = px.W[:k], px.LK[:k], px.T[rows], px.Q[rows]
    right_unfolded(AK[rows], B.T, out=lk)
    partial = None
    if AR is not None:
        if criterion:
            right_unfolded(AR[rows], B.T, out=w)
            np.subtract(t, w, out=w)
            w -= q
            partial = np.einsum("ain,ain->i", w, w).astype(np.float64)
        if fused is None or E is None:
            np.subtract(t, lk, out=q)
            if c != 1.0:
                q *= c
    if E is None:
        return partial
    e = E[rows]
    if fused is not None:
        mean = M is not None
        Mr = M[rows] if mean else _NO_MEAN
        fused(lk, t, q, px.X1[rows], e, Mr, px.X_mean[rows] if mean else _NO_MEAN,
              lk.dtype.type(c), lk.dtype.type(px.lam / mu), AR is not None, mean)  # fmt: skip
        right_unfolded(t, B, out=px.TB[rows])
        return partial
    np.add(q, px.X1[rows], out=e)
    e -= lk
    if M is not None:
        e -= M[rows, None, :]
    shrink(e, px.lam / mu, out=e, work=w)  # w = clip(Z, -lam/mu, lam/mu)
    np.add(lk, w, out=t)
    if M is not None:
        # robust mean M' = mean_i (X_i - E_i) (docs/algorithm.md, "The robust mean")
        M_new = px.X_mean[rows] - e.mean(axis=1)
        t += (M[rows] - M_new)[:, None, :]
        M[rows] = M_new
    right_unfolded(t, B, out=px.TB[rows])
    return partial


def _update_dictionary(TB, T, K, B, mu):
    """Steps 3 and 4: the new A, then the new B with it.

    ``A = (sum_i S_i B K_i^T) / (I + mu sum_i K_i B^T B K_i^T)`` and
    ``B = (sum_i S_i^T A K_i) / (I + mu sum_i K_i^T A^T A K_i)``, right divisions by symmetric
    matrices >= I through their eigendecomposition, never an explicit inverse.

    Parameters
    ----------
    TB : ndarray, shape (m, N, r)
        ``T_i B`` with ``T = S / mu`` (unfolded).
    T : ndarray, shape (m, N, n)
        ``S / mu`` (unfolded).
    K : ndarray, shape (r, N, r)
        The cores (unfolded).
    B : ndarray, shape (n, r)
    mu : float

    Returns
    -------
    A : ndarray, shape (m, r)
    B : ndarray, shape (n, r)
    AtT : ndarray, shape (r * N, n)
        ``A^T T_i`` with the new A, stacked: it serves the B step and the Stein step's
        ``A^T S_i B`` (one pass over T).
    AtA : ndarray, shape (r, r)
        ``A^T A`` of the new A, for the B step and the Stein step.

    Raises
    ------
    FloatingPointError
        If a core is not finite (the solve diverged).
    """
    dt = T.dtype
    r, N, _ = K.shape
    m = T.shape[0]
    eye = np.eye(r)
    K2 = K.reshape(r, N * r)  # [p, (i, q)] = K_i[p, q]
    if not np.isfinite(K2).all():
        raise FloatingPointError("KDRSDL diverged: non-finite cores")
    num = (TB.reshape(m, N * r) @ K2.T) * dt.type(mu)  # S_i B = mu T_i B
    KBtB = K2.reshape(r * N, r) @ (B.T @ B)  # (r, N, r): K_i B^T B
    G = eye + mu * (KBtB.reshape(r, N * r) @ K2.T).astype(np.float64)
    A = _right_divide_spd(num, G, dt)
    AtT = left_unfolded(A.T, T).reshape(r * N, -1)  # (r, N, n): A^T S_i / mu
    num = (AtT.T @ K2.reshape(r * N, r)) * dt.type(mu)
    AtA = A.T @ A
    AtAK = AtA @ K2  # (r, N, r): A^T A K_i
    G = eye + mu * (K2.reshape(r * N, r).T @ AtAK.reshape(r * N, r)).astype(np.float64)
    B = _right_divide_spd(num, G, dt)
    return A, B, AtT, AtA


def _update_cores(AtT, AtA, B, R, Y, mu, muK, alpha):
    """Steps 5, 6 and 7 for Y: K by the Stein equation, R by shrinkage, then Y.

    ``muK K_i + mu A^T A K_i B^T B = A^T S_i B + muK R_i + Y_i``;
    ``R = shrink(K - Y / muK, alpha / muK)``; ``Y += muK (R - K)``.

    Parameters
    ----------
    AtT : ndarray, shape (r * N, n)
        ``A^T S_i / mu`` stacked (from :func:`_update_dictionary`).
    AtA : ndarray, shape (r, r)
        ``A^T A`` (from :func:`_update_dictionary`).
    B : ndarray, shape (n, r)
    R, Y : ndarray, shape (r, N, r)
        The previous cores and their multipliers (unfolded); ``Y`` is updated in place.
    mu, muK, alpha : float

    Returns
    -------
    K, R, Y : ndarray, shape (r, N, r)
    err_split : float
        ``max_i |R_i - K_i|_F / |R_i|_F``, the split half of the stopping criterion.
    """
    C = (AtT @ B).reshape(R.shape)
    C *= mu
    C += muK * R
    C += Y
    K = stein_solve_unfolded(AtA, B.T @ B, C, mu, muK)
    RmK = K - Y / muK
    R = shrink(RmK, alpha / muK)
    np.subtract(R, K, out=RmK)
    R_norms = slice_norms_unfolded(R)
    err_split = float(np.max(slice_norms_unfolded(RmK) / np.where(R_norms > 0, R_norms, 1.0)))
    RmK *= muK
    Y += RmK
    return K, R, Y, err_split


def _package(A, B, K, R, E, Q, Y, M, mu, muK, muK0, err_rec, err_split, converged, warm):
    """The result: Lambda from ``Q = Lambda / mu``, (N, ...) views of the unfolded arrays."""
    Lam = Q
    Lam *= mu
    K, R, E, Lam, Y = (fold(U) for U in (K, R, E, Lam, Y))
    state = KDRSDLState(A=A, B=B, K=K, R=R, E=E, Lam=Lam, Y=Y, M=M, mu=mu, muK=muK, muK0=muK0)
    return KDRSDLResult(
        A=A,
        B=B,
        R=R,
        E=E,
        M=M,
        n_iter=len(err_rec),
        converged=converged,
        err_rec=np.asarray(err_rec),
        err_split=np.asarray(err_split),
        warm_start=warm,
        state=state,
    )


def kdrsdl(
    X: np.ndarray,
    rank: int | None = None,
    *,
    lam: float | None = None,
    alpha: float = 1e-2,
    mean: bool = False,
    tol: float = 1e-7,
    max_iter: int = 150,
    rho: float = 1.2,
    init: KDRSDLState | None = None,
    backoff: float | None = None,
    rebalance: bool = False,
    align_signs: bool = True,
    warn: bool = True,
    cancel: threading.Event | None = None,
    lazy_criterion: bool = False,
    compiled: bool = False,
) -> KDRSDLResult:
    """Robust Kronecker-decomposable component analysis (KDRSDL), Algorithm 1.

    Solves (paper Section 3, eq. for the modified problem)::

        min  alpha sum_i |R_i|_1 + lam sum_i |E_i|_1 + (|A|_F^2 + |B|_F^2) / 2
        s.t. X_i = M + A K_i B^T + E_i,  R_i = K_i,   i = 1..N

    by the ADMM of Algorithm 1, in the authors' update order: E, (M), Xt, A, B,
    K (Stein equation, solved for all slices through one eigendecomposition of
    ``A^T A`` and ``B^T B``), R, duals, then ``mu <- min(1e7 mu0, rho mu)`` and the
    same for ``muK``. It stops when ``max_i |Xt_i - A R_i B^T|_F / |X_i|_F`` and
    ``max_i |R_i - K_i|_F / |R_i|_F`` are both below ``tol`` (the unsquared ratios
    of the authors' code; the paper writes them squared).

    Parameters
    ----------
    X : ndarray, shape (N, m, n), float32 or float64
        N frames of m x n pixels, values typically in [0, 1] (the defaults of
        ``lam`` and ``alpha`` assume that scale). float32 is computed in float32.
        A :func:`core.solver.products.fold` view of an unfolded (m, N, n) array is solved in
        its own memory; any other layout is copied into that one.
    rank : int, optional
        Dictionary size r, 1 <= r <= min(m, n). Default min(m, n) (the authors');
        20-40 suffice for a static video background and cost far less.
    lam : float, optional
        Weight of ``|E|_1``. Default ``1 / sqrt(N * max(m, n))``.
    alpha : float
        Weight of ``|R|_1``. Default 1e-2.
    mean : bool
        Robust-mean mode (the authors' background-subtraction runs):
        ``L_i = M + A R_i B^T`` with ``M = mean_i (X_i - E_i)`` re-estimated each
        iteration. Not in the paper.
    tol : float
        Stopping tolerance (> 0). 1e-7 by default; 1e-5 was used for background
        subtraction. float32 cannot reach much below ~1e-6.
    max_iter : int
        Maximum number of iterations (>= 1).
    rho : float
        Growth factor of ``mu`` and ``muK`` per iteration (> 1).
    init : KDRSDLState, optional
        Warm start: the ``state`` of a previous result (after
        :func:`core.slide_state` when the window moved). Its ``n_slices`` slices
        belong to the first frames of ``X``; the remaining frames are new: their
        cores, ``E`` and duals come from a robust fit on the kept ``A``, ``B`` (and
        ``M``) by the same updates (:func:`core.solver.frame_fit.fit_cores`), with mu
        ramped up to the warm start's. ``mu`` restarts from
        ``max(mu0, mu_prev * rho**-backoff)`` and ``muK`` is scaled by the same
        factor.
    backoff : float, optional
        Number of ``rho`` steps to take ``mu`` back on a warm start (>= 0).
        Default: 20 when ``X`` has frames that ``init`` has no slices for (a slid
        window: keeping the final mu would freeze the background), 0 when it has
        none (a restart on the same window continues where it stopped). Measured
        on a parked object (tests): 0 freezes L, 10 lets it in a third of the way,
        20 nine tenths, 40 fully (at about the cost of a cold start).
    rebalance : bool
        On a warm start, rescale ``A, B, R`` (and ``K, Y``) so that every
        ``A R_i B^T`` is unchanged and the regulariser is smallest
        (:func:`_balance`). Stops the slow drift of A towards 0 and R towards
        infinity over a long stream of warm starts; off by default because it slows
        how fast a new object enters L at a small back-off (measured: 0.61 instead of
        0.89 of the way after 8 windows at back-off 20). A documented addition.
    align_signs : bool
        Align each slice's singular vectors' signs to the first slice's before
        averaging them in the cold initialisation. A documented deviation from the
        paper (whose plain average can cancel opposite signs); False reproduces
        the paper exactly.
    warn : bool
        Emit a :class:`ConvergenceWarning` when ``max_iter`` is reached. False
        for callers that read ``result.converged`` instead, such as a refit in a
        thread, where ``warnings.catch_warnings`` is not thread-safe.
    cancel : threading.Event, optional
        Checked before every iteration and between the cold start's SVDs: once set, the
        solve stops with :class:`Cancelled` (a refit abandoned at shutdown).
    lazy_criterion : bool
        Compute the reconstruction half of the stopping criterion (``err_rec``) only where it
        can stop the solve, at the iterations whose split half (``err_split``) is already below
        ``tol``, and at the last one; elsewhere ``err_rec`` holds NaN. The iterates, the
        iteration at which the solve stops and the last criterion are exactly those of the
        default; an iteration costs one product of the size of ``S_i B`` less (of four). For
        warm refits on a budget, which rarely meet ``tol`` (docs/algorithm.md, "Cost and
        layout"). A divergence is then caught by ``err_split`` or the cores' check.
    compiled : bool
        Make each sweep's element-wise steps in one compiled pass (:mod:`core.solver.fused`,
        numba) instead of numpy's passes over the window: the same iterates to the bit, float32
        only (float64 solves stay with numpy).

    Returns
    -------
    KDRSDLResult
        ``A`` (m, r), ``B`` (n, r), ``R`` (N, r, r), ``E`` (N, m, n), ``M`` (m, n)
        or None, ``L`` (N, m, n), ``n_iter``, ``converged``, the criterion history
        and the ``state`` for a warm start. Arrays have the dtype of ``X``.

    Raises
    ------
    ValueError
        If ``X`` is not a finite, non-empty 3-D float32/float64 array, ``rank`` is
        outside 1..min(m, n), ``lam``, ``alpha`` or ``tol`` is not > 0,
        ``rho <= 1``, ``max_iter < 1``, ``backoff < 0``, or ``init`` does not
        match ``X`` and ``rank``.
    Cancelled
        If ``cancel`` was set during the solve.

    Warns
    -----
    ConvergenceWarning
        If ``max_iter`` iterations ran without meeting ``tol`` (and ``warn``).

    Notes
    -----
    Per iteration O(N m n r) flops. Inside the loop the frames are stored unfolded,
    (m, N, n), and the cores as (r, N, r), so that every product (four of the size
    of ``S_i B``: ``S_i B``, ``A^T S_i`` (shared by the B and Stein steps),
    ``A R_i B^T``, ``A K_i B^T``; five of the size of ``A K_i``; eight of
    ``K_i B^T B``) is a single GEMM on a reshape, with no transposed copies
    (:mod:`core.solver.products`). Everything of size (m, N, n) except ``A^T S_i`` runs
    in one sweep per iteration over row blocks that stay in cache
    (:mod:`core.solver.blocks`): iteration k's Lambda update and reconstruction
    criterion, then iteration k + 1's E, M and S steps. ``A R_i B^T`` and
    ``A K_i B^T`` are formed one block at a time and never stored whole, and
    ``S / mu`` and ``Lambda / mu`` stand for S and Lambda (see :func:`_sweep`): the
    same iterates as the paper's, in fewer passes over memory. When the criterion
    of iteration k is met, the E and M that the sweep already made for k + 1 are
    discarded (E is double-buffered at the iterations whose criterion is computed;
    with ``lazy_criterion`` a solve that never nears ``tol`` holds one E). Results
    are returned as (N, ...) views of the unfolded arrays: ``E``, ``R`` and the
    state's stacks are not C-contiguous.
    """
    X, r, lam, alpha, tol, rho, backoff = _check_args(X, rank, lam, alpha, tol, rho, max_iter, init, backoff)
    N, m, n = X.shape
    dt = X.dtype
    X1 = unfold(X)  # (m, N, n): the loop's layout (core.solver.products)
    X_norms = slice_norms_unfolded(X1, np.float64)
    X_norms_safe = np.where(X_norms > 0, X_norms, 1.0)
    total = X_norms.sum()
    mu0 = float(ETA * N / total) if total > 0 else ETA
    mu_max = MU_CAP * mu0
    if init is None:
        A, B, K, R, Lam, Y, M, muK0 = _cold_init(X, r, mean, align_signs, cancel)
        mu, muK = mu0, muK0
    else:
        A, B, K, R, Lam, Y, M, muK0, mu, muK = _warm_init(X, init, r, mean, mu0, rho, backoff, lam, alpha, rebalance)
    muK_max = MU_CAP * muK0
    px = _Pixels.allocate(X1, Lam, mu, r, lam, mean)
    fused: Any = None
    if compiled and dt == np.float32:
        from core.solver.fused import sweep  # numba: imported only when asked for

        fused = sweep

    AK = left_unfolded(A, K)  # A K_i
    AR = None  # A R_i of the iteration whose step 7 and criterion are pending
    M_prev = None
    err_rec: list[float] = []
    err_split: list[float] = []
    converged = False
    mu_prev = mu
    for it in range(max_iter + 1):
        _check(cancel)
        final = it == max_iter
        # the criterion can stop the solve only where its split half is below tol
        needed = not lazy_criterion or final or (AR is not None and err_split[-1] < tol)
        if not final and needed:  # keep iteration k's E and M: the criterion may stop here
            if px.E_prev is None:
                px.E_prev = np.empty_like(px.E)
            px.E, px.E_prev = px.E_prev, px.E
            if M is not None:
                M_prev = M.copy()
        c = 1.0 if AR is None else dt.type(mu_prev / mu)  # mu_k / mu_{k+1}
        parts = [_sweep(px, rows, AK, AR, B, M, c, None if final else px.E, mu, needed, fused) for rows in px.blocks]
        if AR is not None:
            err_rec.append(float(np.max(np.sqrt(np.sum(parts, axis=0)) / X_norms_safe)) if needed else np.nan)
            if not (np.isfinite(err_split[-1]) and (np.isfinite(err_rec[-1]) or not needed)):
                raise FloatingPointError("KDRSDL diverged: non-finite stopping criterion")
            if err_rec[-1] < tol and err_split[-1] < tol:
                converged = True
                if not final:  # this sweep already made the next E and M: undo
                    assert px.E_prev is not None  # a sweep that computes the criterion keeps it
                    px.E, M = px.E_prev, M_prev
                break
        if final:
            break
        A, B, AtT, AtA = _update_dictionary(px.TB, px.T, K, B, mu)
        K, R, Y, split = _update_cores(AtT, AtA, B, R, Y, mu, muK, alpha)
        err_split.append(split)
        AK = left_unfolded(A, K)
        AR = left_unfolded(A, R)
        # 8. penalties, capped (paper Section 4)
        mu_prev = mu
        mu = min(mu_max, rho * mu)
        muK = min(muK_max, rho * muK)

    if warn and not converged:
        warnings.warn(
            f"KDRSDL did not converge in {max_iter} iterations: criterion "
            f"max(err_rec, err_split) = {max(err_rec[-1], err_split[-1]):.3g} > tol = {tol:.3g}",
            ConvergenceWarning,
            stacklevel=2,
        )
    return _package(A, B, K, R, px.E, px.Q, Y, M, mu, muK, muK0, err_rec, err_split, converged, init is not None)
