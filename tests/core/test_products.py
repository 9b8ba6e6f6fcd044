"""The batched products of the solver's unfolded layout (core.solver.products)."""

import numpy as np
import pytest

from core.solver.products import fold, left_unfolded, right_unfolded, sandwich, slice_norms_unfolded, unfold


@pytest.mark.parametrize("m, n", [(5, 7), (7, 5), (6, 6)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_unfolded_products_match_the_slice_by_slice_products(m, n, dtype):
    rng = np.random.default_rng(m * 10 + n)
    N, r = 4, 3
    A, B = rng.random((m, r)).astype(dtype), rng.random((n, r)).astype(dtype)
    K = rng.random((N, r, r)).astype(dtype)
    expected = np.stack([A @ K[i] @ B.T for i in range(N)])
    # a handful of float32 roundings on values ~1: 1e-5 relative; float64 to 1e-12
    tol = 1e-5 if dtype == np.float32 else 1e-12
    AK = left_unfolded(A, unfold(K))
    np.testing.assert_allclose(fold(AK), np.stack([A @ K[i] for i in range(N)]), rtol=tol)
    out = np.full((m, N, n), np.nan, dtype=dtype)
    got = right_unfolded(AK, B.T, out=out)
    assert got is out and got.dtype == dtype
    np.testing.assert_allclose(fold(got), expected, rtol=tol)
    np.testing.assert_allclose(sandwich(A, K, B), expected, rtol=tol)
    # a row block of the solver's sweep is an unfolded stack of its own
    block = np.full((2, N, n), np.nan, dtype=dtype)
    right_unfolded(AK[1:3], B.T, out=block)
    np.testing.assert_allclose(block, got[1:3], rtol=tol)
    # and the transposed direction of the same helpers: A^T U_i and U_i B
    U = unfold(expected)
    np.testing.assert_allclose(fold(left_unfolded(A.T, U)), np.stack([A.T @ x for x in expected]), rtol=tol)
    np.testing.assert_allclose(fold(right_unfolded(U, B)), np.stack([x @ B for x in expected]), rtol=tol)


def test_fold_is_a_view_and_unfold_of_it_copies_nothing():
    U = np.arange(2 * 3 * 4, dtype=float).reshape(2, 3, 4)
    T = fold(U)
    assert T.shape == (3, 2, 4) and np.shares_memory(T, U)
    assert T[1, 0, 2] == U[0, 1, 2]
    assert np.shares_memory(unfold(T), U)


def test_slice_norms_unfolded_are_the_frames_norms():
    T = np.random.default_rng(1).standard_normal((5, 6, 7))
    expected = np.linalg.norm(T.reshape(5, -1), axis=1)
    np.testing.assert_allclose(slice_norms_unfolded(unfold(T)), expected, rtol=1e-12)
