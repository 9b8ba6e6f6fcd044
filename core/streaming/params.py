"""The streaming model's knobs, each declared once: default, range, unit and meaning.

:class:`BackgroundParams` is the one declaration. Its checks (:meth:`BackgroundParams.validate`)
come from the declarations, and so do the worker's configuration schema (``streamer/config.py``
builds its ``[model]`` table from :func:`knobs`) and this class's own documentation.
"""

from collections.abc import Iterable
from dataclasses import Field, dataclass, field, fields
from typing import Any, Optional

import numpy as np

#: Default longest side of the processing resolution, pixels (see ``processing_side``). Of the five
#: CDnet sequences only badminton (720 x 480) is larger; processed at 360 x 240 its F is 0.795
#: against 0.781 at full size (0.796 at 480, 0.790 at 320). The refits' cost grows with the pixels:
#: at 480 a 640 x 480 camera's worker took 95% of a core (refits of 1.1 s every 1.3 s). A 720p or
#: 1080p camera is processed at 320 x 180, an exact factor (core.streaming.resolution).
PROCESSING_SIDE = 360


@dataclass(frozen=True)
class Knob:
    """One knob's declaration.

    Attributes
    ----------
    meaning : str
        What it does, in a sentence or a few.
    unit : str
        Its unit ("frames", "pixels", "intensity in [0, 1]", ...); "" for none.
    low, high : float or None
        Bounds; None = unbounded on that side.
    low_open, high_open : bool
        The bound is strict (``>`` / ``<``) rather than inclusive.
    choices : tuple of str or None
        The allowed values of a string knob.
    optional : bool
        None is also allowed (its meaning is given in ``meaning``).
    """

    meaning: str
    unit: str = ""
    low: Optional[float] = None
    high: Optional[float] = None
    low_open: bool = False
    high_open: bool = False
    choices: Optional[tuple] = None
    optional: bool = False

    def check(self, name: str, value: Any, kind: type) -> None:
        """Raise ValueError naming ``name`` when ``value`` is not of ``kind`` or out of range."""
        if value is None and self.optional:
            return
        none = " or None" if self.optional else ""
        if kind is bool:
            if not isinstance(value, (bool, np.bool_)):
                raise ValueError(f"{name} must be true or false, got {value!r}")
            return
        if kind is str:
            choices = self.choices or ()
            if value not in choices:
                raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}, got {value!r}")
            return
        if kind is int:
            ok = isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))
            what = "an integer"
        else:
            ok = (
                isinstance(value, (int, float, np.integer, np.floating))
                and not isinstance(value, (bool, np.bool_))
                and bool(np.isfinite(value))
            )
            what = "a finite number"
        if ok and self.low is not None:
            ok = value > self.low if self.low_open else value >= self.low
        if ok and self.high is not None:
            ok = value < self.high if self.high_open else value <= self.high
        if not ok:
            raise ValueError(f"{name} must be {what} {self.range_text()}{none}, got {value!r}")

    def range_text(self) -> str:
        """The range in words, e.g. ``in [0, 1)`` or ``>= 1``."""
        if self.low is not None and self.high is not None:
            return f"in {'(' if self.low_open else '['}{self.low:g}, {self.high:g}{')' if self.high_open else ']'}"
        if self.low is not None:
            return f"{'>' if self.low_open else '>='} {self.low:g}"
        if self.high is not None:
            return f"{'<' if self.high_open else '<='} {self.high:g}"
        return ""


def knob(
    default: object,
    meaning: str,
    unit: str = "",
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    choices: Iterable[str] | None = None,
    optional: bool = False,
) -> Any:
    """A dataclass field carrying its :class:`Knob` declaration (typed Any, as ``dataclasses.field`` is)."""
    return field(
        default=default,
        metadata={
            "knob": Knob(
                meaning, unit, low, high, low_open, high_open, None if choices is None else tuple(choices), optional
            )
        },
    )


@dataclass
class BackgroundParams:
    """Knobs of :class:`core.streaming.background.KDRSDLBackgroundSubtractor`.

    One default set for every scene: it is scored on the CDnet sequences of several categories
    (docs/results.md, "Against the field"). The attributes, with their units and ranges, are listed below
    (generated from the declarations).
    """

    # ------------------------------------------------------------------ the window and its refits
    window: int = knob(30, "Frames in the solver's window N.", "frames", 2, 1000)
    window_stride: int = knob(
        8,
        "Every window_stride-th frame enters the window, so it spans window * "
        "window_stride frames (slow objects then leave the background).",
        "frames",
        1,
        1000,
    )
    rank: int = knob(
        12,
        "Dictionary size r, at most min(height, width) of the processing resolution. A refit's "
        "products grow with it; most of a refit is passes over the window's pixels, which do not.",
        "",
        1,
        1000,
    )
    lam: Optional[float] = knob(
        0.005,
        "Weight of |E|_1. None = the paper's 1 / sqrt(window * max(m, n)) (0.010 "
        "at the default window and 320 x 240); 0.005 lets E take more of the traffic, "
        "which keeps it out of the background M.",
        "",
        0,
        None,
        low_open=True,
        optional=True,
    )
    alpha: float = knob(1e-2, "Weight of |R|_1 (the paper's default).", "", 0, None, low_open=True)
    refit_interval: int = knob(
        80,
        "Frames between window refits (warm-started KDRSDL). Fewer frames follow a changing "
        'background sooner and cost more CPU (docs/results.md, "Cameras per core").',
        "frames",
        1,
        None,
    )
    refit_still_factor: int = knob(
        2,
        "Refits come refit_interval x this frames apart while the background holds still: at "
        "two refits in a row (core.streaming.window.STILL_REFITS), each moved M by more than "
        "half its band at fewer than refit_still_fraction of the pixels; the first refit that "
        "moves it more brings refit_interval back. 1 = off.",
        "",
        1,
        100,
    )
    refit_still_fraction: float = knob(
        0.001,
        "Fraction of the pixels whose background M a refit may move by more than half their "
        "band (max(k_sigma sigma, pixel_floor)) per refit_interval frames since the last refit, "
        "while the background counts as still.",
        "",
        0,
        1,
    )
    refit_max_iter: int = knob(
        13,
        "Iterations of a warm refit (the cold first fit gets 3x): a fixed budget, since a warm refit "
        "continues from the last solution and rarely meets refit_tol.",
        "",
        1,
        10000,
    )
    refit_tol: float = knob(1e-4, "Stopping tolerance of the refits.", "", 0, None, low_open=True)
    refit_backoff: float = knob(
        60.0,
        "Rho-steps a warm refit takes mu back (core.solver.kdrsdl's backoff). A "
        "refit that stops at max_iter leaves mu ~ rho^refit_max_iter higher; less back-off "
        "than that ratchets mu to its cap over a long stream, where E absorbs every "
        "change and the background stops adapting. 60 brings mu back near the window's "
        "mu0.",
        "",
        0,
        1000,
        low_open=True,
    )
    refit_scale: int = knob(
        1,
        "The refits solve the window reduced by this factor on each side (area means, alpha / "
        "refit_scale), and the background, its spread and the samples are lifted back to the "
        "processing resolution (core.streaming.coarse). 2 costs 0.3-0.45x the CPU per refit and "
        'some accuracy where the background moves (docs/results.md, "Cameras per core"); an object '
        "that stops may stay foreground for good (tests/core/test_coarse.py). 1 = at the "
        "processing resolution. frame_model 'last' and "
        "'fit' read the dictionary at that resolution: with them the refits ignore this knob.",
        "",
        1,
        8,
    )
    rebalance: bool = knob(
        True,
        "Rebalance the scale of A, B and R at each warm refit: without it A drifts "
        "towards 0 and R towards infinity over thousands of frames.",
    )
    async_refit: bool = knob(
        False,
        "Run window refits on a thread, so a frame never waits for one (frames keep "
        "the previous dictionary until the new one is ready; the frame at which a refit "
        "lands then depends on timing). The worker turns it on.",
    )
    refit_process: bool = knob(
        False,
        "Run the window refits in a child process of their own (spawned with the model, at nice "
        "+10) instead of on a thread (with async_refit, as in the worker; inline refits stay "
        "inline): a refit the scheduler starves then cannot hold the frames' thread back through "
        "Python's lock. It costs the child's memory (about 270 MiB at 320 x 240) "
        'and the window\'s trip to it and back at each refit (docs/design.md, "Processes").',
    )
    kernel: str = knob(
        "numba",
        "How a frame's per-pixel steps run: compiled loops ('numba': the band, the sample "
        "consensus, the blink counts, the samples' update, and the moving background's fit with "
        "the global offset) or numpy ('numpy', the reference). The masks are the same to the bit; "
        "'numpy' spares numba's memory (about 120 MiB) for about a third more time a frame. On an "
        "empty cache a child process compiles the kernels (15-20 s) while the model runs numpy. "
        "With tolerance > 1 the band runs in numpy either way.",
        choices=("numba", "numpy"),
    )
    # ------------------------------------------------------------------ each frame's background
    frame_model: str = knob(
        "moving",
        "Background of a new frame: the window's robust mean M, plus, near the pixels whose "
        "background moves, the low-rank part A R B^T with the frame's own core R fitted on the "
        "fixed dictionary over the previous mask's background ('moving', the most accurate "
        "measured); M alone ('mean'); M plus the low-rank part of the newest window frame "
        "('last'); or M + A R B^T at every pixel ('fit'; it absorbs part of slow or large "
        "objects).",
        choices=("moving", "mean", "last", "fit"),
    )
    refit_background: str = knob(
        "kdrsdl",
        "What a refit makes of the window: KDRSDL's robust mean M and sparse part E ('kdrsdl'), or, "
        "for the ablation that measures what KDRSDL adds to the masks, the window's per-pixel median "
        "with E the residual beyond lam ('median'; the solver still runs and its state is kept).",
        choices=("kdrsdl", "median"),
    )
    frame_iters: int = knob(4, "Iterations of the per-frame core fit (frame_model 'moving' and 'fit').", "", 1, 1000)
    fit_reach: int = knob(
        15,
        "Side of the square around each dynamic pixel within which frame_model 'moving' uses the "
        "fitted low-rank part (the swaying of a tree's mass reaches past the pixels that blink).",
        "pixels",
        1,
        99,
    )
    fit_min_dynamic: float = knob(
        0.005,
        "Share of the frame that must be dynamic pixels for frame_model 'moving' to fit a frame's "
        "core; below it the frame is judged against M alone (a few blinking pixels on an "
        "object's rim are not a moving background).",
        "share of the frame",
        0.0,
        1.0,
    )
    fit_refresh: int = knob(
        2,
        "While fewer than fit_refresh_dynamic of the frame's pixels are dynamic, frame_model "
        "'moving' fits the frame's core on one frame in this many and reuses that background on "
        "the others. 1 = every frame.",
        "frames",
        1,
        100,
    )
    fit_refresh_dynamic: float = knob(
        0.02,
        "Share of the frame dynamic from which frame_model 'moving' fits every frame (fit_refresh).",
        "share of the frame",
        0.0,
        1.0,
    )
    global_offset: bool = knob(
        True,
        "Add the frame's median difference from the background to the background "
        "before scoring, taken over the still background (the previous mask's background less "
        "the dynamic pixels, whose leaves or water would bias it): follows a global brightness "
        "change (clouds, auto-exposure) between refits.",
    )
    processing_side: int = knob(
        PROCESSING_SIDE,
        "Longest side of the processing resolution: larger frames are "
        "reduced (area averaging, aspect kept) before the window keeps, solves and scores "
        "them, by an exact integer factor where one lands within an eighth below it (1280 x 720 "
        "to 320 x 180); 0 = the input resolution (core.streaming.resolution).",
        "pixels",
        0,
        8192,
    )
    mask_resolution: str = knob(
        "input",
        "Resolution of the published mask: 'input' (the decision enlarged to the frame's size: "
        "the source's when the capture sent the frame reduced) or 'processing'.",
        choices=("input", "processing"),
    )
    # ------------------------------------------------------------------ the decision
    decision: str = knob(
        "pixel",
        "How pixels are judged: 'pixel', against per-pixel bands of the background's "
        "own spread with spatial tolerance and blink feedback (core.streaming.decision); "
        "'global', one threshold max(min_threshold, k_sigma * MAD sigma) for every pixel.",
        choices=("pixel", "global"),
    )
    k_sigma: float = knob(
        3.0,
        "Band half-width (pixel) or threshold (global) in multiples of the noise sigma.",
        "",
        0,
        None,
        low_open=True,
    )
    threshold: Optional[float] = knob(
        None,
        "Fixed global threshold on |x - L|; None = adaptive (decision 'global' and the frames before the first refit).",
        "intensity in [0, 1]",
        0,
        1,
        low_open=True,
        high_open=True,
        optional=True,
    )
    min_threshold: float = knob(
        0.10,
        "Floor of the adaptive global threshold (0.10 = 25 gray levels).",
        "intensity in [0, 1]",
        0,
        1,
        high_open=True,
    )
    e_cut: float = knob(
        0.05,
        "Window samples whose sparse part |E| exceeds this are foreground and left out of the per-pixel spread.",
        "intensity in [0, 1]",
        0,
        1,
    )
    pixel_floor: float = knob(
        0.06, "Smallest band half-width (0.06 = 15 gray levels).", "intensity in [0, 1]", 0, 1, high_open=True
    )
    still_cut: bool = knob(
        True,
        "Where the background holds still (no dynamic pixel within fit_reach when the refit starts), "
        "window samples farther than pixel_floor from M are foreground too, left out of the spread "
        "and flagged in the samples' seeding as E's are, whatever share of them KDRSDL's low-rank "
        "part took (a lane's recurring traffic), where they are at most half the window (more: the "
        "background itself changes); near dynamic pixels E alone decides, as the moving "
        "background uses A R B^T there.",
    )
    tolerance: int = knob(
        1,
        "Side of the neighbourhood whose band a pixel may match (absorbs jitter); 1 = none, the "
        "default since the background samples let a dynamic pixel match its neighbours' samples.",
        "pixels",
        1,
        51,
    )
    tolerance_blink: float = knob(
        0.5,
        "The tolerance applies where a pixel's blink count exceeds this (its background moves or "
        "the camera shakes), not over a still background, whose object edges it would erode; "
        "0 = at every pixel.",
        "",
        0,
        20,
    )
    blink_gain: float = knob(0.1, "Band widening per unit of a pixel's blink count; 0 = no feedback.", "", 0, 10)
    shadow: bool = knob(
        True,
        "A pixel darker than its band by a ratio x / background that is uniform over its "
        "neighbourhood is a cast shadow, not foreground (the bounds: "
        "core.streaming.decision.DecisionParams).",
    )
    # ------------------------------------------------------------------ the background samples
    samples: int = knob(
        20,
        "Background samples per pixel K kept beside the window at the frame rate, from pixels the "
        "model called background (core.streaming.samples): a pixel outside its band that matches "
        "them is background (a leaf and the sky behind it). 0 = none.",
        "",
        0,
        200,
    )
    sample_matches: int = knob(2, "Samples within the radius that make a match N (at most samples).", "", 1, 200)
    sample_radius: float = knob(
        0.03,
        "Match radius of a still pixel; it widens with the pixel's blink count as its band does.",
        "intensity in [0, 1]",
        0,
        1,
        low_open=True,
    )
    sample_period: int = knob(
        16,
        "A still background pixel replaces one random sample every sample_period frames, a dynamic "
        "one four times as often (a multiple of 4).",
        "frames",
        4,
        4096,
    )
    sample_seed: int = knob(
        0,
        "Seed of the background samples' random choices (which pixel learns at which frame, which "
        "sample it replaces, an absorbed ghost's samples): another seed is another draw of the same "
        "model, whose F moves by a few thousandths on some sequences (docs/results.md).",
        "",
        0,
        2**31 - 1,
    )
    dynamic_blink: float = knob(
        2.0,
        "Blink count above which a pixel is dynamic (its background moves): it may match its "
        "neighbours' samples, learns four times as fast and propagates its value to a neighbour.",
        "",
        0,
        20,
    )
    # ------------------------------------------------------------------ light
    light_change: bool = knob(
        True,
        "Recognise a change of light (x = gain * background + offset, |gain - 1| > 0.05, fitted on "
        "the background) and map the model's memory to it at once instead of reporting it as "
        "motion (core.streaming.light).",
    )
    # ------------------------------------------------------------------ post-processing and learning
    open_size: int = knob(
        3, "Side of the square of the mask's opening (removes specks); 0 or 1 = none.", "pixels", 0, 51
    )
    open_restore: float = knob(
        0.8,
        "After the opening, a blob (8-connected, pixels that look like a cast shadow left out) that "
        "kept at least this share of its pixels gets back the rim the opening took "
        "(core.streaming.postprocess.restore_rims); 0 = a plain opening.",
        "",
        0,
        1,
    )
    close_size: int = knob(
        7,
        "Side of the square of the closing that follows (joins the parts of an object); 0 or 1 = none.",
        "pixels",
        0,
        51,
    )
    fill_holes: bool = knob(
        True,
        "Fill the holes of the mask's blobs after the closing (the uniform inside of a "
        "vehicle scores low but is foreground).",
    )
    speck_area: float = knob(
        0.004,
        "A blob of the reported mask smaller than this share of the frame is dropped when at least "
        "speck_blink of its pixels have blinked lately (a blink count above 0): a patch of leaves or "
        "water that swung further than before, not an object (core.streaming.postprocess."
        "drop_specks). 0 = none.",
        "share of the frame",
        0,
        1,
    )
    speck_blink: float = knob(
        0.25,
        "Share of a small blob's pixels with a blink count above 0 that makes it a speck (speck_area).",
        "",
        0,
        1,
    )
    speck_reach: float = knob(
        0.07,
        "A small blob is not a speck when the bounding box of a blob of at least speck_area lies "
        "closer than this share of the frame's longer side to its own: a part of an object that "
        "the decision split off (speck_area). 0 = specks dropped wherever they lie.",
        "share of the frame's longer side",
        0,
        1,
    )
    update_blend: float = knob(
        0.8,
        "Weight of the background in the pixels under the dilated mask when a frame "
        "enters the window, where the background holds still: 0 learns the frame as it is (a "
        "still object is absorbed within a window), 1 never learns foreground (a false detection "
        'never heals). At 0.8 a stopped object stays foreground 63-83 s (docs/algorithm.md, "Still '
        'objects").',
        "",
        0,
        1,
    )
    update_blend_moving: float = knob(
        0.7,
        "The same weight within fit_reach of a dynamic pixel, where the background moves: leaves "
        "that a gust pushes into pixels of sky that never showed one enter the window sooner, before "
        "the spread leaves them out for good.",
        "",
        0,
        1,
    )
    update_margin: int = knob(5, "Side of the dilation of the mask for update_blend.", "pixels", 0, 51)
    blend_dynamic: bool = knob(
        False,
        "update_blend applies to the dynamic pixels under the dilated mask too. By default a pixel "
        "whose background moves (blink count above dynamic_blink) enters the window as the frame "
        'shows it, so that the refits\' spread learns that motion (docs/algorithm.md, "The streaming model").',
    )
    warmup_entries: int = knob(
        16,
        "The window's first entries (one every window_stride frames) enter as the frame shows them "
        "(no update_blend), the pixels the model called foreground left out of the spread and the "
        "samples' seeding instead: a background that the first seconds' objects hide is learnt when "
        "they leave, not kept as a ghost. An object that stops within them is learnt too. 0 = none.",
        "entries",
        0,
        1000,
    )
    warmup_blink_frames: int = knob(
        64,
        "For this many frames after a cold start the decision counts blinks inside the objects too: "
        "a moving background the model has not yet seen (leaves against the sky) is flagged as one "
        "blob, and inside it flips would otherwise never make its pixels dynamic. 0 = never.",
        "frames",
        0,
        100000,
    )
    ghost_frames: int = knob(
        10,
        "Frames in a row a blob must look like a ghost (its outline is in the background, not in the "
        "frame: an object the model remembers has left) before the model adopts the frame there as "
        "its background; until then such a blob enters the window unblended (core.streaming.ghosts). "
        "0 = no ghost test.",
        "frames",
        0,
        255,
    )
    ghost_reach: float = knob(
        0.07,
        "For a few seconds after a blob is absorbed as a ghost (core.streaming.ghosts.REMNANT_FRAMES), "
        "foreground that has stayed within this share of the frame's longer side of it is a remnant "
        "of the same ghost where its pixels show what the background beside them shows, and is "
        "absorbed too. 0 = no remnants.",
        "share of the frame's longer side",
        0,
        1,
    )

    @property
    def solve_scale(self) -> int:
        """The factor by which the refits reduce the window: ``refit_scale`` with frame_model
        "mean" or "moving" (which judges against ``M`` alone on a coarse dictionary), else 1 ("last"
        and "fit" read the dictionary at the processing resolution)."""
        return self.refit_scale if self.frame_model in ("mean", "moving") else 1

    def validate(self) -> "BackgroundParams":
        """Check every knob against its declaration.

        Returns
        -------
        BackgroundParams
            self.

        Raises
        ------
        ValueError
            Naming the first knob of the wrong type or out of its range.
        """
        for f, k, t in knobs(self):
            k.check(f.name, getattr(self, f.name), t)
        if self.samples and self.sample_matches > self.samples:
            raise ValueError(f"sample_matches must be at most samples ({self.samples}), got {self.sample_matches}")
        if self.sample_period % 4:
            raise ValueError(f"sample_period must be a multiple of 4, got {self.sample_period}")
        return self


def _kind(f: Field) -> type:
    """The Python type of a knob's values (its annotation without Optional)."""
    return {int: int, float: float, bool: bool, str: str, Optional[float]: float}[f.type]


def knobs(params: "BackgroundParams | type[BackgroundParams]" = BackgroundParams) -> list[tuple[Field, Knob, type]]:
    """The declared knobs, in declaration order.

    Returns
    -------
    list of (dataclasses.Field, Knob, type)
        Each field (name, annotation, default), its declaration, and the type of its values
        (int, float, bool or str; the annotation without Optional).
    """
    return [(f, f.metadata["knob"], _kind(f)) for f in fields(params)]


def _attributes_doc():
    lines = ["", "    Attributes", "    ----------"]
    for f, k, kind in knobs():
        t = kind.__name__ + (" or None" if k.optional else "")
        lines.append(f"    {f.name} : {t}")
        extra = [
            s
            for s in (
                k.unit and f"unit: {k.unit}",
                k.range_text(),
                k.choices and "one of " + ", ".join(map(repr, k.choices)),
                f"default {f.default!r}",
            )
            if s
        ]
        lines.append(f"        {k.meaning} ({'; '.join(extra)}.)")
    return "\n".join(lines) + "\n"


BackgroundParams.__doc__ += _attributes_doc()
