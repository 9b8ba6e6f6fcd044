"""The streaming background model: KDRSDL on a sliding window, a mask per frame.

An OpenCV-style background subtractor (``apply(frame) -> fgmask``,
``getBackgroundImage()``), so a user of ``cv2.createBackgroundSubtractorMOG2()``
can swap it in. Causal: a frame's mask uses that frame and earlier ones only.
"""

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Optional

import cv2
import numpy as np

from core.solver.frame_fit import FrameFitter
from core.solver.state import KDRSDLState, slide_state
from core.streaming import resolution, snapshot
from core.streaming.decision import DecisionParams, PixelDecision, global_threshold
from core.streaming.frame_model import FitReuse, frame_background, last_background, moving_fitter, near_dynamic
from core.streaming.ghosts import GhostParams, GhostTracker
from core.streaming.light import LightChange, detect_light_change, map_state, sample_step, unchanged
from core.streaming.params import BackgroundParams
from core.streaming.postprocess import drop_specks, grow, postprocess_restored
from core.streaming.refit import RefitReport, RefitSettings, Refitter
from core.streaming.refit_process import ProcessRefitter
from core.streaming.samples import SampleParams, SampleSet
from core.streaming.snapshot import ModelSnapshot
from core.streaming.window import WindowSchedule

__all__ = [
    "BackgroundParams",
    "FrameResult",
    "KDRSDLBackgroundSubtractor",
    "CHECKPOINT_VERSION",
    "createBackgroundSubtractorKDRSDL",
]

#: Version of the :meth:`KDRSDLBackgroundSubtractor.checkpoint` layout.
CHECKPOINT_VERSION = snapshot.VERSION
#: Empty masks: no ghost test, no decision (:func:`core.streaming.kernels.blend_entry`'s "none").
_NONE_BOOL = np.zeros((0, 0), bool)
_NONE_U8 = np.zeros((0, 0), np.uint8)


def blend_entry(
    x: np.ndarray,
    bg: np.ndarray,
    under: np.ndarray,
    clear: np.ndarray | None,
    dynamic: np.ndarray | None,
    p: BackgroundParams,
    compiled: bool = False,
) -> np.ndarray:
    """The frame a window entry holds under the conditional update (docs/algorithm.md, "The
    streaming model"): ``w bg + (1 - w) x`` under the dilated mask, ``x`` elsewhere.

    Parameters
    ----------
    x, bg : ndarray, shape (h, w), float32
        The frame and its background, intensity in [0, 1].
    under : ndarray, shape (h, w), bool
        The mask dilated by ``update_margin``.
    clear : ndarray, shape (h, w), bool, or None
        Pixels in no blob the ghost test suspects (None: every pixel); a suspected ghost enters
        the window as the frame shows it.
    dynamic : ndarray, shape (h, w), bool, or None
        The decision's dynamic pixels (None: none). With ``blend_dynamic`` off they enter as the
        frame shows them; within ``fit_reach`` of one, ``w`` is ``update_blend_moving``, else
        ``update_blend``.
    p : BackgroundParams
    compiled : bool
        In one pass by :func:`core.streaming.kernels.blend_entry` (the kernels loaded), to the bit.

    Returns
    -------
    ndarray, shape (h, w), float32
        A new array.
    """
    w_still, w_moving = np.float32(p.update_blend), np.float32(p.update_blend_moving)
    if compiled:
        from core.streaming import kernels

        out = np.empty(x.shape, np.float32)
        kernels.blend_entry(
            np.ascontiguousarray(x), np.ascontiguousarray(bg), np.ascontiguousarray(under),
            _NONE_BOOL if clear is None else np.ascontiguousarray(clear),
            _NONE_U8 if dynamic is None else np.ascontiguousarray(dynamic).view(np.uint8),
            not p.blend_dynamic, p.fit_reach, w_still, w_moving, out,
        )  # fmt: skip
        return out
    if clear is not None:
        under = under & clear
    if not p.blend_dynamic and dynamic is not None:
        under = under & ~dynamic
    w: np.ndarray | np.float32 = w_still
    if w_moving != w_still and dynamic is not None:
        w = np.where(near_dynamic(dynamic, p.fit_reach).view(bool), w_moving, w)
    learnt: np.ndarray = np.where(under, w * bg + (1 - w) * x, x).astype(np.float32)
    return learnt


@dataclass
class FrameResult:
    """What :meth:`KDRSDLBackgroundSubtractor.process` returns for one frame.

    Attributes
    ----------
    fgmask : ndarray, shape (h, w), uint8
        0 background, 255 foreground; at the input resolution, or at the processing
        resolution with ``mask_resolution="processing"``.
    threshold : float or None
        The global threshold applied to ``score`` (``decision="global"``, and every frame
        before the first refit); None when the per-pixel bands decided.
    fgmask_processing : ndarray, shape (hp, wp), uint8
        The same mask at the processing resolution (``fgmask`` itself when the two sizes are
        equal): regions and zone fractions are measured on it (``streamer.motion.stage``).
    frame_processing, background_processing : ndarray, shape (hp, wp), float32
        The frame x and its background L at the processing resolution (:mod:`core.streaming.resolution`),
        intensity in [0, 1]; not to be written to (the model keeps them).
    refit : RefitReport or None
        The window refit installed at this frame (:class:`core.streaming.refit.RefitReport`: a solution,
        or ``reset`` after numerical trouble, when the model starts cold at the next refit);
        None when none was.
    light : LightChange or None
        The change of light absorbed at this frame (:mod:`core.streaming.light`): the model's
        memory was mapped to it before the frame was judged. None when there was none.
    """

    fgmask: np.ndarray
    threshold: Optional[float]
    fgmask_processing: np.ndarray
    frame_processing: np.ndarray
    background_processing: np.ndarray
    refit: Optional[RefitReport] = field(default=None)
    light: Optional[LightChange] = field(default=None)

    @functools.cached_property
    def score_processing(self) -> np.ndarray:
        """Foreground score |x - L| in [0, 1] at the processing resolution, float32 (hp, wp).

        Made at its first access: the per-pixel bands do not read it, and at a 30-fps frame it
        cost 0.07 ms (docs/results.md, "Cameras per core"). ``score`` has it at the
        mask's resolution.
        """
        score: np.ndarray = cv2.absdiff(self.frame_processing, self.background_processing)  # one pass
        return score

    @property
    def score(self) -> np.ndarray:
        """The foreground score at the mask's resolution, float32 (h, w) (enlarged on access)."""
        return resolution.enlarge(self.score_processing, self.fgmask.shape)


class KDRSDLBackgroundSubtractor:
    """Background subtraction with KDRSDL on a sliding window of frames.

    A thin facade over the model's parts (docs/algorithm.md, "The streaming model"). The window
    (:mod:`core.streaming.window`): every ``window_stride``-th frame enters it, foreground pixels
    blended towards the background (``update_blend``). The refits (:mod:`core.streaming.refit`):
    every ``refit_interval`` frames (``refit_still_factor`` times that while the background holds
    still) KDRSDL is re-solved on the window in mean mode, warm-started
    from the previous solution (A, B and duals, :func:`core.solver.kdrsdl` with
    :func:`core.slide_state`), inline or on a thread, and the background's per-pixel spread is
    estimated with the samples in ``E`` left out. The background samples
    (:mod:`core.streaming.samples`): values the model called background, at the frame rate. The
    decision (:mod:`core.streaming.decision`): each frame's background is the window's robust mean
    ``M`` (plus the frame's global offset; see ``frame_model`` for the alternatives); a pixel is
    foreground when it leaves its per-pixel band and matches none of its background samples; the
    mask is then post-processed (:mod:`core.streaming.postprocess`). A change of light is
    recognised and the model's memory mapped to it before the frame is judged
    (:mod:`core.streaming.light`). The score ``|x - L|`` (the paper's Section 5.1 score) comes with
    every mask. Checkpoints (:meth:`checkpoint`, :meth:`restore`; the layout is
    :mod:`core.streaming.snapshot`) hold the solver state and each part's own state.

    Until the first full window, the model is refitted cold at 2, 4, 8, ... window entries.
    Until the first solution is installed, a frame is judged by the global threshold against the
    per-pixel median of the window's entries so far (the first frame is its own background), so
    masks come from the second frame that enters the window on (rough at first), even while the
    first refit still runs on its thread. The median, not the mean: an object in one entry of a
    few would leave a ghost in a mean, one step of its motion behind it, for as long as a refit
    starved of CPU takes.

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
        If a knob is out of range (the message names it), or ``kernel = "numba"`` and numba
        cannot be imported.
    """

    def __init__(self, params: BackgroundParams | None = None, **overrides: Any) -> None:
        params = params or BackgroundParams()
        #: Resets to a cold start after numerical trouble in a refit (int, never cleared).
        self.n_resets = 0
        for k in overrides:
            if not hasattr(params, k):
                raise ValueError(f"unknown parameter {k!r}")
        self.params = replace(params, **overrides).validate()
        self._kernels_loaded = False  # once loaded, the kernels stay loaded (compiled)
        if self.params.kernel == "numba" and self.params.decision == "pixel":
            _warm_kernels()
        p = self.params
        self._refitter: Refitter | ProcessRefitter = (
            ProcessRefitter(compiled=p.kernel == "numba")
            if p.async_refit and p.refit_process
            else Refitter(p.async_refit)
        )
        self.reset()

    def reset(self) -> None:
        """Forget everything (e.g. after the camera changed resolution)."""
        p = self.params
        self.shape: tuple[int, int] | None = None
        self._proc_shape: tuple[int, int] | None = None  # the processing resolution (h, w)
        self._light_step = 1  # the light test's sampling step at that resolution (light.sample_step)
        self._window = WindowSchedule(
            p.window, p.window_stride, p.refit_interval, p.refit_still_factor * p.refit_interval
        )
        self._state: KDRSDLState | None = None  # the installed window solution
        self._result_start = 0  # window.start of the window it was solved on
        self._refitter.cancel()
        self._pending_light: LightChange | None = None  # light changes since the running refit was submitted
        self.n_frames = 0
        self._background: np.ndarray | None = None
        self._lam: float | None = None
        self._sigma: np.ndarray | None = None  # per-pixel spread of the background
        self._decider: PixelDecision | None = None  # per-pixel feedback state
        self._samples: SampleSet | None = None  # background samples
        self._ghosts: GhostTracker | None = None  # uncovered background told from stopped objects
        self._last_bg: np.ndarray | None = None  # frame_model "last": M + the newest window frame's low-rank part
        self._fitter: FrameFitter | None = None  # frame_model "moving": the installed dictionary's fitter
        self._reuse = FitReuse()  # frame_model "moving": the fitted background kept (fit_refresh)
        self._early_bg: np.ndarray | None = None  # before the first solution: the window's median
        self._sync_refit: RefitReport | None = None  # report of an inline refit run after the last frame

    def _start(self, shape: tuple[int, int]) -> None:
        """Reset for frames of ``shape`` (h, w) and make the per-pixel parts at the processing resolution."""
        self.reset()
        p = self.params
        self.shape = shape
        proc = self._proc_shape = resolution.processing_shape(shape, p.processing_side)
        self._light_step = sample_step(proc)
        if p.decision == "pixel":
            self._decider = PixelDecision(proc, DecisionParams.from_knobs(p))
            if p.samples:
                sp = SampleParams(
                    k=p.samples,
                    matches=p.sample_matches,
                    radius=p.sample_radius,
                    period=p.sample_period,
                    seed=p.sample_seed,
                    compiled=p.kernel == "numba",
                )
                self._samples = SampleSet(proc, sp)
            if p.ghost_frames:
                self._ghosts = GhostTracker(proc, GhostParams(frames=p.ghost_frames, reach=p.ghost_reach))

    # ----------------------------------------------------------------- OpenCV API
    def apply(self, image: np.ndarray, fgmask: np.ndarray | None = None, learningRate: float = -1) -> np.ndarray:
        """Foreground mask of a frame, as ``cv2.BackgroundSubtractor.apply``.

        Parameters
        ----------
        image : ndarray, shape (h, w) or (h, w, 3), uint8 (0-255) or float (0-1)
            Grayscale frame, or a BGR one (OpenCV's channel order), converted to gray as
            ``cv2.cvtColor(image, cv2.COLOR_BGR2GRAY)``. A frame of another size than the previous
            ones resets the model.
        fgmask : ignored
            Present for OpenCV compatibility.
        learningRate : ignored
            Present for OpenCV compatibility. The memory is the window (``window`` x
            ``window_stride`` frames) and the samples' update period, not a rate per frame.

        Returns
        -------
        ndarray, shape (h, w), uint8
            0 background, 255 foreground.

        Raises
        ------
        ValueError
            If the frame is neither (h, w) nor (h, w, 3), is empty or holds non-finite values.
        """
        return self.process(image).fgmask

    def getBackgroundImage(self) -> np.ndarray | None:
        """Background of the last frame (see ``frame_model``), shape (h, w), uint8; None before the first frame."""
        if self._background is None or self.shape is None:
            return None
        bg = resolution.enlarge(self._background, self.shape)
        return np.clip(np.round(bg * 255), 0, 255).astype(np.uint8)

    # ----------------------------------------------------------------- checkpoints
    def checkpoint(self) -> dict[str, np.ndarray | np.generic] | None:
        """The learnt state as named arrays, for ``numpy.savez``; None before the first frame.

        Holds the window of frames and its counters, the regularisation weight and, once a
        window was solved, the solver state (A, B, cores, duals, M, mu) and the background's
        per-pixel spread, and the decision's and the background samples' state. :meth:`restore`
        on a new subtractor with the same knobs continues the stream as if uninterrupted: the
        next refit is a warm start.

        Returns
        -------
        dict of str to ndarray, or None
            The layout of :func:`core.streaming.snapshot.to_arrays`. The per-pixel parts that
            later frames modify in place (the decision's, the samples' and the ghost test's
            arrays) are copies, so a write on another thread sees this frame's values only; the
            window's stack and the solver state are new arrays at each change, not copied.
        """
        if self.shape is None or self._lam is None:
            return None
        parts = {"window": self._window.state()}
        for part, owner in (("decision", self._decider), ("samples", self._samples), ("ghosts", self._ghosts)):
            if owner is not None:
                parts[part] = {name: np.array(a) for name, a in owner.state().items()}
        snap = ModelSnapshot(
            frame_shape=self.shape,
            counters={"result_start": self._result_start, "n_frames": self.n_frames},
            lam=self._lam,
            state=self._state,
            sigma=self._sigma if self._state is not None else None,
            parts=parts,
        )
        return snapshot.to_arrays(snap, self.params)

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
        try:
            snap = snapshot.from_arrays(ckpt, self.params)
            self._start(snap.frame_shape)
            assert self._proc_shape is not None
            for part, owner in (("decision", self._decider), ("samples", self._samples), ("ghosts", self._ghosts)):
                if (part in snap.parts) != (owner is not None):
                    raise ValueError(f"checkpoint {part} state does not fit the model's knobs")
                if owner is not None:
                    owner.load(snap.parts[part])
            self._window.load(snap.parts["window"], self._proc_shape)
            self._result_start, self.n_frames = snap.counters["result_start"], snap.counters["n_frames"]
            if snap.state is not None and self._window.start < self._result_start:
                raise ValueError("checkpoint state does not belong to its window")
        except (KeyError, TypeError, IndexError, ValueError) as exc:
            self.reset()
            if isinstance(exc, ValueError) and str(exc).startswith("checkpoint"):
                raise
            raise ValueError(f"checkpoint is incomplete or malformed: {type(exc).__name__}: {exc}") from None
        self._lam = snap.lam
        self._install_state(snap.state, snap.sigma)
        if self._state is None and self._window.frames:  # saved before the first solution
            self._early_background()
        return self._state is not None

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
        return self._state

    @property
    def compiled(self) -> bool:
        """Whether the frame's steps run compiled now: ``kernel = "numba"`` and the kernels loaded
        (on an empty cache a child process compiles them while the numpy reference runs, to the
        same masks: :func:`core.streaming.kernels.start`)."""
        if self._kernels_loaded:
            return True
        if self.params.kernel != "numba" or self.params.decision != "pixel":
            return False
        from core.streaming import kernels

        self._kernels_loaded = kernels.ready()
        return self._kernels_loaded

    def process(self, image: np.ndarray) -> FrameResult:
        """Score, decide and learn one frame; see :meth:`apply`.

        The steps: the frame at the processing resolution; a finished refit installed; a change
        of light absorbed; the frame's background; the raw decision and its post-processing; the
        decision's feedback; learning (the window, the samples, a refit when due).

        Returns
        -------
        FrameResult
        """
        x = self._prepare(image)
        refit = self.collect_refit()
        light = self._absorb_light(x)
        assert self._lam is not None
        if self._state is None:  # no solution yet (the first refit runs or is yet to come)
            bg = self._early_bg if self._early_bg is not None else x
        else:
            d = self._decider
            objects, dynamic = (None, None) if d is None else (d.prev_obj, d.dynamic)
            bg = frame_background(
                x, self._state, self.params, self._lam, self._last_bg, objects, dynamic, self._fitter, self._reuse
            )
        self._background = bg
        raw, threshold = self._raw_mask(x, bg)
        p = self.params
        # the model learns from the plain mask (restored rims kept a ghost's edge from being
        # learnt, so it never dissolved); it reports the restored one (docs/algorithm.md)
        shaded = self._decider.shaded if self._decider is not None and threshold is None else None
        mask, reported = postprocess_restored(
            raw, p.open_size, p.close_size, p.fill_holes, p.open_restore, shaded, self.compiled
        )
        if self._ghosts is not None and threshold is None:
            absorbed = self._absorb_ghosts(x, bg, mask)
            if absorbed is not None and reported is not mask:
                reported &= ~absorbed
        if self._decider is not None and threshold is None and p.speck_area > 0:
            reported = drop_specks(
                reported,
                self._decider.v,
                int(p.speck_area * raw.size),
                p.speck_blink,
                round(p.speck_reach * max(raw.shape)),
                self.compiled,
            )
        if self._decider is not None and threshold is None:
            self._decider.feedback(raw, mask, inside=self.n_frames < p.warmup_blink_frames)
        self._learn(x, bg, mask)
        self.n_frames += 1
        fgmask = reported.view(np.uint8) * np.uint8(255)
        fgmask_processing = fgmask
        if p.mask_resolution == "input":
            assert self.shape is not None
            fgmask = resolution.enlarge_mask(fgmask, self.shape)
        return FrameResult(
            fgmask=fgmask,
            threshold=threshold,
            fgmask_processing=fgmask_processing,
            frame_processing=x,
            background_processing=bg,
            refit=refit if refit is not None else self._sync_refit,
            light=light,
        )

    def collect_refit(self) -> RefitReport | None:
        """Install a refit that finished on its thread, if one did, without waiting for a frame.

        :meth:`process` does this first at every frame. A caller whose frames have paused (a
        silent camera, the end of a file) calls it so that the solution lands, and a checkpoint
        taken then holds it.

        Returns
        -------
        RefitReport or None
            The finished refit's report (it is then not reported again by the next frame's
            :class:`FrameResult`); None when none finished, or refits run inline.
        """
        refit = self._refitter.collect()
        if refit is not None:
            self._install(refit)
        return refit

    def wait_refit(self, timeout: float) -> bool:
        """Wait until a refit running on its thread has finished; the next frame (or :meth:`collect_refit`) installs it.

        For a caller that feeds frames faster than a live camera (a test, a file processed
        offline) and wants each refit to land before the frames that follow, as inline refits do,
        while keeping the threaded path.

        Parameters
        ----------
        timeout : float
            Seconds to wait at most.

        Returns
        -------
        bool
            True when no refit runs (or it has finished); False when it still runs.
        """
        return self._refitter.wait(timeout)

    def close(self, wait: float = 2.0) -> bool:
        """Abandon a running refit (at shutdown): it stops at its next iteration. With
        ``refit_process`` the refits' child process ends too (a later refit spawns another).

        Parameters
        ----------
        wait : float
            Seconds to wait for the refit's thread (or child process) to end.

        Returns
        -------
        bool
            True when no refit is still running. The learnt state is untouched: a
            :meth:`checkpoint` after ``close`` holds the last installed solution.
        """
        return self._refitter.close(wait)

    # ----------------------------------------------------------------- the per-frame steps
    def _prepare(self, image: np.ndarray) -> np.ndarray:
        """The frame as float32 in [0, 1] at the processing resolution; a new shape resets the model."""
        a = np.asarray(image)
        if a.ndim == 3 and a.shape[2] == 3 and 0 not in a.shape:  # BGR, as OpenCV's subtractors take
            a = cv2.cvtColor(a if a.dtype in (np.uint8, np.float32) else a.astype(np.float32), cv2.COLOR_BGR2GRAY)
        if a.ndim != 2 or 0 in a.shape:
            raise ValueError(f"frame must be a non-empty (h, w) gray or (h, w, 3) BGR array, got shape {a.shape}")
        if a.dtype == np.uint8:
            x = np.multiply(a, np.float32(1 / 255), dtype=np.float32)  # one pass
        else:
            x = a.astype(np.float32)
            if not np.isfinite(x).all():
                raise ValueError("frame contains non-finite values")
        shape = (x.shape[0], x.shape[1])
        if self.shape != shape:
            self._start(shape)
        assert self._proc_shape is not None
        if self._lam is None:
            p = self.params
            self._lam = p.lam if p.lam is not None else 1.0 / np.sqrt(p.window * max(self._proc_shape))
        return resolution.reduce(x, self._proc_shape)

    def _absorb_light(self, x: np.ndarray) -> LightChange | None:
        """Recognise a change of light against ``M`` and map the model's memory to it at once
        (the window, the solution, the spread, the samples; :mod:`core.streaming.light`)."""
        st, p = self._state, self.params
        if not p.light_change or st is None or st.M is None or self._decider is None:
            return None
        assert self._sigma is not None
        if self.compiled:  # most frames stop at the sampled pixels' sums: one call for them
            from core.streaming import kernels

            if unchanged(kernels.light_moments(x, st.M, self._decider.prev_obj, self._light_step)):
                return None
        change = detect_light_change(x, st.M, self._decider.half(self._sigma), ~self._decider.prev_obj)
        if change is None:
            return None
        g, b = np.float32(change.gain), np.float32(change.offset)
        self._window.map(lambda f: g * f + b)
        self._install_state(map_state(st, change), g * self._sigma)
        if self._samples is not None:
            self._samples.map_light(change.gain, change.offset)
        if self._refitter.busy:  # a refit on the old light's window: mapped when it lands
            self._pending_light = change if self._pending_light is None else self._pending_light.then(change)
        return change

    def _absorb_ghosts(self, x: np.ndarray, bg: np.ndarray, mask: np.ndarray) -> np.ndarray | None:
        """Adopt the frame as the background where a blob has looked like a ghost for
        ``ghost_frames`` frames (:mod:`core.streaming.ghosts`): the window's frames and the
        background samples take its values there, and those pixels leave ``mask`` (in place).
        Returns those pixels (bool (h, w)), or None when there are none."""
        assert self._ghosts is not None
        absorb = self._ghosts.update(x, bg, mask, self.n_frames, self.compiled, self._samples)
        if absorb is None:
            return None
        mask &= ~absorb
        self._window.adopt(absorb, x)
        if self._samples is not None:
            self._samples.adopt(absorb, x, self.n_frames)
        return absorb

    def _raw_mask(self, x: np.ndarray, bg: np.ndarray) -> tuple[np.ndarray, float | None]:
        """The decision before post-processing, and the global threshold (None: the bands decided)."""
        if self._state is not None and self._decider is not None:
            assert self._sigma is not None
            return self._decider.raw(x, bg, self._sigma, self._samples), None
        score: np.ndarray = cv2.absdiff(x, bg)  # |x - bg| in one pass
        t = global_threshold(score, self.params)
        return score > t, t

    def _learn(self, x: np.ndarray, bg: np.ndarray, mask: np.ndarray) -> None:
        """Learn from a judged frame: the background samples, the window, a refit when due."""
        p = self.params
        if self._samples is not None:
            assert self._decider is not None
            under = self._samples.update_outside(x, mask, p.update_margin, self._decider.dynamic, self.n_frames)
        else:
            under = grow(mask, p.update_margin)
        learnt, fg = x, None
        if self._window.enters_next() and mask.any():
            if len(self._window.frames) < p.warmup_entries and (
                self._state is None or self._window.growing(self._state.n_slices)
            ):
                # warm-up: no background yet to blend towards; the refits leave these pixels out
                # of the spread and the samples instead (warmup_entries)
                fg = under.copy()
            elif self._state is not None and p.update_blend > 0:
                d, g = self._decider, self._ghosts
                clear, dynamic = (None if g is None else g.clear), (None if d is None else d.dynamic)
                learnt = blend_entry(x, bg, under, clear, dynamic, p, self.compiled)
        self._sync_refit = None
        entered = self._window.push(learnt, fg)
        if entered and self._state is None:
            self._early_background()
        self._maybe_refit(entered)

    def _early_background(self) -> None:
        """The background before the first solution: the per-pixel median of the window's entries
        (an object in one of a few entries leaves no ghost, as it would in their mean)."""
        self._early_bg = np.median(self._window.stack(), axis=0).astype(np.float32)

    def _maybe_refit(self, entered: bool) -> None:
        """Start a refit when one is due (inline: install it at once)."""
        w = self._window
        if self._refitter.busy:
            return  # a refit is running; the next one waits for it
        solved = None if self._state is None else self._state.n_slices
        if not w.refit_due(solved, entered):
            return
        init = None
        if not w.growing(solved):
            # A window that slid past all of the last solution's frames (a refit slower than a
            # whole window of frames) keeps only the dictionary A, B, M: every core starts afresh.
            assert self._state is not None and solved is not None  # a sliding window has a solution
            init = slide_state(self._state, min(w.start - self._result_start, solved))
        w.started_refit()
        self._pending_light = None
        assert self._lam is not None  # set by the first frame, before any refit
        settings = RefitSettings.from_knobs(self.params, self._lam, self.compiled)
        report = self._refitter.submit(w.view(), init, w.start, settings, self._still_pixels())
        if report is not None:
            self._install(report)
            self._sync_refit = report

    def _still_pixels(self) -> np.ndarray | None:
        """Pixels with no dynamic pixel within ``fit_reach`` now, bool (h, w), for a refit's
        ``still_cut`` (:func:`core.streaming.refit.solve_window`); None before the first decision
        or with the rule off."""
        p = self.params
        if not p.still_cut or self._decider is None:
            return None
        return near_dynamic(self._decider.dynamic, p.fit_reach) == 0

    def _install(self, report: RefitReport) -> None:
        if report.reset:
            # Numerical trouble: drop the solution, keep the frames, start cold next time.
            self._state = None
            self.n_resets += 1
            return
        assert report.result is not None
        state, sigma = report.result.state, report.sigma
        change, self._pending_light = self._pending_light, None
        if change is not None:  # the light changed while the refit ran on the old light's frames
            state = map_state(state, change)
            sigma = None if sigma is None else np.float32(change.gain) * sigma
        self._result_start = report.start
        self._window.settled(report.warm and self._still(state))
        self._install_state(state, sigma)
        if report.samples is not None and self._samples is not None:
            self._samples.seed(report.samples)
            if change is not None:
                self._samples.map_light(change.gain, change.offset)

    def _still(self, state: KDRSDLState) -> bool:
        """Whether ``state``'s background M moved from the installed one's by more than half the
        band at fewer than ``refit_still_fraction`` of the pixels per ``refit_interval`` frames
        of the interval in force (the next refit may wait; :mod:`core.streaming.window`)."""
        old, d = self._state, self._decider
        if old is None or old.M is None or state.M is None or d is None or self._sigma is None:
            return False
        moved = np.abs(state.M - old.M) > d.half(self._sigma)
        # the fraction is per refit_interval frames: M drifts further over a longer interval
        w = self._window
        allowed = self.params.refit_still_fraction * moved.size * w.interval() / w.refit_interval
        return bool(np.count_nonzero(moved) < allowed)

    def _install_state(self, state: KDRSDLState | None, sigma: np.ndarray | None) -> None:
        """Make ``state`` (and the spread ``sigma``) the model's window solution, without its
        sparse part ``E``: the refit that made it has already drawn the spread and the samples
        from it, and a warm start does not read it (the window's size in float32: 8.8 MiB at
        320 x 240, held between refits and written into every checkpoint)."""
        if state is not None and state.E is not None:
            state = replace(state, E=None)
        self._state, self._sigma = state, sigma
        if state is not None and self.params.frame_model == "last":
            self._last_bg = last_background(state)
        if self.params.frame_model == "moving":
            self._fitter = None if state is None else moving_fitter(state)


def _warm_kernels() -> None:
    """Load the compiled kernels from numba's cache now, or start compiling them in a child
    process on an empty cache (:func:`core.streaming.kernels.start`): a model made before its
    frames come does not stall its first judged frame, and until they are compiled its steps run
    the numpy reference (the same masks).

    Raises
    ------
    ValueError
        If numba cannot be imported, or has nowhere to cache the compiled code (its default
        places, beside the package and in the user's cache, are read-only and ``NUMBA_CACHE_DIR``
        is unset); ``kernel = "numpy"`` runs without it.
    """
    try:
        from core.streaming import kernels
    except ImportError as exc:
        raise ValueError(f"kernel 'numba' needs numba ({exc}); install it, or set kernel = 'numpy'") from None
    except RuntimeError as exc:  # numba's "cannot cache function ...: no locator available"
        raise ValueError(
            f"kernel 'numba' cannot cache its compiled code ({exc}): set NUMBA_CACHE_DIR to a writable "
            "directory, or kernel = 'numpy'"
        ) from None
    kernels.start()


def createBackgroundSubtractorKDRSDL(**knobs: Any) -> KDRSDLBackgroundSubtractor:
    """A KDRSDL background subtractor, as ``cv2.createBackgroundSubtractorMOG2()`` makes MOG2's.

    Unlike the class's own default, the window refits run on a thread (``async_refit=True``), so
    that :meth:`KDRSDLBackgroundSubtractor.apply` never waits for one, as a live caller expects;
    a frame's mask then depends on when the refit before it landed. The class's default (inline
    refits) is for runs that must repeat exactly (``kdrsdl evaluate``, the tests).

    Parameters
    ----------
    **knobs
        Fields of :class:`BackgroundParams` (docs/algorithm.md, "The streaming model";
        README, "Tuning").

    Returns
    -------
    KDRSDLBackgroundSubtractor

    Raises
    ------
    ValueError
        If a knob is unknown or out of range (the message names it).
    """
    return KDRSDLBackgroundSubtractor(**{"async_refit": True, **knobs})
