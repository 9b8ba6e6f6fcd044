"""The element-wise part of a sweep of Algorithm 1 as one compiled pass (numba).

:func:`core.solver.kdrsdl._sweep` makes, over each block of rows of the unfolded window, iteration
k's step 7 and iteration k + 1's steps 1 and 2 with about ten numpy passes over window-sized
arrays (docs/algorithm.md, "Cost and layout")::

    Q <- c (T - A K_i B^T)                          step 7, with Q = Lambda / mu
    Z  = X - M - A K_i B^T + Q,  E = shrink(Z, lam / mu)      step 1
    M' = mean_i (X_i - E_i)                         the robust mean (mean mode)
    T  = A K_i B^T + clip(Z) + M - M'               step 2, with T = S / mu

:func:`sweep` does the same float32 operations in the same order, element by element, in one pass
over the block (and a second over its rows for the mean's shift), so its results are numpy's to
the bit (tests/core/test_kdrsdl_steps.py): the mean sums the slices one after another in float32 as
numpy's reduction along the middle axis does, and divides in float64 as ``np.mean`` does (its
count is an ``intp``). The matrix products stay with BLAS, in :mod:`core.solver.products`.
Compiled and cached with the streaming model's kernels (:mod:`core.streaming.kernels`, which
loads this module); a solve asks for it with ``kdrsdl(..., compiled=True)``.
"""

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def sweep(
    lk: np.ndarray,
    t: np.ndarray,
    q: np.ndarray,
    x1: np.ndarray,
    e: np.ndarray,
    M: np.ndarray,
    x_mean: np.ndarray,
    c: np.float32,
    tau: np.float32,
    step7: bool,
    mean: bool,
) -> None:  # pragma: no cover - compiled
    """One block's element-wise sweep, in place.

    Parameters
    ----------
    lk : ndarray, shape (k, N, n), float32
        ``A K_i B^T`` of the block's rows.
    t, q : ndarray, shape (k, N, n), float32
        ``T = S / mu`` and ``Q = Lambda / mu`` of the block (updated).
    x1 : ndarray, shape (k, N, n), float32
        The block's frames.
    e : ndarray, shape (k, N, n), float32 (written)
        The new ``E``. (``clip(Z, -tau, tau)``, which the reference leaves in its scratch, is not
        written: nothing reads it, and one stream less over the window is an eighth of the pass.)
    M, x_mean : ndarray, shape (k, n), float32
        The robust mean of the block's rows (updated to ``M'``) and the frames' mean; ignored
        without ``mean``.
    c : float32
        ``mu_k / mu_{k+1}``: ``Q <- c (T - A K_i B^T)``; 1 leaves the product out, as the reference.
    tau : float32
        ``lam / mu``.
    step7 : bool
        Make step 7 (False in the first sweep: no iteration k).
    mean : bool
        Mean mode: ``M`` is updated and enters ``Z`` and ``T``.
    """
    k, N, n = lk.shape
    L, T, Q, X, E = lk.ravel(), t.ravel(), q.ravel(), x1.ravel(), e.ravel()  # flat views
    Mf, Xm = M.ravel(), x_mean.ravel()
    acc = np.empty(n, np.float32)  # a row's sum over the slices, then the shift of T
    one = np.float32(1.0)
    for r in range(k):
        for i in range(N):
            # one slice's row: loops without a branch on unsigned indices, which the compiler
            # vectorises (numba then emits no negative-index check)
            o = np.uint64((r * N + i) * n)
            if step7 and c != one:
                for j in range(np.uint64(n)):
                    Q[o + j] = (T[o + j] - L[o + j]) * c
            elif step7:
                for j in range(np.uint64(n)):
                    Q[o + j] = T[o + j] - L[o + j]
            if mean:
                m0 = np.uint64(r * n)
                for j in range(np.uint64(n)):
                    z = (Q[o + j] + X[o + j]) - L[o + j]
                    z -= Mf[m0 + j]
                    cl = min(max(z, -tau), tau)
                    E[o + j] = z - cl
                    T[o + j] = L[o + j] + cl
            else:
                for j in range(np.uint64(n)):
                    z = (Q[o + j] + X[o + j]) - L[o + j]
                    cl = min(max(z, -tau), tau)
                    E[o + j] = z - cl
                    T[o + j] = L[o + j] + cl
        if mean:
            m0 = np.uint64(r * n)
            o = np.uint64(r * N * n)
            for j in range(np.uint64(n)):
                acc[j] = E[o + j]
            for i in range(1, N):  # the slices one after another, as numpy's reduction adds them
                oi = o + np.uint64(i * n)
                for j in range(np.uint64(n)):
                    acc[j] += E[oi + j]
            for j in range(np.uint64(n)):
                m_new = Xm[m0 + j] - np.float32(np.float64(acc[j]) / np.float64(N))
                acc[j] = Mf[m0 + j] - m_new  # the shift of T
                Mf[m0 + j] = m_new
            for i in range(N):
                oi = o + np.uint64(i * n)
                for j in range(np.uint64(n)):
                    T[oi + j] += acc[j]


def warm() -> None:
    """Load :func:`sweep` from numba's cache (or compile it) now, on a 2 x 2 x 2 window, with the
    signature a solve calls it with (every array C-contiguous float32)."""
    cube = np.ones((2, 2, 2), np.float32)
    square, one = np.ones((2, 2), np.float32), np.float32(1)
    sweep(cube, cube.copy(), cube.copy(), cube, cube.copy(), square, square.copy(), one, one, True, True)
