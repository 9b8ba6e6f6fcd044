"""Window refits of the streaming model: KDRSDL on a window snapshot, inline or on a thread.

A refit solves KDRSDL in mean mode on the window (cold, or warm-started from the previous
solution slid to the new window: :func:`core.slide_state`), and estimates the background's
per-pixel spread on it (:func:`core.streaming.decision.pixel_spread`). It never raises: numerical trouble
comes back as a report with ``reset=True``, and the model starts cold at the next refit.
"""

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Optional

import numpy as np

from core.streaming.decision import pixel_spread
from core.solver.kdrsdl import KDRSDLResult, kdrsdl


@dataclass(frozen=True)
class RefitReport:
    """What one window refit did.

    Attributes
    ----------
    start : int
        Index (count of entries) of the window's first frame, to slide from at the next refit.
    seconds : float
        Wall time of the refit, seconds.
    cpu_seconds : float
        CPU time of the thread that ran it, seconds (one BLAS thread: all of its CPU).
    result : KDRSDLResult or None
        The solution; None when the refit failed (``reset``).
    sigma : ndarray, shape (m, n), float32, or None
        Per-pixel spread of the background over the window (None unless asked for).
    warm : bool
        Warm-started from the previous solution.
    reset : bool
        The refit failed numerically; ``error`` says how.
    error : str or None
    """

    start: int
    seconds: float
    cpu_seconds: float
    result: Optional[KDRSDLResult] = None
    sigma: Optional[np.ndarray] = None
    warm: bool = False
    reset: bool = False
    error: Optional[str] = None

    @property
    def n_iter(self):
        """Iterations the solver ran (0 after a reset)."""
        return 0 if self.result is None else self.result.n_iter

    @property
    def converged(self):
        """The solver met its tolerance before its iteration cap."""
        return self.result is not None and bool(self.result.converged)

    @property
    def residual(self):
        """Last value of the solver's stopping criterion; None after a reset."""
        return None if self.result is None else float(self.result.criterion[-1])

    @property
    def rank(self):
        """Numerical rank of A (singular values above 1e-3 of the largest); 0 after a reset."""
        if self.result is None:
            return 0
        s = np.linalg.svd(self.result.A, compute_uv=False)
        return int(np.sum(s > 1e-3 * s[0])) if s[0] > 0 else 0


@dataclass(frozen=True)
class RefitSettings:
    """The solver settings of a refit (see :class:`core.streaming.background.BackgroundParams`)."""

    rank: int
    lam: float
    alpha: float
    tol: float
    max_iter: int
    backoff: float
    rebalance: bool
    e_cut: Optional[float]


def solve_window(X, init, start, s):
    """One refit of window ``X`` (N, m, n) float32; never raises.

    Parameters
    ----------
    X : ndarray, shape (N, m, n), float32
        The window's frames, intensity in [0, 1].
    init : KDRSDLState or None
        Warm start (already slid to this window), or None for a cold fit (3x the iterations).
    start : int
        Index of the window's first frame, carried into the report.
    s : RefitSettings
        ``e_cut`` None skips the per-pixel spread.

    Returns
    -------
    RefitReport
    """
    t0, c0 = time.perf_counter(), time.thread_time()
    try:
        r = min(s.rank, *X.shape[1:])
        # Overflow is caught by the finiteness check below and becomes a counted reset, so
        # NumPy's floating-point warnings are not needed (np.errstate is per thread). A refit
        # stops at max_iter by design: no ConvergenceWarning (warning filters are process-wide).
        with np.errstate(all="ignore"):
            if init is None:
                res = kdrsdl(X, r, lam=s.lam, alpha=s.alpha, mean=True, tol=s.tol, max_iter=3 * s.max_iter,
                             warn=False)
            else:
                res = kdrsdl(X, r, lam=s.lam, alpha=s.alpha, mean=True, tol=s.tol, max_iter=s.max_iter,
                             init=init, backoff=s.backoff, rebalance=s.rebalance, warn=False)
        if not all(np.isfinite(a).all() for a in (res.A, res.B, res.M, res.R)):
            raise FloatingPointError("window refit produced non-finite values")
        sigma = None if s.e_cut is None else pixel_spread(X, res.M, res.E, s.e_cut)
        return RefitReport(start, time.perf_counter() - t0, time.thread_time() - c0, res, sigma, init is not None)
    except (FloatingPointError, np.linalg.LinAlgError, ValueError) as exc:
        return RefitReport(start, time.perf_counter() - t0, time.thread_time() - c0, reset=True,
                           error=f"{type(exc).__name__}: {exc}")


class Refitter:
    """Runs refits inline or on one background thread; at most one at a time.

    Parameters
    ----------
    threaded : bool
        On a thread (numpy releases the GIL in BLAS and most ufuncs): a frame never waits for
        a refit, and the result lands at the first frame after it finished.
    """

    def __init__(self, threaded):
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kdrsdl-refit") if threaded else None
        self._future = None

    @property
    def busy(self):
        """A threaded refit is running (or finished and not yet collected)."""
        return self._future is not None

    def submit(self, X, init, start, settings):
        """Start a refit; inline, its report is returned at once, else None (see :meth:`collect`)."""
        if self._executor is None:
            return solve_window(X, init, start, settings)
        self._future = self._executor.submit(solve_window, X, init, start, settings)
        return None

    def collect(self):
        """The report of a finished threaded refit, once; None if none finished."""
        if self._future is None or not self._future.done():
            return None
        future, self._future = self._future, None
        return future.result()

    def cancel(self):
        """Forget a pending refit (its result, if it comes, is dropped)."""
        if self._future is not None:
            self._future.cancel()
        self._future = None
