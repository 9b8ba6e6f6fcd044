"""The batched Stein solve against the direct Kronecker solve (issue 2, check 1)."""

import numpy as np
import pytest

from core.solver.stein import stein_solve, stein_solve_direct


def _psd(rng, r, rank):
    G = rng.standard_normal((r, rank))
    return G @ G.T


@pytest.mark.parametrize("r", [1, 2, 5, 12, 20])
@pytest.mark.parametrize("rank_deficient", [False, True])
def test_batched_stein_matches_kronecker_solve(r, rank_deficient):
    rng = np.random.default_rng(r)
    rank = max(1, r // 2) if rank_deficient else r
    AtA, BtB = _psd(rng, r, rank), _psd(rng, r, r)
    C = rng.standard_normal((7, r, r))
    mu, muK = 3.7, 0.45
    K = stein_solve(AtA, BtB, C, mu, muK)
    K_ref = stein_solve_direct(AtA, BtB, C, mu, muK)
    # Both are backward-stable solves of a system whose condition number is at most
    # (muK + mu |AtA| |BtB|) / muK ~ 1e3 here: 1e-10 leaves 3 orders above float64 rounding.
    np.testing.assert_allclose(K, K_ref, rtol=0, atol=1e-10 * np.abs(K_ref).max())
    # And it solves the equation itself (residual test, as scipy.linalg's solver tests do).
    residual = muK * K + mu * AtA @ K @ BtB - C
    assert np.abs(residual).max() < 1e-10 * np.abs(C).max()


def test_float32_is_kept_and_accurate():
    rng = np.random.default_rng(0)
    r = 10
    AtA, BtB = _psd(rng, r, r).astype(np.float32), _psd(rng, r, r).astype(np.float32)
    C = rng.standard_normal((4, r, r)).astype(np.float32)
    K = stein_solve(AtA, BtB, C, 2.0, 1.0)
    assert K.dtype == np.float32
    K_ref = stein_solve_direct(AtA.astype(float), BtB.astype(float), C.astype(float), 2.0, 1.0)
    # float32 eps ~ 1.2e-7 times a condition number ~1e2: 1e-4 relative is a loose but failing bound.
    assert np.abs(K - K_ref).max() < 1e-4 * np.abs(K_ref).max()


def test_nonpositive_muK_is_refused():
    with pytest.raises(ValueError, match="muK must be > 0"):
        stein_solve(np.eye(2), np.eye(2), np.zeros((1, 2, 2)), 1.0, 0.0)
