"""Batched matrix products over a stack of slices, written as single large GEMMs.

The solver's O(N m n r) cost is in products of a stack of N slices with one
shared matrix. ``np.matmul`` of a 2-D by a 3-D array broadcasts into N small
products (about 4x slower here, ALGORITHM.md "Cost and speed"); these helpers
reshape so that BLAS sees one large matrix product.
"""

import numpy as np


def right_multiply(T, B, out=None):
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


def left_multiply(A, T):
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


def sandwich(A, K, B, out=None):
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


def slice_norms(T):
    """Frobenius norm of every slice.

    Parameters
    ----------
    T : ndarray, shape (N, m, n)

    Returns
    -------
    ndarray, shape (N,), float64
    """
    T2 = T.reshape(T.shape[0], -1)
    return np.sqrt(np.einsum("ij,ij->i", T2, T2, dtype=np.float64))
