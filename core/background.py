"""The streaming background model: KDRSDL on a sliding window, a mask per frame.

An OpenCV-style background subtractor (``apply(frame) -> fgmask``,
``getBackgroundImage()``), so a user of ``cv2.createBackgroundSubtractorMOG2()``
can swap it in. Causal: a frame's mask uses that frame and earlier ones only.
"""

import json
from dataclasses import asdict, dataclass, field
from typing import Optional

import cv2
import numpy as np
import scipy.ndimage

from core.decision import DecisionParams, PixelDecision
from core.frame_fit import fit_cores
from core.postprocess import postprocess, square
from core.kdrsdl import KDRSDLResult
from core.refit import RefitReport, Refitter, RefitSettings
from core.products import sandwich
from core.state import KDRSDLState, slide_state

#: 1 / Phi^-1(3/4): turns a median absolute deviation into a Gaussian sigma.
MAD_TO_SIGMA = 1.4826
#: Version of the :meth:`KDRSDLBackgroundSubtractor.checkpoint` layout.
CHECKPOINT_VERSION = 2
_STATE_ARRAYS = ("A", "B", "K", "R", "E", "Lam", "Y", "M")
_STATE_SCALARS = ("mu", "muK", "muK0")
#: The subtractor's attributes a checkpoint stores as ``counters``, in this order.
_COUNTERS = ("_win_start", "_since_window", "_since_refit", "_new_in_window", "_result_start", "n_frames")


@dataclass
class BackgroundParams:
    """Knobs of :class:`KDRSDLBackgroundSubtractor` (defaults work on traffic and pedestrian scenes).

    Attributes
    ----------
    window : int
        Frames in the solver's window N (>= 2).
    window_stride : int
        Every ``window_stride``-th frame enters the window, so it spans
        ``window * window_stride`` frames (slow objects then leave the background).
    rank : int
        Dictionary size r (>= 1, at most min(height, width) after ``downscale``).
    lam : float or None
        Weight of |E|_1. None = the paper's ``1 / sqrt(window * max(m, n))``
        (0.010 at the default window and 320 x 240); the default 0.005 lets E take
        more of the traffic, which keeps it out of the background M.
    alpha : float
        Weight of |R|_1 (paper default 1e-2).
    refit_interval : int
        Frames between window refits (warm-started KDRSDL), >= 1.
    refit_max_iter : int
        Iteration cap of a warm refit (the cold first fit gets 3x).
    refit_tol : float
        Stopping tolerance of the refits.
    refit_backoff : float
        ``backoff`` of each warm refit (:func:`core.kdrsdl`): rho-steps to take mu
        back. A refit that stops at max_iter leaves mu ~ rho^refit_max_iter higher;
        a back-off of less than that ratchets mu up to its cap over a long stream,
        where E absorbs every change and the background stops adapting (measured on
        CDnet highway). 60 brings mu back near the window's mu0.
    rebalance : bool
        Rebalance the scale of A, B and R at each warm refit (``core.kdrsdl``'s
        ``rebalance``): without it, A drifts towards 0 and R towards infinity over
        thousands of frames.
    frame_iters : int
        Iterations of the per-frame core fit on the fixed dictionary.
    threshold : float or None
        Fixed threshold on the foreground score |x - L| (intensity in [0, 1]);
        None = adaptive: ``max(min_threshold, k_sigma * sigma)`` with sigma the
        frame's robust (MAD) residual scale.
    k_sigma : float
        Multiple of the noise sigma for the adaptive threshold.
    min_threshold : float
        Floor of the adaptive threshold (intensity units; 0.10 = 25 gray levels).
    open_size : int
        Side (pixels) of the square of a morphological opening of the mask (removes
        isolated noise pixels); 0 or 1 = none.
    close_size : int
        Side (pixels) of the square of the closing that follows (joins the parts of
        an object split where it matches the background); 0 or 1 = none.
    fill_holes : bool
        Fill the holes of the mask's blobs after the closing (scipy's
        ``binary_fill_holes``): the uniform inside of a vehicle scores low against
        the background but is foreground. On CDnet highway, opening 3 + closing 7 +
        filling gives F 0.880 against 0.793 for opening 3 + closing 3 (with the
        global offset; tests/bench/bench_stream.py reports OpenCV's subtractors
        with the same post-processing beside it).
    downscale : int
        Solve at 1/downscale of the resolution (block mean); the score is
        upsampled back. 1 = full resolution.
    global_offset : bool
        Add the frame's median difference from the background to the background
        before scoring: follows a global brightness change (clouds, automatic
        exposure) between window refits at the cost of one median per frame. On
        CDnet highway: F +0.010.
    frame_model : {"mean", "last", "fit"}
        Background of a new frame: the window's robust mean ``M`` ("mean", the
        default and the most accurate measured on CDnet highway); ``M`` plus the
        low-rank part of the newest window frame ("last"); or ``M + A R B^T`` with
        the frame's own core fitted robustly on the fixed dictionary ("fit",
        ALGORITHM.md "Cheaper still"; it follows illumination changes but also
        absorbs part of slow or large objects).
    decision : {"pixel", "global"}
        How a frame's pixels are judged: "pixel" (default), against per-pixel bands of the
        background's own spread with spatial tolerance and blink feedback
        (:mod:`core.decision`); "global", the earlier rule, one threshold
        ``max(min_threshold, k_sigma * MAD sigma of the frame)`` for every pixel.
    e_cut : float
        "pixel": samples of the window whose KDRSDL sparse part |E| exceeds this (intensity)
        are foreground and left out of the per-pixel spread.
    pixel_floor : float
        "pixel": smallest band half-width (intensity; 0.06 = 15 gray levels).
    tolerance : int
        "pixel": side (pixels) of the neighbourhood whose band a pixel may match (absorbs
        jitter); 1 = none.
    shadow : bool
        "pixel": a pixel darker than its band by a ratio that is uniform over its 5 x 5
        neighbourhood counts as a cast shadow, not foreground (measured: pedestrians +0.008,
        highway -0.005, badminton -0.016, canoe -0.004; off by default).
    blink_gain : float
        "pixel": band widening per unit of a pixel's blink count (0 = no feedback).
    update_blend : float
        Weight of the background in the pixels under the (dilated) mask when a frame enters
        the window: 0 learns the frame as it is (a still object is absorbed within a
        window); 1 never learns foreground (a false detection then never heals). 0.7 keeps a
        still person in office while ghosts fade.
    update_margin : int
        Side (pixels) of the dilation of the mask for ``update_blend``.
    async_refit : bool
        Run window refits on a background thread (numpy releases the GIL in BLAS
        and most ufuncs), so a frame never waits for a refit: frames keep the
        previous dictionary until the new one is ready. Still causal; the exact
        frame at which a refit lands then depends on timing. The worker turns it on.
    """

    window: int = 30
    window_stride: int = 8
    rank: int = 20
    lam: Optional[float] = 0.005
    alpha: float = 1e-2
    refit_interval: int = 40
    refit_max_iter: int = 30
    refit_tol: float = 1e-4
    refit_backoff: float = 60.0
    rebalance: bool = True
    frame_iters: int = 4
    threshold: Optional[float] = None
    k_sigma: float = 3.0
    min_threshold: float = 0.10
    open_size: int = 3
    close_size: int = 7
    fill_holes: bool = True
    global_offset: bool = True
    downscale: int = 1
    frame_model: str = "mean"
    decision: str = "pixel"
    e_cut: float = 0.05
    pixel_floor: float = 0.06
    tolerance: int = 3
    shadow: bool = False
    blink_gain: float = 0.1
    update_blend: float = 0.7
    update_margin: int = 5
    async_refit: bool = False

    def validate(self):
        """Raise ValueError naming the first out-of-range knob."""
        ints = {"window": 2, "window_stride": 1, "rank": 1, "refit_interval": 1, "refit_max_iter": 1,
                "frame_iters": 1, "open_size": 0, "close_size": 0, "downscale": 1, "tolerance": 1,
                "update_margin": 0}
        for name, low in ints.items():
            v = getattr(self, name)
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {v!r}")
        for name in ("alpha", "refit_tol", "k_sigma", "refit_backoff"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and np.isfinite(v) and v > 0):
                raise ValueError(f"{name} must be a finite number > 0, got {v!r}")
        for name in ("lam", "threshold"):
            v = getattr(self, name)
            if v is not None and not (isinstance(v, (int, float)) and np.isfinite(v) and v > 0):
                raise ValueError(f"{name} must be a finite number > 0 or None, got {v!r}")
        if self.frame_model not in ("mean", "last", "fit"):
            raise ValueError(f"frame_model must be 'mean', 'last' or 'fit', got {self.frame_model!r}")
        if self.decision not in ("pixel", "global"):
            raise ValueError(f"decision must be 'pixel' or 'global', got {self.decision!r}")
        for name, low, high in (("min_threshold", 0, 1), ("pixel_floor", 0, 1), ("e_cut", 0, 1), ("blink_gain", 0, 10),
                                ("update_blend", 0, 1)):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and not isinstance(v, bool) and low <= v <= high) or \
                    (name in ("min_threshold", "pixel_floor") and v == high):
                raise ValueError(f"{name} must be in [{low}, {high}], got {v!r}")
        return self


@dataclass
class FrameResult:
    """What :meth:`KDRSDLBackgroundSubtractor.process` returns for one frame.

    Attributes
    ----------
    fgmask : ndarray, shape (h, w), uint8
        0 background, 255 foreground.
    score : ndarray, shape (h, w), float32
        Foreground score |x - L| in [0, 1].
    threshold : float or None
        The global threshold applied to ``score`` (``decision="global"``, and every frame
        before the first refit); None when the per-pixel bands decided.
    refit : RefitReport or None
        The window refit installed at this frame (:class:`core.refit.RefitReport`: a solution,
        or ``reset`` after numerical trouble, when the model starts cold at the next refit);
        None when none was.
    """

    fgmask: np.ndarray
    score: np.ndarray
    threshold: Optional[float]
    refit: Optional[RefitReport] = field(default=None)


def _block_mean(x, f):
    if f == 1:
        return x
    h, w = x.shape
    return x[: h - h % f, : w - w % f].reshape(h // f, f, w // f, f).mean(axis=(1, 3), dtype=np.float32)


class KDRSDLBackgroundSubtractor:
    """Background subtraction with KDRSDL on a sliding window of frames.

    A thin facade over the model's parts. The window: every ``window_stride``-th frame enters
    it, foreground pixels blended towards the background (``update_blend``). The refits
    (:mod:`core.refit`): every ``refit_interval`` frames KDRSDL is re-solved on the window in
    mean mode, warm-started from the previous solution (A, B and duals, :func:`core.kdrsdl`
    with :func:`core.slide_state`), inline or on a thread, and the background's per-pixel
    spread is estimated with the samples in ``E`` left out. The decision
    (:mod:`core.decision`): each frame's background is the window's robust mean ``M`` (plus
    the frame's global offset; see ``frame_model`` for the alternatives) and a pixel is
    foreground when it leaves its per-pixel band; the mask is then post-processed
    (:mod:`core.postprocess`). The score ``|x - L|`` (the paper's Section 5.1 score) comes
    with every mask. Checkpoints (:meth:`checkpoint`, :meth:`restore`) hold the window, the
    solver state and the decision's per-pixel state.

    Until the first full window, the model is refitted cold at 2, 4, 8, ...
    frames, so masks come from the second frame on (rough at first).

    Parameters
    ----------
    params : BackgroundParams, optional
        Knobs; keyword arguments override its fields.
    **overrides
        Field values of :class:`BackgroundParams`.

    Raises
    ------
    ValueError
        If a knob is out of range (the message names it).
    """

    def __init__(self, params=None, **overrides):
        params = params or BackgroundParams()
        self._refitter = None
        #: Resets to a cold start after numerical trouble in a refit (int, never cleared).
        self.n_resets = 0
        for k, v in overrides.items():
            if not hasattr(params, k):
                raise ValueError(f"unknown parameter {k!r}")
            setattr(params, k, v)
        self.params = params.validate()
        self._refitter = Refitter(self.params.async_refit)
        self.reset()

    def reset(self):
        """Forget everything (e.g. after the camera changed resolution)."""
        self.shape = None
        self._window = []          # small frames, oldest first
        self._win_start = 0        # index (count of entries) of the window's first frame
        self._since_window = 0     # frames since the last one entered the window
        self._since_refit = 0
        self._new_in_window = 0    # frames entered since the last refit
        self._result = None
        self._result_start = 0     # _win_start of the window the result was solved on
        self._refitter.cancel()
        self.n_frames = 0
        self._background = None
        self._lam = None
        self._sigma = None         # per-pixel spread of the background (solve resolution)
        self._decider = None       # PixelDecision: per-pixel feedback state
        self._sync_refit = None    # RefitReport of an inline refit run after the last frame

    # ----------------------------------------------------------------- OpenCV API
    def apply(self, image, fgmask=None, learningRate=-1):
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

    def getBackgroundImage(self):
        """Background of the last frame (see ``frame_model``), shape (h, w), uint8; None before the first frame."""
        if self._background is None:
            return None
        return np.clip(np.round(self._background * 255), 0, 255).astype(np.uint8)

    # ----------------------------------------------------------------- checkpoints
    def _settings(self):
        """The knobs a checkpoint must match (all but ``async_refit``), as JSON."""
        d = asdict(self.params)
        d.pop("async_refit")
        return json.dumps(d, sort_keys=True)

    def checkpoint(self):
        """The learnt state as named arrays, for ``numpy.savez``; None before the first frame.

        Holds the window of frames, its counters, the regularisation weight and,
        once a window was solved, the solver state (A, B, cores, duals, M, mu).
        :meth:`restore` on a new subtractor with the same knobs continues the
        stream as if uninterrupted: the next refit is a warm start.

        Returns
        -------
        dict of str to ndarray, or None
            ``settings`` (str, the knobs as JSON), ``version``, ``frame_shape``
            (2,) int64 in pixels, ``window`` (N, m, n) float32 (frames at the
            solve resolution, oldest first), ``counters`` (6,) int64, ``lam``
            float64 and, when a solution exists, ``state_<name>`` for A, B, K,
            R, E, Lam, Y, M, mu, muK, muK0 (:class:`core.KDRSDLState`). The
            arrays are not copied where they are never modified in place.
        """
        if self.shape is None:
            return None
        out = {
            "version": np.int64(CHECKPOINT_VERSION),
            "settings": np.str_(self._settings()),
            "frame_shape": np.asarray(self.shape, dtype=np.int64),
            "window": np.stack(self._window),
            "counters": np.array([getattr(self, name) for name in _COUNTERS], dtype=np.int64),
            "lam": np.float64(self._lam),
        }
        if self._result is not None:
            st = self._result.state
            for name in _STATE_ARRAYS + _STATE_SCALARS:
                out["state_" + name] = np.asarray(getattr(st, name))
            if self._sigma is not None:
                out["sigma"] = self._sigma
        if self._decider is not None:
            for name in PixelDecision.STATE:
                out["decision_" + name] = getattr(self._decider, name)
        return out

    def restore(self, ckpt):
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
        try:
            return self._restore(ckpt)
        except (KeyError, TypeError, IndexError) as exc:
            self.reset()
            raise ValueError(f"checkpoint is incomplete or malformed: {type(exc).__name__}: {exc}") from None
        except ValueError:
            self.reset()
            raise

    def _restore(self, ckpt):
        if int(ckpt["version"]) != CHECKPOINT_VERSION:
            raise ValueError(f"checkpoint layout version {int(ckpt['version'])}, expected {CHECKPOINT_VERSION}")
        if str(ckpt["settings"]) != self._settings():
            raise ValueError("checkpoint was made with other model settings")
        p = self.params
        shape = tuple(int(v) for v in ckpt["frame_shape"])
        window = np.asarray(ckpt["window"], dtype=np.float32)
        small = tuple(side // p.downscale for side in shape)  # what _block_mean makes of a frame
        if len(shape) != 2 or window.ndim != 3 or window.shape[1:] != small or not 1 <= len(window) <= p.window:
            raise ValueError(f"checkpoint window of shape {window.shape} does not fit frames of {shape}")
        counters = [int(v) for v in ckpt["counters"]]
        lam = float(ckpt["lam"])
        if len(counters) != len(_COUNTERS) or min(counters) < 0 or not (np.isfinite(lam) and lam > 0):
            raise ValueError("checkpoint counters or lambda out of range")
        if not np.isfinite(window).all():
            raise ValueError("checkpoint window holds non-finite values")
        result = None
        if "state_A" in ckpt:
            st = KDRSDLState(**{n: np.asarray(ckpt["state_" + n]) for n in _STATE_ARRAYS},
                             **{n: float(ckpt["state_" + n]) for n in _STATE_SCALARS})
            n_slices, r = st.n_slices, st.rank
            shapes = {"A": (small[0], r), "B": (small[1], r), "K": (n_slices, r, r), "R": (n_slices, r, r),
                      "Y": (n_slices, r, r), "E": (n_slices,) + small, "Lam": (n_slices,) + small, "M": small}
            for name, want in shapes.items():
                a = getattr(st, name)
                if a.shape != want:
                    raise ValueError(f"checkpoint state {name} has shape {a.shape}, expected {want}")
                if not np.isfinite(a).all():
                    raise ValueError(f"checkpoint state {name} holds non-finite values")
            values = dict(zip(_COUNTERS, counters))
            if values["_win_start"] < values["_result_start"] or n_slices > p.window:
                raise ValueError("checkpoint state does not belong to its window")
            if not all(np.isfinite(v) and v > 0 for v in (st.mu, st.muK, st.muK0)):
                raise ValueError("checkpoint penalties mu, muK must be finite and > 0")
            empty = np.zeros(0)
            result = KDRSDLResult(A=st.A, B=st.B, R=st.R, E=st.E, M=st.M, n_iter=0, converged=True,
                                  err_rec=empty, err_split=empty, warm_start=True, state=st)
        self.shape = shape
        self._window = list(window)
        for name, value in zip(_COUNTERS, counters):
            setattr(self, name, value)
        self._lam = lam
        if result is not None and p.decision == "pixel":
            sigma = np.asarray(ckpt["sigma"], dtype=np.float32)
            if sigma.shape != small or not np.isfinite(sigma).all():
                raise ValueError(f"checkpoint sigma of shape {sigma.shape} does not fit frames of {shape}")
            self._sigma = sigma
        if "decision_v" in ckpt:
            decider = self._new_decider(shape)
            for name in PixelDecision.STATE:
                a = np.asarray(ckpt["decision_" + name], dtype=getattr(decider, name).dtype)
                if a.shape != shape or not np.isfinite(a).all():
                    raise ValueError(f"checkpoint decision state {name} does not fit frames of {shape}")
                setattr(decider, name, a.copy())
            self._decider = decider
        if result is not None:
            self._result = result
            if p.frame_model == "last":
                self._last_bg = sandwich(result.A, result.R[-1:], result.B)[0] + result.M
        return result is not None

    # ----------------------------------------------------------------- model
    @property
    def state(self):
        """The last window solution's :class:`core.KDRSDLState`, or None."""
        return None if self._result is None else self._result.state

    def process(self, image):
        """Score, decide and learn one frame; see :meth:`apply`.

        The frame is judged against the background of the frames before it, then enters
        the window (foreground pixels blended towards the background, ``update_blend``).

        Returns
        -------
        FrameResult
        """
        x = self._as_float(image)
        if self.shape != x.shape:
            self.reset()
            self.shape = x.shape
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
        score = np.abs(x - bg)
        self._background = bg
        t = None if p.decision == "pixel" and self._result is not None else \
            self._global_threshold(score, small, bg_small)
        if self._result is None:
            mask = score > t
        elif p.decision == "pixel":
            if self._decider is None:
                self._decider = self._new_decider(x.shape)
            mask = self._decider.decide(x, bg, self._upsample(self._sigma, x.shape))
        else:
            mask = postprocess(score > t, p.open_size, p.close_size, p.fill_holes)
        learnt = small
        if self._enters_window() and self._result is not None and p.update_blend > 0 and mask.any():
            under = mask if p.update_margin <= 1 else cv2.dilate(mask.view(np.uint8), square(p.update_margin)).view(bool)
            under = _block_mean(under.astype(np.float32), p.downscale) > 0
            w = np.float32(p.update_blend)
            learnt = np.where(under, w * bg_small + (1 - w) * small, small).astype(np.float32)
        self._learn(learnt)
        self.n_frames += 1
        return FrameResult(fgmask=mask.astype(np.uint8) * 255, score=score, threshold=None if t is None else float(t),
                           refit=refit if refit is not None else self._sync_refit)

    def _new_decider(self, shape):
        p = self.params
        return PixelDecision(shape, DecisionParams(k_sigma=p.k_sigma, floor=p.pixel_floor, tolerance=p.tolerance,
                                                   blink_gain=p.blink_gain, shadow=p.shadow),
                             p.open_size, p.close_size, p.fill_holes)

    def _enters_window(self):
        """The next frame enters the window (every ``window_stride``-th frame, and the first)."""
        return not self._window or self._since_window + 1 >= self.params.window_stride

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
            return a.astype(np.float32) * np.float32(1 / 255)
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
        out[h:, :w] = big[h - 1:h, :w]
        out[:, w:] = out[:, w - 1:w]
        return out

    def _learn(self, small):
        """Put a frame into the window when its turn comes, and start a refit when one is due."""
        p = self.params
        self._sync_refit = None
        entered = False
        enters = self._enters_window()
        self._since_window += 1
        if enters:
            self._window.append(small)
            self._since_window = 0
            self._new_in_window += 1
            entered = True
            if len(self._window) > p.window:
                self._window.pop(0)
                self._win_start += 1
        self._since_refit += 1
        n = len(self._window)
        if self._refitter.busy:
            return  # a refit is running; the next one waits for it
        growing = self._result is None or self._result.state.n_slices < p.window
        if growing:
            # cold fits at 2, 4, 8, ... frames, then at the full window
            due = entered and n >= 2 and (n & (n - 1) == 0 or n == p.window)
        else:
            due = self._since_refit >= p.refit_interval and self._new_in_window > 0
        if not due:
            return
        init = None
        if not growing:
            # A window that slid past all of the last solution's frames (a refit slower than a
            # whole window of frames) keeps only the dictionary A, B, M: every core starts afresh.
            init = slide_state(self._result.state, min(self._win_start - self._result_start,
                                                       self._result.state.n_slices))
        self._since_refit = 0
        self._new_in_window = 0
        settings = RefitSettings(rank=p.rank, lam=self._lam, alpha=p.alpha, tol=p.refit_tol,
                                 max_iter=p.refit_max_iter, backoff=p.refit_backoff, rebalance=p.rebalance,
                                 e_cut=p.e_cut if p.decision == "pixel" else None)
        report = self._refitter.submit(np.stack(self._window), init, self._win_start, settings)
        if report is not None:
            self._install(report)
            self._sync_refit = report

    def _collect(self):
        """Install a finished background refit; its report, or None."""
        report = self._refitter.collect()
        if report is not None:
            self._install(report)
        return report

    def _install(self, report):
        if report.reset:
            # Numerical trouble: drop the solution, keep the frames, start cold next time.
            self._result = None
            self.n_resets += 1
            return
        self._result, self._result_start, self._sigma = report.result, report.start, report.sigma
        if self.params.frame_model == "last":
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
        fit = fit_cores(res.A, res.B, xc, lam=self._lam, alpha=p.alpha, mu_end=st.mu,
                        mu_ratio=st.mu / st.muK, rho=2.0, max_iter=p.frame_iters)
        return sandwich(res.A, fit.R, res.B)[0] + res.M
