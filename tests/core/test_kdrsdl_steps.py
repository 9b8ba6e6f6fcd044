"""The steps of Algorithm 1 (core/solver/kdrsdl.py), each against the equation it solves.

Each step is checked on random unfolded arrays in float64, written out slice by slice in the
paper's (N, ...) form: the dictionary step's normal equations, the Stein equation of the core
step, the shrinkage and the dual update, and the sweep's E, M, S and Lambda. Residuals are
relative; 1e-10 is float64 rounding on these sizes with a margin of 100x or more.
"""

import numpy as np
import pytest

from core.solver.kdrsdl import _Pixels, _sweep, _update_cores, _update_dictionary
from core.solver.products import fold, unfold
from core.solver.prox import shrink

N, m, n, r = 5, 23, 17, 4


@pytest.fixture
def rng():
    return np.random.default_rng(7)


def test_update_dictionary_solves_the_normal_equations(rng):
    T = rng.standard_normal((m, N, n))  # S / mu, unfolded
    K = rng.standard_normal((r, N, r))
    B0 = rng.standard_normal((n, r))
    mu = 3.7
    TB = np.einsum("min,nr->mir", T, B0)
    A, B, AtT, AtA = _update_dictionary(TB, T, K, B0, mu)
    S = fold(T) * mu  # (N, m, n)
    Ks = fold(K)  # (N, r, r)
    # Step 3: A (I + mu sum_i K_i B0^T B0 K_i^T) = sum_i S_i B0 K_i^T
    lhs = A @ (np.eye(r) + mu * sum(k @ B0.T @ B0 @ k.T for k in Ks))
    rhs = sum(s @ B0 @ k.T for s, k in zip(S, Ks, strict=True))
    assert np.linalg.norm(lhs - rhs) <= 1e-10 * np.linalg.norm(rhs)
    # Step 4, with the new A: B (I + mu sum_i K_i^T A^T A K_i) = sum_i S_i^T A K_i
    lhs = B @ (np.eye(r) + mu * sum(k.T @ A.T @ A @ k for k in Ks))
    rhs = sum(s.T @ A @ k for s, k in zip(S, Ks, strict=True))
    assert np.linalg.norm(lhs - rhs) <= 1e-10 * np.linalg.norm(rhs)
    # A^T T_i, stacked (r * N, n), with the new A
    np.testing.assert_allclose(AtT.reshape(r, N, n), np.einsum("mr,min->rin", A, T), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(AtA, A.T @ A, rtol=1e-12)


def test_update_dictionary_refuses_non_finite_cores(rng):
    K = rng.standard_normal((r, N, r))
    K[1, 2, 3] = np.nan
    T = rng.standard_normal((m, N, n))
    with pytest.raises(FloatingPointError, match="non-finite cores"):
        _update_dictionary(np.zeros((m, N, r)), T, K, rng.standard_normal((n, r)), 1.0)


def test_update_cores_solves_stein_then_shrinks_and_updates_y(rng):
    A = rng.standard_normal((m, r))
    B = rng.standard_normal((n, r))
    T = rng.standard_normal((m, N, n))
    AtT = np.einsum("mr,min->rin", A, T).reshape(r * N, n)
    R0 = rng.standard_normal((r, N, r))
    Y0 = rng.standard_normal((r, N, r))
    Y = Y0.copy()
    mu, muK, alpha = 2.5, 0.8, 0.3
    K, R, Y_new, err_split = _update_cores(AtT, A.T @ A, B, R0, Y, mu, muK, alpha)
    Ks, Rs, R0s, Y0s = fold(K), fold(R), fold(R0), fold(Y0)
    for i in range(N):
        # muK K_i + mu A^T A K_i B^T B = mu A^T T_i B + muK R0_i + Y0_i (A^T S_i B with S = mu T)
        lhs = muK * Ks[i] + mu * A.T @ A @ Ks[i] @ B.T @ B
        rhs = mu * A.T @ T[:, i, :] @ B + muK * R0s[i] + Y0s[i]
        assert np.linalg.norm(lhs - rhs) <= 1e-10 * np.linalg.norm(rhs)
    np.testing.assert_array_equal(R, shrink(K - Y0 / muK, alpha / muK))
    assert Y_new is Y  # in place
    np.testing.assert_allclose(Y_new, Y0 + muK * (R - K), rtol=1e-12, atol=1e-12)
    want = max(np.linalg.norm(Rs[i] - Ks[i]) / np.linalg.norm(Rs[i]) for i in range(N))
    assert err_split == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("mean", [False, True])
def test_sweep_makes_the_paper_updates_on_every_block(rng, mean, monkeypatch):
    # Blocks of 3 rows, so that the sweep's row slicing is exercised (m = 23: 8 blocks, the last of 2).
    monkeypatch.setattr("core.solver.blocks.BLOCK_BYTES", 3 * N * n * 8)
    X = rng.random((N, m, n))
    A, B = rng.standard_normal((m, r)), rng.standard_normal((n, r))
    K, R = rng.standard_normal((r, N, r)), rng.standard_normal((r, N, r))
    mu_k, mu_next, lam = 1.5, 1.8, 0.05
    Lam = rng.standard_normal((m, N, n)) * 0.1  # Lambda, unfolded
    px = _Pixels.allocate(unfold(X), Lam.copy(), mu_k, r, lam, mean)
    assert len(px.blocks) == 8
    S = rng.standard_normal((m, N, n))  # iteration k's S, unfolded
    px.T[:] = S / mu_k
    M = rng.random((m, n)) if mean else None
    M0 = None if M is None else M.copy()
    AK, AR = np.einsum("mr,rip->mip", A, K), np.einsum("mr,rip->mip", A, R)
    parts = [_sweep(px, rows, AK, AR, B, M, mu_k / mu_next, px.E, mu_next) for rows in px.blocks]

    LK = np.einsum("mip,np->min", AK, B)  # A K_i B^T, unfolded
    LR = np.einsum("mip,np->min", AR, B)
    # iteration k's criterion: |Xt - A R_i B^T|^2 per slice, with Xt = (S - Lambda) / mu_k
    crit = np.einsum("min,min->i", (S - Lam) / mu_k - LR, (S - Lam) / mu_k - LR)
    np.testing.assert_allclose(np.sum(parts, axis=0), crit, rtol=1e-10)
    # step 7: Lambda <- S - mu_k A K_i B^T; Q = Lambda / mu_{k+1}
    Lam_new = S - mu_k * LK
    np.testing.assert_allclose(px.Q, Lam_new / mu_next, rtol=1e-10, atol=1e-12)
    # step 1: E = shrink(X - M - A K_i B^T + Lambda / mu, lam / mu)
    Mb = 0 if M0 is None else M0[:, None, :]
    E = shrink(unfold(X) - Mb - LK + Lam_new / mu_next, lam / mu_next)
    np.testing.assert_allclose(px.E, E, rtol=1e-10, atol=1e-12)
    # the robust mean M' = mean_i (X_i - E_i), then step 2: S = mu (Xt + Lambda / mu), Xt = X - E - M'
    M_new = (unfold(X) - E).mean(axis=1) if mean else None
    if mean:
        np.testing.assert_allclose(M, M_new, rtol=1e-10, atol=1e-12)
    Xt = unfold(X) - E - (0 if M_new is None else M_new[:, None, :])
    np.testing.assert_allclose(px.T, Xt + Lam_new / mu_next, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(px.TB, np.einsum("min,np->mip", px.T, B), rtol=1e-10, atol=1e-12)


def test_final_sweep_measures_only(rng):
    X = rng.random((N, m, n))
    A, B = rng.standard_normal((m, r)), rng.standard_normal((n, r))
    K = rng.standard_normal((r, N, r))
    px = _Pixels.allocate(unfold(X), np.zeros((m, N, n)), 1.0, r, 0.1, False)
    px.T[:] = 1.0
    px.E[:] = 5.0
    AK = np.einsum("mr,rip->mip", A, K)
    parts = [_sweep(px, rows, AK, AK, B, None, 1.0, None, 1.0) for rows in px.blocks]
    assert np.sum(parts, axis=0).shape == (N,)
    assert (px.E == 5.0).all()  # no E step without a buffer for it


@pytest.mark.parametrize("mean", [True, False], ids=["mean", "plain"])
def test_the_compiled_sweep_gives_numpys_iterates_to_the_bit(mean):
    """``compiled=True`` (core.solver.fused: the sweep's element-wise steps in one pass) gives the
    numpy sweeps' results to the bit, cold and warm started, in mean mode and without, with a
    penalty that grows (c != 1) and row blocks of several rows: the same float32 operations in
    the same order, the robust mean summed slice after slice and divided in float64 as
    ``np.mean`` does. A float64 solve ignores it."""
    from core.solver.kdrsdl import kdrsdl

    g = np.random.default_rng(3)
    frames, h, w = 12, 40, 56
    low = (g.random((h, 3)) @ g.random((3, w))).astype(np.float32)
    X = np.stack([low + np.float32(0.02) * g.standard_normal((h, w)).astype(np.float32) for _ in range(frames)])
    X[:, 10:20, 10:24] += (g.random((frames, 10, 14)) > 0.5).astype(np.float32) * np.float32(0.5)  # objects
    settings = {"mean": mean, "warn": False, "lazy_criterion": True}
    cold = [kdrsdl(X, 6, max_iter=15, compiled=c, **settings) for c in (False, True)]
    warm_settings = {"init": cold[0].state, "rebalance": True, "backoff": 60.0, **settings}
    warm = [kdrsdl(X, 6, max_iter=8, compiled=c, **warm_settings) for c in (False, True)]
    for want, got in (cold, warm):
        assert got.n_iter == want.n_iter
        for name in ("A", "B", "R", "E", "M"):
            a, b = getattr(want, name), getattr(got, name)
            assert (a is None) == (b is None) and (a is None or np.array_equal(a, b)), name
    assert np.abs(cold[0].E).max() > 0.1  # the objects are in E: the comparison is not of zeros
    X64 = X.astype(np.float64)
    assert np.array_equal(
        kdrsdl(X64, 6, max_iter=3, compiled=True, **settings).E, kdrsdl(X64, 6, max_iter=3, **settings).E
    )
