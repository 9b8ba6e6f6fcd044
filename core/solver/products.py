"""Batched matrix products over a stack of slices, written as single large GEMMs.

The solver's O(N m n r) cost is in products of a stack of N slices with one
shared matrix. ``np.matmul`` of a 2-D by a 3-D array broadcasts into N small
products (about 4x slower here, docs/algorithm.md, "Cost and layout"); these helpers
reshape so that BLAS sees one large matrix product.

Two layouts: stacks ``(N, p, q)`` (the public one, used per frame by the streaming
model) and *unfolded* ``(p, N, q)`` (inside the window solver, where both left and
right products are then copy-free; see the section below).
"""

from typing import Any

import numpy as np


def right_multiply(T: np.ndarray, B: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``out[i] = T[i] @ B`` for every slice, as one GEMM.

    Parameters
    ----------
    T : ndarray, shape (N, p, q), C-contiguous
    B : ndarray, shape (q, s)
    out : ndarray, shape (N, p, s), C-contiguous, optional

    Returns
    -------
    ndarray, shape (N, p, s)
    """
    N, p, q = T.shape
    T2 = T.reshape(N * p, q)
    if out is None:
        return (T2 @ B).reshape(N, p, B.shape[1])
    np.matmul(T2, B, out=out.reshape(N * p, B.shape[1]))
    return out


def left_multiply(A: np.ndarray, T: np.ndarray) -> np.ndarray:
    """``out[i] = A @ T[i]`` for every slice, as one GEMM.

    Transposes the (small) stack to (p, N*q), multiplies once, transposes back.
    Meant for stacks whose slices are small (r x r, m x r); the big (N, m, n)
    products are arranged so that they only need :func:`right_multiply`.

    Parameters
    ----------
    A : ndarray, shape (m, p)
    T : ndarray, shape (N, p, q)

    Returns
    -------
    ndarray, shape (N, m, q), C-contiguous
    """
    N, p, q = T.shape
    T2 = np.ascontiguousarray(T.transpose(1, 0, 2)).reshape(p, N * q)
    return np.ascontiguousarray((A @ T2).reshape(A.shape[0], N, q).transpose(1, 0, 2))


def sandwich(A: np.ndarray, K: np.ndarray, B: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``out[i] = A @ K[i] @ B.T``: the low-rank slices of the model, one big GEMM.

    Parameters
    ----------
    A : ndarray, shape (m, r)
    K : ndarray, shape (N, r, r)
    B : ndarray, shape (n, r)
    out : ndarray, shape (N, m, n), C-contiguous, optional

    Returns
    -------
    ndarray, shape (N, m, n)
    """
    return right_multiply(left_multiply(A, K), B.T, out=out)


# --- The window solver's layout -------------------------------------------------
#
# Algorithm 1 multiplies stacks by A on the left and by B on the right. With the
# frames stacked as (N, m, n) one of the two sides always needs a transposed copy
# of the stack. Stored *unfolded*, as (m, N, n) for pixel stacks and (r, N, r) for
# cores (slice i is ``T[:, i, :]``), every product below is a plain 2-D GEMM on a
# reshape (no copy): a left product multiplies the (p, N*q) matrix, a right
# product the (p*N, q) matrix, and both give the unfolded layout back.
#
# NumPy's matmul throughout, not scipy.linalg.blas: SciPy wheels bundle their own
# OpenBLAS, whose idle threads then spin next to NumPy's. Measured here (one-off
# experiment, not kept): one SciPy gemm per iteration made the solver 2x slower on
# 2 cores.


def unfold(T: np.ndarray) -> np.ndarray:
    """Stack ``(N, p, q)`` to the unfolded layout ``(p, N, q)``, C-contiguous.

    Parameters
    ----------
    T : ndarray, shape (N, p, q)

    Returns
    -------
    ndarray, shape (p, N, q)
        A copy, or ``T``'s own memory when it already is in that layout (a
        :func:`fold` view of an unfolded array).
    """
    return np.ascontiguousarray(T.transpose(1, 0, 2))


def fold(U: np.ndarray) -> np.ndarray:
    """Unfolded ``(p, N, q)`` back to a stack ``(N, p, q)``: a view, no copy.

    Parameters
    ----------
    U : ndarray, shape (p, N, q)

    Returns
    -------
    ndarray, shape (N, p, q), not C-contiguous when N > 1 and p > 1
    """
    return U.transpose(1, 0, 2)


def left_unfolded(A: np.ndarray, U: np.ndarray) -> np.ndarray:
    """``A @ U_i`` for every slice of an unfolded stack: one GEMM, no copies.

    Parameters
    ----------
    A : ndarray, shape (s, p)
    U : ndarray, shape (p, N, q), C-contiguous (slice i is ``U[:, i, :]``)

    Returns
    -------
    ndarray, shape (s, N, q), C-contiguous (unfolded)
    """
    p, N, q = U.shape
    return (A @ U.reshape(p, N * q)).reshape(A.shape[0], N, q)


def right_unfolded(U: np.ndarray, B: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``U_i @ B`` for every slice of an unfolded stack: one GEMM, no copies.

    Works on any run of rows ``U[a:b]`` as well (the solver's row blocks,
    :mod:`core.solver.blocks`), since those are unfolded stacks too.

    Parameters
    ----------
    U : ndarray, shape (p, N, q), C-contiguous
    B : ndarray, shape (q, s); a transposed view (``B.T``) costs no copy
    out : ndarray, shape (p, N, s), C-contiguous, optional

    Returns
    -------
    ndarray, shape (p, N, s)
        ``out`` when given.
    """
    p, N, q = U.shape
    if out is None:
        out = np.empty((p, N, B.shape[1]), dtype=np.result_type(U, B))
    np.matmul(U.reshape(p * N, q), B, out=out.reshape(p * N, B.shape[1]))
    return out


def slice_norms_unfolded(U: np.ndarray, dtype: Any = None) -> np.ndarray:
    """Frobenius norm of every slice of an unfolded stack.

    Parameters
    ----------
    U : ndarray, shape (p, N, q)
    dtype : dtype, optional
        Accumulation type; default ``U``'s (float32 sums of squares are accurate
        to ~1e-6 relative here, ample for a stopping criterion).

    Returns
    -------
    ndarray, shape (N,), float64
    """
    return np.sqrt(np.einsum("piq,piq->i", U, U, dtype=dtype).astype(np.float64))
