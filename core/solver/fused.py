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

import llvmlite.binding as llvm
import numpy as np
from numba import njit, types
from numba.extending import get_cython_function_address


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


# --- The rest of an iteration: the block loop, the dictionary and the cores in compiled calls ---
#
# A refit runs on a thread beside the frames' thread of the same process, at a lower priority
# (core.streaming.refit). Every numpy call it makes holds Python's GIL while it sets up, and the
# small ones (the r x r algebra of steps 3-7) for their whole run; a refit thread that the
# scheduler leaves waiting while it holds the GIL holds up the frames' thread too. The functions
# below make an iteration's work in four calls that release the GIL (nogil) for their whole run,
# with the same float32 and float64 operations, in the same order, with the same BLAS routines as
# the reference (numba's np.dot is the same OpenBLAS GEMM; A^T A goes to SYRK as numpy's matmul
# sends it): iterates equal to the bit (tests/core/test_kdrsdl_steps.py). Between the calls numpy
# makes the two float32 eigendecompositions of the Stein step (numba's float32 eigh is not numpy's
# to the bit; the float64 one is) and A^T S_i (its BLAS is the faster on that product); both
# release the GIL where they take time.

# SYRK (``C = A^T A``, single precision) of the BLAS that numba's ``np.dot`` calls (SciPy's), by a
# symbol name rather than an address, so that the functions calling it can be cached on disk
llvm.add_symbol("kdrsdl_ssyrk", get_cython_function_address("scipy.linalg.cython_blas", "ssyrk"))
_ssyrk = types.ExternalFunction("kdrsdl_ssyrk", types.void(*([types.voidptr] * 10)))


@njit(cache=True, nogil=True)
def gram(A: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    """``A^T A`` of a C-contiguous float32 (m, r) array, as numpy's ``A.T @ A`` makes it: SYRK on
    the upper triangle (row-major), mirrored to the lower. Returns (r, r) float32."""
    m, r = A.shape
    C = np.zeros((r, r), np.float32)
    flags = np.array([ord("L"), ord("N")], np.uint8)  # column-major view of the row-major call
    dims = np.array([r, m], np.int32)
    scalars = np.array([1.0, 0.0], np.float32)
    _ssyrk(
        flags[0:].ctypes, flags[1:].ctypes, dims[0:].ctypes, dims[1:].ctypes, scalars[0:].ctypes,
        A.ctypes, dims[0:].ctypes, scalars[1:].ctypes, C.ctypes, dims[0:].ctypes,
    )  # fmt: skip
    for i in range(r):
        for j in range(i + 1, r):
            C[j, i] = C[i, j]
    return C


@njit(cache=True, nogil=True)
def sweep_rows(
    bounds: np.ndarray,
    AK: np.ndarray,
    B: np.ndarray,
    LK: np.ndarray,
    T: np.ndarray,
    Q: np.ndarray,
    X1: np.ndarray,
    E: np.ndarray,
    TB: np.ndarray,
    M: np.ndarray,
    x_mean: np.ndarray,
    c: np.float32,
    tau: np.float32,
    step7: bool,
    mean: bool,
) -> None:  # pragma: no cover - compiled
    """A whole sweep without the stopping criterion, every row block in one call, in place.

    Per block of rows ``bounds[b]:bounds[b + 1]`` (:mod:`core.solver.blocks`), what
    :func:`core.solver.kdrsdl._sweep` makes with :func:`sweep`: ``A K_i B^T`` into the scratch
    ``LK`` (k_max, N, n), the element-wise steps (:func:`sweep`), then ``T_i B`` into ``TB``
    (m, N, r). ``AK`` (m, N, r) is ``A K_i``; ``B`` (n, r); ``T``, ``Q``, ``X1``, ``E`` (m, N, n);
    ``M`` and ``x_mean`` (m, n) in mean mode, else (0, 0); the rest as for :func:`sweep`.
    """
    m, N, n = X1.shape
    r = B.shape[1]
    Bt = B.T
    for b in range(len(bounds) - 1):
        lo, hi = bounds[b], bounds[b + 1]
        k = hi - lo
        lk = LK[:k]
        np.dot(AK[lo:hi].reshape(k * N, r), Bt, lk.reshape(k * N, n))
        if mean:
            sweep(lk, T[lo:hi], Q[lo:hi], X1[lo:hi], E[lo:hi], M[lo:hi], x_mean[lo:hi], c, tau, step7, True)
        else:
            sweep(lk, T[lo:hi], Q[lo:hi], X1[lo:hi], E[lo:hi], M, x_mean, c, tau, step7, False)
        np.dot(T[lo:hi].reshape(k * N, n), B, TB[lo:hi].reshape(k * N, r))


@njit(cache=True, nogil=True)
def _right_divide_spd(num: np.ndarray, G: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    """:func:`core.solver.kdrsdl._right_divide_spd` for float32 ``num`` (m, r), float64 ``G``."""
    w, V = np.linalg.eigh(0.5 * (G + G.T))
    w = np.maximum(w, 1.0)
    X = np.dot(num.astype(np.float64), V) / w
    return np.dot(X, V.T).astype(np.float32)


@njit(cache=True, nogil=True)
def dictionary_A(TB: np.ndarray, K: np.ndarray, B: np.ndarray, mu: float) -> np.ndarray:  # pragma: no cover - compiled
    """Step 3 of :func:`core.solver.kdrsdl._update_dictionary`, float32: the new ``A`` (m, r).

    ``TB`` (m, N, r), ``K`` (r, N, r), ``B`` (n, r), all C-contiguous; ``mu`` the penalty. Raises
    FloatingPointError when a core is not finite (the solve diverged).
    """
    r, N, _ = K.shape
    m = TB.shape[0]
    K2 = K.reshape(r, N * r)
    if not np.isfinite(K2).all():
        raise FloatingPointError("KDRSDL diverged: non-finite cores")
    num = np.dot(TB.reshape(m, N * r), K2.T) * np.float32(mu)
    KBtB = np.dot(K2.reshape(r * N, r), gram(B))
    G = np.eye(r) + mu * np.dot(KBtB.reshape(r, N * r), K2.T).astype(np.float64)
    return _right_divide_spd(num, G)


@njit(cache=True, nogil=True)
def dictionary_B(
    AtT: np.ndarray, A: np.ndarray, K: np.ndarray, mu: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """Step 4 of :func:`core.solver.kdrsdl._update_dictionary`, float32, with the new ``A``.

    ``AtT`` (r * N, n): ``A^T T_i`` stacked, which the caller makes with numpy (numpy's BLAS makes
    that product, r rows by a window's columns, faster than the one numba calls, to the same
    bits); ``A`` (m, r); ``K`` (r, N, r); ``mu`` the penalty. Returns the new ``B`` (n, r), and
    ``A^T A`` and ``B^T B`` (r, r) of the new dictionary.
    """
    r, N, _ = K.shape
    K2 = K.reshape(r, N * r)
    num = np.dot(AtT.T, K2.reshape(r * N, r)) * np.float32(mu)
    AtA = gram(A)
    AtAK = np.dot(AtA, K2)
    G = np.eye(r) + mu * np.dot(K2.reshape(r * N, r).T, AtAK.reshape(r * N, r)).astype(np.float64)
    B = _right_divide_spd(num, G)
    return B, AtA, gram(B)


@njit(cache=True, nogil=True)
def cores(
    AtT: np.ndarray,
    A: np.ndarray,
    B: np.ndarray,
    R: np.ndarray,
    Y: np.ndarray,
    a: np.ndarray,
    P: np.ndarray,
    b: np.ndarray,
    Qb: np.ndarray,
    mu: float,
    muK: float,
    alpha: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """:func:`core.solver.kdrsdl._update_cores` (steps 5-7 for Y) and the next ``A K_i``, ``A R_i``.

    ``AtT`` (r * N, n), ``A`` (m, r), ``B`` (n, r): the dictionary step's; ``R``, ``Y``
    (r, N, r), ``Y`` updated in place; ``a, P`` and ``b, Qb``: numpy's ``eigh`` of ``A^T A`` and
    ``B^T B`` (float32, eigenvalues clamped at 0), the Stein step's
    (:func:`core.solver.stein.stein_solve_unfolded`). Returns ``K``, ``R``, ``R - K`` (for the
    split criterion, which the caller takes with numpy's reduction) (r, N, r), ``A K_i`` and
    ``A R_i`` (m, N, r).
    """
    r, N, _ = R.shape
    m = A.shape[0]
    mu32, muK32 = np.float32(mu), np.float32(muK)
    C = np.dot(AtT, B).reshape(r, N, r)
    C *= mu32
    C += muK32 * R
    C += Y
    denom = muK32 + mu32 * np.outer(a, b)
    W = np.dot(np.dot(P.T, C.reshape(r, N * r)).reshape(r * N, r), Qb).reshape(r, N, r)
    for p in range(r):
        for i in range(N):
            for q in range(r):
                W[p, i, q] /= denom[p, q]
    K = np.dot(np.dot(P, W.reshape(r, N * r)).reshape(r * N, r), Qb.T).reshape(r, N, r)
    tau = np.float32(alpha / muK)
    Rn = np.empty_like(K)
    D = np.empty_like(K)
    Kf, Yf, Rf, Df = K.ravel(), Y.ravel(), Rn.ravel(), D.ravel()
    for j in range(Kf.size):
        x = Kf[j] - Yf[j] / muK32
        Rf[j] = x - min(max(x, -tau), tau)  # shrink(K - Y / muK, alpha / muK)
        Df[j] = Rf[j] - Kf[j]
        Yf[j] += Df[j] * muK32
    AK = np.dot(A, K.reshape(r, N * r)).reshape(m, N, r)
    AR = np.dot(A, Rn.reshape(r, N * r)).reshape(m, N, r)
    return K, Rn, D, AK, AR
