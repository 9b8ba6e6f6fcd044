"""Window refits of the streaming model: KDRSDL on a window snapshot, inline or on a thread.

A refit solves KDRSDL in mean mode on the window (cold, or warm-started from the previous
solution slid to the new window: :func:`core.slide_state`), and estimates the background's
per-pixel spread on it (:func:`core.streaming.decision.pixel_spread`). With ``refit_scale`` > 1 it
solves the window reduced by that factor and lifts the solution back (:mod:`core.streaming.coarse`):
the state then holds the coarse A, B, cores, E and duals, and M at the processing resolution. It
never raises: numerical trouble comes back as a report with ``reset=True``, and the model starts
cold at the next refit.
"""

import dataclasses
import os
import queue
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from core.solver.kdrsdl import Cancelled, KDRSDLResult, kdrsdl
from core.solver.state import KDRSDLState
from core.streaming.coarse import coarse_init, lift, reduce_window
from core.streaming.decision import pixel_spread
from core.streaming.params import BackgroundParams
from core.streaming.resolution import refit_shape
from core.streaming.samples import window_samples
from core.streaming.window import WindowFrames

#: Niceness the refit thread adds to its own (Linux, where a thread's priority is its own): the
#: frame loop is the latency-critical work and a refit is background work, so where cameras
#: share the cores a frame waits for no refit. A refit then takes longer only when the cores
#: are busy with frames. (nice 10 weighs a thread about a tenth of nice 0 in Linux's scheduler.)
REFIT_NICENESS = 10


def lower_thread_priority(niceness: int = REFIT_NICENESS) -> bool:
    """Add ``niceness`` to the calling thread's nice value (Linux only; elsewhere it is per process).

    Returns
    -------
    bool
        True when the priority was lowered; False off Linux, or when the OS refused.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + niceness))
    except OSError:
        return False
    return True


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
        The solution; None when the refit failed (``reset``). After a coarse refit (``scale`` >
        1) its arrays are at the refit resolution, except ``M`` (the lifted background).
    sigma : ndarray, shape (m, n), float32, or None
        Per-pixel spread of the background over the window (None unless asked for).
    warm : bool
        Warm-started from the previous solution.
    reset : bool
        The refit failed numerically; ``error`` says how.
    error : str or None
    rank : int
        Numerical rank of A (singular values above 1e-3 of the largest); 0 after a reset.
    samples : ndarray, shape (m * n, K), uint8 (as stored), or None
        Background samples from the window (:func:`core.streaming.samples.window_samples`), made
        by cold refits when asked for; None otherwise.
    """

    start: int
    seconds: float
    cpu_seconds: float
    result: Optional[KDRSDLResult] = None
    sigma: Optional[np.ndarray] = None
    warm: bool = False
    reset: bool = False
    error: Optional[str] = None
    rank: int = 0
    samples: Optional[np.ndarray] = None

    @property
    def n_iter(self) -> int:
        """Iterations the solver ran (0 after a reset)."""
        return 0 if self.result is None else self.result.n_iter

    @property
    def converged(self) -> bool:
        """The solver met its tolerance before its iteration cap."""
        return self.result is not None and bool(self.result.converged)

    @property
    def residual(self) -> float | None:
        """Last value of the solver's stopping criterion; None after a reset."""
        return None if self.result is None else float(self.result.criterion[-1])


def numerical_rank(A: np.ndarray) -> int:
    """Numerical rank of a factor (m, r): its singular values above 1e-3 of the largest (int)."""
    s = np.linalg.svd(A, compute_uv=False)
    return int(np.sum(s > 1e-3 * s[0])) if s.size and s[0] > 0 else 0


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
    e_cut: float
    spread: bool = True
    samples: int = 0
    scale: int = 1
    background: str = "kdrsdl"
    compiled: bool = False
    still_cut: float | None = None

    @classmethod
    def from_knobs(cls, p: BackgroundParams, lam: float, compiled: bool = False) -> "RefitSettings":
        """The refit settings a model's knobs give, with its regularisation weight ``lam``;
        ``compiled``: the model's compiled kernels are loaded, and the solver's sweeps use theirs
        (``kdrsdl(..., compiled=True)``, the same iterates)."""
        pixel = p.decision == "pixel"
        return cls(
            rank=p.rank,
            lam=lam,
            alpha=p.alpha,
            tol=p.refit_tol,
            max_iter=p.refit_max_iter,
            backoff=p.refit_backoff,
            rebalance=p.rebalance,
            e_cut=p.e_cut,
            spread=pixel,
            samples=p.samples if pixel else 0,
            scale=p.solve_scale,
            background=p.refit_background,
            compiled=compiled,
            still_cut=p.pixel_floor if p.still_cut else None,
        )


def solve_window(
    X: np.ndarray | WindowFrames,
    init: KDRSDLState | None,
    start: int,
    s: RefitSettings,
    cancel: threading.Event | None = None,
    fg: np.ndarray | None = None,
    still: np.ndarray | None = None,
) -> RefitReport | None:
    """One refit of window ``X`` (N, m, n) float32; never raises, but returns None when cancelled.

    Parameters
    ----------
    X : ndarray, shape (N, m, n), float32, or WindowFrames
        The window's frames, intensity in [0, 1]; a :class:`core.streaming.window.WindowFrames` is
        stacked here (on the refit's thread, its time counted in the report), with its masks as ``fg``.
    init : KDRSDLState or None
        Warm start (already slid to this window), or None for a cold fit (3x the iterations).
    start : int
        Index of the window's first frame, carried into the report.
    s : RefitSettings
        ``spread`` False skips the per-pixel spread; ``samples`` > 0 makes a cold refit seed that
        many background samples per pixel; ``scale`` > 1 solves the window reduced by that
        factor and lifts M and E back to ``X``'s resolution (:func:`core.streaming.coarse.lift`).
    cancel : threading.Event, optional
        Set it to abandon the refit (checked between the solver's iterations).
    fg : ndarray, shape (N, m, n), bool, optional
        Window samples the model called foreground that entered as they were (the warm-up's,
        :attr:`core.streaming.window.WindowSchedule.masks`): left out of the spread and replaced by
        ``M`` in the samples' seeding, as the samples ``E`` flags are. With an array ``X`` only.
    still : ndarray, shape (m, n), bool, optional
        Pixels whose background held still when the refit started (no dynamic pixel within
        ``fit_reach``). With ``s.still_cut`` set, their window samples farther than it from ``M``
        are flagged as ``E``'s are where they are at most half the window (docs/algorithm.md, "The
        spread at still pixels"): left out of the spread and flagged in the samples' seeding.

    Returns
    -------
    RefitReport or None
        None when ``cancel`` was set before the refit finished.

    Raises
    ------
    TypeError
        If ``X`` is a ``WindowFrames`` and ``fg`` is given too (the window carries its masks).
    """
    if isinstance(X, WindowFrames) and fg is not None:
        raise TypeError("solve_window: a WindowFrames carries its own masks; pass fg with an array only")
    t0, c0 = time.perf_counter(), time.thread_time()
    try:
        if isinstance(X, WindowFrames):
            window = X
            X, fg = window.stack(), window.stack_masks()
        shape = refit_shape(X.shape[1:], s.scale)
        coarse = shape != X.shape[1:]
        Xs = reduce_window(X, shape) if coarse else X
        if init is not None and coarse:
            init = coarse_init(init, shape)
        r = min(s.rank, *shape)
        # A coarse refit weighs |R|_1 by alpha / scale (core.streaming.coarse, "The weight of R")
        alpha = s.alpha / s.scale if coarse else s.alpha
        # Overflow is caught by the finiteness check below and becomes a counted reset, so
        # NumPy's floating-point warnings are not needed (np.errstate is per thread). A refit
        # stops at max_iter by design: no ConvergenceWarning (warning filters are process-wide).
        # The criterion is computed only where it can stop the solve (lazy_criterion): a warm
        # refit on its budget rarely meets tol, and the masks are the same to the bit.
        with np.errstate(all="ignore"):
            res = kdrsdl(
                Xs,
                r,
                lam=s.lam,
                alpha=alpha,
                mean=True,
                tol=s.tol,
                max_iter=3 * s.max_iter if init is None else s.max_iter,
                warn=False,
                cancel=cancel,
                lazy_criterion=True,
                init=init,  # backoff and rebalance apply to a warm start only
                backoff=s.backoff,
                rebalance=s.rebalance,
                compiled=s.compiled,
            )
        assert res.M is not None  # mean mode always returns M
        if not all(np.isfinite(a).all() for a in (res.A, res.B, res.M, res.R)):
            raise FloatingPointError("window refit produced non-finite values")
        M, E = res.M, res.E
        if coarse:
            M, E = lift(X, Xs, res, s.lam, s.e_cut)
            res = dataclasses.replace(res, M=M, state=dataclasses.replace(res.state, M=M))
        if s.background == "median":  # the ablation without KDRSDL's split: the window's median
            M = np.median(X, axis=0).astype(np.float32)
            E = np.where(np.abs(X - M) > s.lam, X - M, 0).astype(np.float32)
            res = dataclasses.replace(res, M=M, state=dataclasses.replace(res.state, M=M))
        far = None
        if s.still_cut is not None and still is not None and s.spread:
            dev = np.subtract(X, M)  # |X - M| in one window-sized array
            far = np.abs(dev, out=dev) > np.float32(s.still_cut)
            del dev
            # passing objects are the window's minority; where most samples are far, the
            # background itself is changing (an object that stopped, a car that left): E decides
            far &= still & (np.count_nonzero(far, axis=0) * 2 <= len(X))
        sigma = pixel_spread(X, M, E, s.e_cut, fg, far) if s.spread else None
        samples = None
        if init is None and s.samples and s.spread:
            samples = window_samples(X, M, E, s.e_cut, s.samples, fg, far)
        seconds, cpu = time.perf_counter() - t0, time.thread_time() - c0
        return RefitReport(
            start, seconds, cpu, res, sigma, init is not None, rank=numerical_rank(res.A), samples=samples
        )
    except Cancelled:
        return None
    except (FloatingPointError, np.linalg.LinAlgError, ValueError) as exc:
        return RefitReport(
            start, time.perf_counter() - t0, time.thread_time() - c0, reset=True, error=f"{type(exc).__name__}: {exc}"
        )


class _Job:
    """One threaded refit: its cancel event, and its report once done."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.cancel = threading.Event()
        self.done = threading.Event()
        self.report: RefitReport | None = None

    def run(
        self,
        window: WindowFrames,
        init: KDRSDLState | None,
        start: int,
        settings: RefitSettings,
        still: np.ndarray | None,
    ) -> None:
        try:
            self.report = solve_window(window, init, start, settings, cancel=self.cancel, still=still)
        finally:
            self.done.set()


class PendingRefits:
    """The frames' side of refits run elsewhere, one at a time: the refit whose report is wanted
    and the last one handed over, each with ``kind``, ``done`` (an event) and ``report``.
    :class:`Refitter` and :class:`core.streaming.refit_process.ProcessRefitter` tell how a refit
    runs and how it is told to stop (:meth:`_stop`)."""

    def __init__(self) -> None:
        self._job: Any = None  # the refit whose report is wanted
        self._last: Any = None  # the last refit handed over (possibly cancelled)

    @property
    def busy(self) -> bool:
        """A refit is running (or finished and not yet collected)."""
        return self._job is not None

    @property
    def running(self) -> str | None:
        """ "cold" or "warm" while a refit runs (or awaits collection), else None."""
        return None if self._job is None else self._job.kind

    def wait(self, timeout: float) -> bool:
        """Wait at most ``timeout`` seconds for the pending refit to finish (:meth:`collect` then has
        its report): True when none is pending or it finished, False when it still runs."""
        return self._job is None or self._job.done.wait(timeout)

    def collect(self) -> RefitReport | None:
        """The report of a finished refit, once; None if none finished."""
        if self._job is None or not self._job.done.is_set():
            return None
        job, self._job = self._job, None
        return job.report

    def _stop(self, job: Any) -> None:
        """Tell the refit ``job`` to stop at the solver's next iteration."""
        raise NotImplementedError

    def cancel(self, wait: float = 0.0) -> bool:
        """Abandon a pending refit: it stops at the solver's next iteration, its result is dropped.

        Parameters
        ----------
        wait : float
            Seconds to wait for the last refit handed over to end (0 = do not wait).

        Returns
        -------
        bool
            True when no refit is still running.
        """
        if self._job is not None:
            self._stop(self._job)
        self._job = None
        if self._last is None:
            return True
        return self._last.done.wait(wait) if wait > 0 else self._last.done.is_set()


class Refitter(PendingRefits):
    """Runs refits inline or on a background thread; at most one at a time.

    Parameters
    ----------
    threaded : bool
        On a thread (numpy releases the GIL in BLAS and most ufuncs): a frame never waits for
        a refit, and the result lands at the first frame after it finished. One daemon thread
        serves every refit: a process never waits at exit for a refit it no longer needs, and
        the refits' memory stays with one thread's allocator arena. The thread runs at a lower
        priority than the frames (:data:`REFIT_NICENESS`). A refit can be cancelled
        (:meth:`cancel`).
    """

    def __init__(self, threaded: bool) -> None:
        super().__init__()
        self.threaded = threaded
        self._queue: queue.SimpleQueue | None = None

    def submit(
        self,
        window: WindowFrames,
        init: KDRSDLState | None,
        start: int,
        settings: RefitSettings,
        still: np.ndarray | None = None,
    ) -> RefitReport | None:
        """Start a refit of ``window`` (:func:`solve_window`'s other arguments); inline, its report
        is returned at once, else None (see :meth:`collect`). On the thread the window is stacked
        there, off the frames' path."""
        if not self.threaded:
            return solve_window(window, init, start, settings, still=still)
        if self._queue is None:
            self._queue = queue.SimpleQueue()
            threading.Thread(target=self._serve, args=(self._queue,), name="kdrsdl-refit", daemon=True).start()
        self._job = self._last = _Job("cold" if init is None else "warm")
        self._queue.put((self._job, (window, init, start, settings, still)))
        return None

    @staticmethod
    def _serve(jobs: queue.SimpleQueue) -> None:
        lower_thread_priority()
        while True:
            job, args = jobs.get()
            job.run(*args)
            del job, args  # the window snapshot is freed now, not when the next refit arrives

    def close(self, wait: float = 0.0) -> bool:
        """:meth:`cancel` (the thread stays, idle): the interface of
        :class:`core.streaming.refit_process.ProcessRefitter`, whose ``close`` also ends its child."""
        return self.cancel(wait)

    def _stop(self, job: _Job) -> None:
        job.cancel.set()
