"""Ghosts: the background the model never saw, uncovered, told from an object that stopped.

A ghost is a blob of the mask where the model's background holds an object that has left: a
person who stood in view when the model started and then walked away, a car parked before the
camera came up. The frame there shows the background (a wall, a road); the model's memory shows
the object. An object that stopped is the opposite: the frame shows the object, the memory the
background. Both are still, both leave the band; the conditional update
(docs/algorithm.md, "The streaming model") keeps both in the mask for hundreds of frames, which is
right for the object and wrong for the ghost.

What tells them apart is where the object's outline is (the field's cue: Cucchiara et al., IEEE
PAMI 2003, and the "ghost" test of many subtractors since). A blob's contour is the outline of
whatever made it: for an object, the frame has edges along it that the background lacks; for a
ghost, the background has the old object's edges along it and the frame does not. Per blob of the
post-processed mask, over a band of pixels along its contour (:func:`contour_evidence`)::

    frame_only = mean over the band of max(|grad x| - |grad bg|, 0)
    bg_only    = mean over the band of max(|grad bg| - |grad x|, 0)
    ghost      = bg_only > ratio * frame_only  and  bg_only > edge      (GhostParams)

A pixel that lies in a ghost blob for ``ghost_frames`` frames in a row is absorbed: the model
adopts its value as the background there (:meth:`GhostTracker.update`, and the facade's
:meth:`core.streaming.background.KDRSDLBackgroundSubtractor` then writes it into the window and
the background samples). An object whose blob has its outline in the frame is never absorbed by
this rule, however long it stays.

**Remnants.** A ghost's blob often comes apart (a person's feet apart from the body), and a part
whose outline runs along a real edge of the scene (the floor where a foot stood, beside a
cabinet) shows that edge in the frame and fails the test above. Once a blob is absorbed as a
ghost, the pixels within ``ghost_reach`` of it form a zone for :data:`REMNANT_FRAMES` frames; a
pixel of the zone that has been foreground for :data:`REMNANT_HELD` judgements in a row (a still
blob: passing objects are left alone) is absorbed too when its value matches the background
samples of the nearest background pixel along its row or its column, within
:data:`REMNANT_RAY` of the frame's side (:meth:`core.streaming.samples.SampleSet.match_outside`):
it shows what the background beside its blob shows. Pixels absorbed while the zone lasts are not
taken as that background, so an object that stopped beside a ghost is not eaten from its rim
inwards, as ViBe's propagation would; only its pixels that match the background beside it
(camouflage) can go.

``|grad|`` is the L1 norm of the 3 x 3 Sobel gradient (intensity in [0, 1] per pixel: a step of
0.1 gives 0.4). The tracker's count is per pixel so that a blob that moves or splits restarts it.
"""

from dataclasses import dataclass
from typing import TYPE_CHECKING

import cv2
import numpy as np

from core.streaming.postprocess import square

if TYPE_CHECKING:
    from core.streaming.samples import SampleSet


#: Frames a remnants' zone lasts after its ghost was absorbed (4 s at 30 fps).
REMNANT_FRAMES = 120
#: Judgements in a row (of ``period`` frames each) a pixel must have been foreground in a zone
#: before it may be taken for a remnant: about a second, longer than a car or a walker takes to
#: pass a point.
REMNANT_HELD = 8
#: Longest ray from a remnant's pixel to the background it is compared with, a share of the
#: frame's longer side (18 pixels at 360).
REMNANT_RAY = 0.05


@dataclass(frozen=True)
class GhostParams:
    """Settings of :class:`GhostTracker`; ``frames`` is the model knob ``ghost_frames``, the others constants.

    Attributes
    ----------
    frames : int
        Frames in a row a pixel must lie in a ghost blob before it is absorbed; 0 = never.
    period : int
        Blobs are judged every ``period`` frames (a judgement counts for ``period`` frames): a ghost
        is still, so a judgement a frame would cost 0.5 ms of a 320 x 240 frame for nothing.
    ratio : float
        A blob is a ghost when its contour's background-only edges exceed ``ratio`` times its
        frame-only edges.
    edge : float
        Smallest mean background-only edge strength along the contour (Sobel L1, intensity per
        pixel) for a ghost: blobs whose outline is weak in both (water, noise) are left alone.
    reach : float
        The model knob ``ghost_reach``: the remnants' zone around an absorbed ghost, a share of
        the frame's longer side; 0 = no remnants.
    """

    frames: int = 10
    period: int = 4
    ratio: float = 2.0
    edge: float = 0.15
    reach: float = 0.07


def gradient(a: np.ndarray) -> np.ndarray:
    """L1 norm of the 3 x 3 Sobel gradient of ``a`` (h, w) float32, at least 2 x 2: float32 (h, w).

    OpenCV's ``Sobel`` (``ksize=3``, its default border, reflection without the edge pixel),
    written out in float32 so that the compiled ghost test (:func:`core.streaming.kernels.ghost_evidence`)
    can make the same additions in the same order: ``gx = (r_up + r_down) + 2 r`` with ``r`` a
    row's central difference, ``gy = s_down - s_up`` with ``s = (left + right) + 2 centre``.
    OpenCV's vectorised loop adds in this order; its scalar loop at the end of a row adds in
    another, so over a box whose width is not a multiple of its vectors the last columns may
    differ from ``cv2.Sobel``'s by a unit in the last place (tests/core/test_ghosts.py).
    """
    p = np.pad(a, 1, mode="reflect")  # numpy's "reflect" is OpenCV's BORDER_REFLECT_101
    two = np.float32(2)
    r = p[:, 2:] - p[:, :-2]  # (h + 2, w): each row's central difference
    gx = (r[:-2] + r[2:]) + r[1:-1] * two
    s = (p[:, :-2] + p[:, 2:]) + p[:, 1:-1] * two  # (h + 2, w): each row smoothed
    gy = s[2:] - s[:-2]
    return np.abs(gx) + np.abs(gy)


def contour_evidence(x: np.ndarray, bg: np.ndarray, labels: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Each blob's edges along its contour that only the frame has, and that only the background has.

    Parameters
    ----------
    x, bg : ndarray, shape (h, w), float32
        The frame and its background, intensity in [0, 1].
    labels : ndarray, shape (h, w), int32
        Connected components of the mask (0 = background, 1..n-1 the blobs), as
        ``cv2.connectedComponents`` gives them.
    n : int
        Number of labels, the background's included.

    Returns
    -------
    frame_only, bg_only : ndarray, shape (n,), float64
        Mean over each blob's contour band (the pixels within one pixel of its outline, on both
        sides) of ``max(|grad x| - |grad bg|, 0)`` and ``max(|grad bg| - |grad x|, 0)``; 0 for
        label 0.
    """
    k = square(3)
    # everything over the blobs' bounding box with a margin of 2 (the band's outer pixels and
    # their Sobel neighbours): most frames' blobs cover a small part of the frame
    inside = (labels > 0).astype(np.uint8)
    c0, r0, bw, bh = cv2.boundingRect(inside)
    h, w = labels.shape
    box = (slice(max(r0 - 2, 0), min(r0 + bh + 2, h)), slice(max(c0 - 2, 0), min(c0 + bw + 2, w)))
    lab, blobs = labels[box], inside[box]
    band = cv2.dilate(blobs, k) != cv2.erode(blobs, k)
    # the band's outer pixels are labelled 0: they take their neighbouring blob's label
    near = cv2.dilate(lab.astype(np.float32), k)[band].astype(np.intp)
    diff = gradient(x[box])[band] - gradient(bg[box])[band]
    count = np.maximum(np.bincount(near, minlength=n), 1)
    frame_only = np.bincount(near, np.maximum(diff, 0), minlength=n) / count
    bg_only = np.bincount(near, np.maximum(-diff, 0), minlength=n) / count
    frame_only[0] = bg_only[0] = 0
    return frame_only, bg_only


class GhostTracker:
    """Per-pixel count of the frames a pixel has lain in a ghost blob; says which to absorb.

    Parameters
    ----------
    shape : (int, int)
        Frame shape (h, w), pixels (the processing resolution).
    params : GhostParams

    Attributes
    ----------
    count : ndarray, shape (h, w), uint8
        Frames in a row each pixel lay in a ghost blob (saturates at 255).
    zone : ndarray, shape (h, w), uint8
        Judgements left of the remnants' zone each pixel lies in; 0 = none.
    held : ndarray, shape (h, w), uint8
        Judgements in a row each pixel of a zone has been foreground (saturates at 255).
    adopted : ndarray, shape (h, w), bool
        Pixels absorbed while a zone lasts: not taken as the background a remnant is compared with.
    """

    #: Arrays a checkpoint stores: attribute name -> dtype.
    STATE = {"count": np.uint8, "zone": np.uint8, "held": np.uint8, "adopted": bool}

    def __init__(self, shape: tuple[int, int], params: GhostParams) -> None:
        self.shape = shape
        self.params = params
        self.count = np.zeros(shape, np.uint8)
        self.zone = np.zeros(shape, np.uint8)
        self.held = np.zeros(shape, np.uint8)
        self.adopted = np.zeros(shape, bool)

    @property
    def clear(self) -> np.ndarray:
        """Pixels not in a blob judged a ghost at the last frame, bool (h, w): the conditional update
        may keep them out of the window; a suspected ghost enters it as the frame shows it."""
        return self.count == 0

    def state(self) -> dict[str, np.ndarray]:
        """The per-pixel state as named arrays (:data:`STATE`); not copied."""
        return {name: getattr(self, name) for name in self.STATE}

    def load(self, state: dict[str, np.ndarray]) -> None:
        """Take back what :meth:`state` gave.

        Raises
        ------
        ValueError
            If an array is missing or of another shape.
        """
        arrays = {name: np.asarray(state[name]) for name in self.STATE}
        for name, a in arrays.items():
            if a.shape != self.shape:
                raise ValueError(f"ghost {name} of shape {a.shape} does not fit frames of {self.shape}")
        for name, dtype in self.STATE.items():
            setattr(self, name, arrays[name].astype(dtype))

    def update(
        self,
        x: np.ndarray,
        bg: np.ndarray,
        mask: np.ndarray,
        t: int = 0,
        compiled: bool = False,
        samples: "SampleSet | None" = None,
    ) -> np.ndarray | None:
        """Judge a frame's blobs (every ``period`` frames) and return the pixels to absorb now.

        Parameters
        ----------
        x, bg : ndarray, shape (h, w), float32
            The frame and its background, intensity in [0, 1].
        mask : ndarray, shape (h, w), bool
            The frame's post-processed mask.
        t : int
            The frame counter: blobs are judged when ``t`` is a multiple of ``period``.
        compiled : bool
            Take the blobs from :func:`core.streaming.kernels.labels` and their evidence from
            :func:`core.streaming.kernels.ghost_evidence` (the kernels loaded): OpenCV's blobs,
            numbered otherwise, and the same figures as :func:`contour_evidence`.
        samples : SampleSet, optional
            The background samples the remnants are compared with; without them, no remnants.

        Returns
        -------
        ndarray, shape (h, w), bool, or None
            The pixels that have lain in a ghost blob for ``frames`` frames in a row (their count
            then starts over), and the remnants' pixels; None when there are none.
        """
        p = self.params
        if p.frames <= 0 or t % p.period:
            return None
        remnant = self._remnant(x, mask, samples, compiled)
        absorb = self._ghost_blobs(x, bg, mask, compiled)
        if absorb is not None and p.reach > 0:
            side = 2 * round(p.reach * max(self.shape)) + 1
            near = cv2.dilate(absorb.view(np.uint8), square(side)).view(bool)
            self.zone[near] = min(-(-REMNANT_FRAMES // p.period), 255)
        out = remnant if absorb is None else absorb if remnant is None else absorb | remnant
        if out is not None and p.reach > 0:  # what a zone's remnants are not compared with
            self.adopted |= out
        return out

    def _remnant(
        self, x: np.ndarray, mask: np.ndarray, samples: "SampleSet | None", compiled: bool = False
    ) -> np.ndarray | None:
        """The pixels of the zones that have been foreground for :data:`REMNANT_HELD` judgements and
        show what the background beside them shows (:meth:`core.streaming.samples.SampleSet.match_outside`),
        or None; the zones count down, and once none is left the held counts and the adopted pixels
        start over. ``compiled``: the state's update by :func:`core.streaming.kernels.remnant_state`
        (the same counts, in place)."""
        if not self.zone.any():
            if self.held.any() or self.adopted.any():
                self.held[:] = 0
                self.adopted[:] = False
            return None
        ray = round(REMNANT_RAY * max(self.shape))
        if compiled and samples is not None and samples.ready:  # the same state and pixels, in one pass
            from core.streaming import kernels

            tested, outside = np.empty(self.shape, bool), np.empty(self.shape, bool)
            if not kernels.remnant_state(self.zone, self.held, mask, self.adopted, REMNANT_HELD, tested, outside):
                return None
            hit = samples.match_outside(x, tested, outside, ray)
            return hit if hit.any() else None
        zone = self.zone > 0
        self.zone = cv2.subtract(self.zone, 1)  # type: ignore[call-overload]
        self.held = np.where(zone & mask, cv2.add(self.held, 1), 0).astype(np.uint8)  # type: ignore[call-overload]
        if samples is None or not mask.any():
            return None
        held = self.held >= REMNANT_HELD
        if not held.any():
            return None
        hit = samples.match_outside(x, held, ~mask & ~self.adopted, ray)
        return hit if hit.any() else None

    def _ghost_blobs(self, x: np.ndarray, bg: np.ndarray, mask: np.ndarray, compiled: bool) -> np.ndarray | None:
        """The pixels of blobs judged ghosts for ``frames`` frames in a row (see :meth:`update`)."""
        p = self.params
        if compiled:
            from core.streaming import kernels
        ghost = None
        if mask.any():
            if compiled:
                labels: np.ndarray = np.empty(mask.shape, np.int32)
                n = kernels.labels(mask.view(np.uint8), labels)
                frame_only, bg_only = kernels.ghost_evidence(x, bg, labels, n)
            else:
                n, labels = cv2.connectedComponents(mask.view(np.uint8), connectivity=8, ltype=cv2.CV_32S)
                frame_only, bg_only = contour_evidence(x, bg, labels, n)
            ghost = (bg_only > p.ratio * frame_only) & (bg_only > p.edge)
        if ghost is None or not ghost.any():  # no ghost blob: every count starts over
            if self.count.any():
                self.count[:] = 0
            return None
        if compiled:  # the same counts and pixels, in one pass
            absorbed = np.empty(self.shape, bool)
            if not kernels.ghost_counts(labels, ghost, self.count, p.period, p.frames, absorbed):
                return None
            return absorbed
        inside = ghost[labels]
        # + period inside a ghost blob (saturating), 0 elsewhere
        self.count = np.where(inside, cv2.add(self.count, p.period), 0).astype(np.uint8)  # type: ignore[call-overload]
        absorb = self.count >= p.frames
        if not absorb.any():
            return None
        self.count[absorb] = 0
        return absorb
