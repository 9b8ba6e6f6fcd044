"""The streaming background model: KDRSDL on a sliding window, a mask per frame.

An OpenCV-style background subtractor (``apply(frame) -> fgmask``,
``getBackgroundImage()``), so a user of ``cv2.createBackgroundSubtractorMOG2()``
can swap it in. Causal: a frame's mask uses that frame and earlier ones only.
"""

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Optional

import cv2
import numpy as np
import scipy.ndimage

from core.solver.frame_fit import fit_cores
from core.solver.kdrsdl import KDRSDLResult
from core.solver.products import sandwich
from core.solver.state import KDRSDLState, slide_state
from core.streaming import resolution, snapshot
from core.streaming.decision import DecisionParams, PixelDecision
from core.streaming.params import BackgroundParams
from core.streaming.postprocess import postprocess, square
from core.streaming.refit import RefitReport, RefitSettings, Refitter
from core.streaming.snapshot import ModelSnapshot
from core.streaming.window import WindowSchedule

__all__ = ["BackgroundParams", "FrameResult", "KDRSDLBackgroundSubtractor", "CHECKPOINT_VERSION"]

#: 1 / Phi^-1(3/4): turns a median absolute deviation into a Gaussian sigma.
MAD_TO_SIGMA = 1.4826
#: Version of the :meth:`KDRSDLBackgroundSubtractor.checkpoint` layout.
CHECKPOINT_VERSION = snapshot.VERSION


@dataclass
class FrameResult:
    """What :meth:`KDRSDLBackgroundSubtractor.process` returns for one frame.

    Attributes
    ----------
    fgmask : ndarray, shape (h, w), uint8
        0 background, 255 foreground; at the input resolution, or at the processing
        resolution with ``mask_resolution="processing"``.
    score_processing : ndarray, shape (hp, wp), float32
        Foreground score |x - L| in [0, 1] at the processing resolution
        (:mod:`core.streaming.resolution`); ``score`` has it at the mask's.
    threshold : float or None
        The global threshold applied to ``score`` (``decision="global"``, and every frame
        before the first refit); None when the per-pixel bands decided.
    refit : RefitReport or None
        The window refit installed at this frame (:class:`core.streaming.refit.RefitReport`: a solution,
        or ``reset`` after numerical trouble, when the model starts cold at the next refit);
        None when none was.
    """

    fgmask: np.ndarray
    score_processing: np.ndarray
    threshold: Optional[float]
    refit: Optional[RefitReport] = field(default=None)

    @property
    def score(self) -> np.ndarray:
        """The foreground score at the mask's resolution, float32 (h, w) (enlarged on access)."""
        return resolution.enlarge(self.score_processing, self.fgmask.shape)


def _block_mean(x, f):
    if f == 1:
        return x
    h, w = x.shape
    return x[: h - h % f, : w - w % f].reshape(h // f, f, w // f, f).mean(axis=(1, 3), dtype=np.float32)


class KDRSDLBackgroundSubtractor:
    """Background subtraction with KDRSDL on a sliding window of frames.

    A thin facade over the model's parts. The window (:mod:`core.streaming.window`): every
    ``window_stride``-th frame enters it, foreground pixels blended towards the background
    (``update_blend``). The refits
    (:mod:`core.streaming.refit`): every ``refit_interval`` frames KDRSDL is re-solved on the window in
    mean mode, warm-started from the previous solution (A, B and duals, :func:`core.solver.kdrsdl`
    with :func:`core.slide_state`), inline or on a thread, and the background's per-pixel
    spread is estimated with the samples in ``E`` left out. The decision
    (:mod:`core.streaming.decision`): each frame's background is the window's robust mean ``M`` (plus
    the frame's global offset; see ``frame_model`` for the alternatives) and a pixel is
    foreground when it leaves its per-pixel band; the mask is then post-processed
    (:mod:`core.streaming.postprocess`). The score ``|x - L|`` (the paper's Section 5.1 score) comes
    with every mask. Checkpoints (:meth:`checkpoint`, :meth:`restore`; the layout is
    :mod:`core.streaming.snapshot`) hold the window, the solver state and the decision's
    per-pixel state.

    Until the first full window, the model is refitted cold at 2, 4, 8, ...
    frames, so masks come from the second frame on (rough at first).

    Parameters
    ----------
    params : BackgroundParams, optional
        Knobs (:mod:`core.streaming.params`); keyword arguments override its fields (the
        object passed is not modified).
    **overrides
        Field values of :class:`BackgroundParams`.

    Raises
    ------
    ValueError
        If a knob is out of range (the message names it).
    """

    def __init__(self, params: BackgroundParams | None = None, **overrides: Any) -> None:
        params = params or BackgroundParams()
        #: Resets to a cold start after numerical trouble in a refit (int, never cleared).
        self.n_resets = 0
        for k in overrides:
            if not hasattr(params, k):
                raise ValueError(f"unknown parameter {k!r}")
        self.params = dataclasses.replace(params, **overrides).validate()
        self._refitter = Refitter(self.params.async_refit)
        self.reset()

    def reset(self) -> None:
        """Forget everything (e.g. after the camera changed resolution)."""
        p = self.params
        self.shape: tuple[int, int] | None = None
        self._proc_shape: tuple[int, int] | None = None  # the processing resolution (h, w)
        self._window = WindowSchedule(p.window, p.window_stride, p.refit_interval)
        self._result: KDRSDLResult | None = None
        self._result_start = 0  # window.start of the window the result was solved on
        self._refitter.cancel()
        self.n_frames = 0
        self._background: np.ndarray | None = None
        self._lam: float | None = None
        self._sigma: np.ndarray | None = None  # per-pixel spread of the background (solve resolution)
        self._decider: PixelDecision | None = None  # per-pixel feedback state
        self._sync_refit: RefitReport | None = None  # report of an inline refit run after the last frame

    # ----------------------------------------------------------------- OpenCV API
    def apply(self, image: np.ndarray, fgmask: np.ndarray | None = None, learningRate: float = -1) -> np.ndarray:
        """Foreground mask of a frame, as ``cv2.BackgroundSubtractor.apply``.

        Parameters
        ----------
        image : ndarray, shape (h, w), uint8 (0-255) or float (0-1)
            Grayscale frame. A frame of another shape than the previous ones
            resets the model.
        fgmask : ignored
            Present for OpenCV compatibility.
        learningRate : ignored
            Present for OpenCV compatibility (the window sets the memory).

        Returns
        -------
        ndarray, shape (h, w), uint8
            0 background, 255 foreground.

        Raises
        ------
        ValueError
            If the frame is not 2-D, is empty or holds non-finite values.
        """
        return self.process(image).fgmask

    def getBackgroundImage(self) -> np.ndarray | None:
        """Background of the last frame (see ``frame_model``), shape (h, w), uint8; None before the first frame."""
        if self._background is None or self.shape is None:
            return None
        bg = resolution.enlarge(self._background, self.shape)
        return np.clip(np.round(bg * 255), 0, 255).astype(np.uint8)

    # ----------------------------------------------------------------- checkpoints
    def _settings(self) -> str:
        """The knobs a checkpoint must match (all but ``async_refit``), as JSON."""
        d = dataclasses.asdict(self.params)
        for name in ("async_refit", "mask_resolution"):  # neither changes what the model learns
            d.pop(name)
        return json.dumps(d, sort_keys=True)

    def checkpoint(self) -> dict[str, np.ndarray | np.generic] | None:
        """The learnt state as named arrays, for ``numpy.savez``; None before the first frame.

        Holds the window of frames, its counters, the regularisation weight and,
        once a window was solved, the solver state (A, B, cores, duals, M, mu), the
        background's per-pixel spread and the decision's state. :meth:`restore` on a new
        subtractor with the same knobs continues the stream as if uninterrupted: the next
        refit is a warm start.

        Returns
        -------
        dict of str to ndarray, or None
            The layout of :func:`core.streaming.snapshot.to_arrays`. The arrays are not
            copied where they are never modified in place.
        """
        if self.shape is None or self._lam is None:
            return None
        w = self._window
        counters = {name: getattr(w, name) for name in WindowSchedule.COUNTERS}
        counters.update(result_start=self._result_start, n_frames=self.n_frames)
        decision = (
            None if self._decider is None else {name: getattr(self._decider, name) for name in PixelDecision.STATE}
        )
        snap = ModelSnapshot(
            frame_shape=self.shape,
            window=w.stack(),
            counters=counters,
            lam=self._lam,
            state=self.state,
            sigma=self._sigma if self._result is not None else None,
            decision=decision,
        )
        return snapshot.to_arrays(snap, self._settings())

    def restore(self, ckpt: Mapping[str, np.ndarray]) -> bool:
        """Continue from a :meth:`checkpoint` (e.g. after a process restart).

        Parameters
        ----------
        ckpt : mapping of str to ndarray
            What :meth:`checkpoint` returned (or ``numpy.load`` of its file).

        Returns
        -------
        bool
            True when a solver state was restored (the next refit is a warm
            start), False when only the window was (the next refit is cold).

        Raises
        ------
        ValueError
            If the checkpoint is of another layout version, was made with other
            knobs, or its arrays are missing, of inconsistent shapes or
            non-finite; the model is then left reset (as new).
        """
        self.reset()
        snap = snapshot.from_arrays(ckpt, self._settings(), self.params, PixelDecision.STATE)
        self.shape = snap.frame_shape
        self._proc_shape = resolution.processing_shape(snap.frame_shape, self.params.processing_side)
        self._window.frames = list(snap.window)
        for name in WindowSchedule.COUNTERS:
            setattr(self._window, name, snap.counters[name])
        self._result_start, self.n_frames = snap.counters["result_start"], snap.counters["n_frames"]
        self._lam = snap.lam
        self._sigma = snap.sigma
        if snap.decision is not None:
            self._decider = self._new_decider(self._proc_shape)
            for name, a in snap.decision.items():
                setattr(self._decider, name, a)
        if snap.state is not None:
            st, empty = snap.state, np.zeros(0)
            self._result = KDRSDLResult(
                A=st.A,
                B=st.B,
                R=st.R,
                E=st.E,
                M=st.M,
                n_iter=0,
                converged=True,
                err_rec=empty,
                err_split=empty,
                warm_start=True,
                state=st,
            )
            if self.params.frame_model == "last":
                self._last_bg = sandwich(self._result.A, self._result.R[-1:], self._result.B)[0] + self._result.M
        return snap.state is not None

    # ----------------------------------------------------------------- model
    @property
    def refit_running(self) -> str | None:
        """ "cold" or "warm" while a window refit runs on its thread, else None."""
        return self._refitter.running

    @property
    def processing_shape(self) -> tuple[int, int] | None:
        """The (h, w) at which frames are processed (:mod:`core.streaming.resolution`); None before a frame."""
        return self._proc_shape

    @property
    def state(self) -> KDRSDLState | None:
        """The last window solution's :class:`core.KDRSDLState`, or None."""
        return None if self._result is None else self._result.state

    def process(self, image: np.ndarray) -> FrameResult:
        """Score, decide and learn one frame; see :meth:`apply`.

        The frame is judged against the background of the frames before it, then enters
        the window (foreground pixels blended towards the background, ``update_blend``).

        Returns
        -------
        FrameResult
        """
        x = self._as_float(image)
        shape = (x.shape[0], x.shape[1])
        if self.shape != shape or self._proc_shape is None:
            self.reset()
            self.shape = shape
            self._proc_shape = resolution.processing_shape(shape, self.params.processing_side)
        x = resolution.reduce(x, self._proc_shape)
        p = self.params
        small = _block_mean(x, p.downscale)
        if self._lam is None:
            self._lam = p.lam if p.lam is not None else 1.0 / np.sqrt(p.window * max(small.shape))
        refit = self._collect()
        bg_small = self._background_small(small)
        if p.global_offset and self._result is not None:
            # the frame's global brightness change since the window was solved (clouds, auto-exposure)
            # (median over one pixel in each 4 x 4 block: a sixteenth of the cost, the same offset to ~1e-3)
            bg_small = bg_small + np.float32(np.median(small[::4, ::4] - bg_small[::4, ::4]))
        bg = self._upsample(bg_small, x.shape)
        score: np.ndarray = cv2.absdiff(x, bg)  # |x - bg| in one pass
        self._background = bg
        t = (
            None
            if p.decision == "pixel" and self._result is not None
            else self._global_threshold(score, small, bg_small)
        )
        if self._result is None:
            mask = score > t
        elif p.decision == "pixel":
            if self._decider is None:
                self._decider = self._new_decider(x.shape)
            mask = self._decider.decide(x, bg, self._upsample(self._sigma, x.shape))
        else:
            mask = postprocess(score > t, p.open_size, p.close_size, p.fill_holes)
        learnt = small
        if self._window.enters_next() and self._result is not None and p.update_blend > 0 and mask.any():
            under = (
                mask if p.update_margin <= 1 else cv2.dilate(mask.view(np.uint8), square(p.update_margin)).view(bool)
            )
            under = _block_mean(under.astype(np.float32), p.downscale) > 0
            w = np.float32(p.update_blend)
            learnt = np.where(under, w * bg_small + (1 - w) * small, small).astype(np.float32)
        self._learn(learnt)
        self.n_frames += 1
        if p.mask_resolution == "input":
            mask = resolution.enlarge_mask(mask, shape)
        return FrameResult(
            fgmask=mask.view(np.uint8) * np.uint8(255),
            score_processing=score,
            threshold=None if t is None else float(t),
            refit=refit if refit is not None else self._sync_refit,
        )

    def close(self, wait: float = 2.0) -> bool:
        """Abandon a running refit (at shutdown): it stops at its next iteration.

        Parameters
        ----------
        wait : float
            Seconds to wait for the refit's thread to end.

        Returns
        -------
        bool
            True when no refit is still running. The learnt state is untouched: a
            :meth:`checkpoint` after ``close`` holds the last installed solution.
        """
        return self._refitter.cancel(wait)

    def _new_decider(self, shape):
        p = self.params
        return PixelDecision(shape, DecisionParams.from_knobs(p), p.open_size, p.close_size, p.fill_holes)

    def _global_threshold(self, score, small, bg_small):
        p = self.params
        if p.threshold is not None:
            return p.threshold
        resid = score if p.downscale == 1 else np.abs(small - bg_small)
        return max(p.min_threshold, p.k_sigma * MAD_TO_SIGMA * float(np.median(resid)))

    @staticmethod
    def _as_float(image):
        a = np.asarray(image)
        if a.ndim != 2 or 0 in a.shape:
            raise ValueError(f"frame must be a non-empty 2-D grayscale array, got shape {a.shape}")
        if a.dtype == np.uint8:
            return np.multiply(a, np.float32(1 / 255), dtype=np.float32)  # one pass
        a = a.astype(np.float32)
        if not np.isfinite(a).all():
            raise ValueError("frame contains non-finite values")
        return a

    def _upsample(self, small, shape):
        f = self.params.downscale
        if f == 1:
            return small
        big = scipy.ndimage.zoom(small, f, order=1, grid_mode=True, mode="nearest")
        out = np.empty(shape, dtype=np.float32)
        h, w = min(big.shape[0], shape[0]), min(big.shape[1], shape[1])
        out[:h, :w] = big[:h, :w]
        out[h:, :w] = big[h - 1 : h, :w]
        out[:, w:] = out[:, w - 1 : w]
        return out

    def _learn(self, small) -> None:
        """Put a frame into the window when its turn comes, and start a refit when one is due."""
        p = self.params
        self._sync_refit = None
        w = self._window
        entered = w.push(small)
        if self._refitter.busy:
            return  # a refit is running; the next one waits for it
        solved = None if self._result is None else self._result.state.n_slices
        if not w.refit_due(solved, entered):
            return
        init = None
        if not w.growing(solved):
            # A window that slid past all of the last solution's frames (a refit slower than a
            # whole window of frames) keeps only the dictionary A, B, M: every core starts afresh.
            assert self._result is not None and solved is not None  # a sliding window has a solution
            init = slide_state(self._result.state, min(w.start - self._result_start, solved))
        w.started_refit()
        assert self._lam is not None  # set by the first frame, before any refit
        settings = RefitSettings(
            rank=p.rank,
            lam=self._lam,
            alpha=p.alpha,
            tol=p.refit_tol,
            max_iter=p.refit_max_iter,
            backoff=p.refit_backoff,
            rebalance=p.rebalance,
            e_cut=p.e_cut if p.decision == "pixel" else None,
        )
        report = self._refitter.submit(w.stack(), init, w.start, settings)
        if report is not None:
            self._install(report)
            self._sync_refit = report

    def _collect(self) -> RefitReport | None:
        """Install a finished background refit; its report, or None."""
        report = self._refitter.collect()
        if report is not None:
            self._install(report)
        return report

    def _install(self, report: RefitReport) -> None:
        if report.reset:
            # Numerical trouble: drop the solution, keep the frames, start cold next time.
            self._result = None
            self.n_resets += 1
            return
        self._result, self._result_start, self._sigma = report.result, report.start, report.sigma
        if self.params.frame_model == "last" and self._result is not None:
            self._last_bg = sandwich(self._result.A, self._result.R[-1:], self._result.B)[0] + self._result.M

    def _background_small(self, small):
        if self._result is None:
            return small  # first frame: everything is background
        res, p = self._result, self.params
        if p.frame_model == "mean":
            return res.M
        if p.frame_model == "last":
            return self._last_bg
        xc = (small - res.M)[None]
        st = res.state
        fit = fit_cores(
            res.A,
            res.B,
            xc,
            lam=self._lam,
            alpha=p.alpha,
            mu_end=st.mu,
            mu_ratio=st.mu / st.muK,
            rho=2.0,
            max_iter=p.frame_iters,
        )
        return sandwich(res.A, fit.R, res.B)[0] + res.M
