"""The window schedule: which frames enter the solver's window, and when a refit is due.

Every ``stride``-th frame enters (the first one too), the oldest leaves once ``size`` frames
are in, so the window spans ``size * stride`` frames. Until the model has solved a full
window, it is refitted cold whenever the window reaches 2, 4, 8, ... frames and at ``size``
(masks then come from the second frame on, rough at first); after that, every
``refit_interval`` frames once a new frame has entered, or every ``still_interval`` frames while
the background holds still (the model tells :meth:`WindowSchedule.settled` after each refit):
a static scene's background needs no refit every few seconds.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from core.solver.products import fold

#: Refits in a row at which the background held still before refits take ``still_interval``.
STILL_REFITS = 2


@dataclass(frozen=True)
class WindowFrames:
    """The window's frames and masks at one moment, by reference: what a refit solves.

    A refit on its thread stacks them there (:meth:`stack`, a copy of the whole window), not on the
    frames' path. The frames are never changed in place: a change of light gives the window new
    arrays (:meth:`WindowSchedule.map`), and an adopted ghost is held apart, as the values its
    pixels take in the frames that were in the window when it was adopted (:meth:`WindowSchedule.adopt`),
    applied here when the window is stacked.

    Attributes
    ----------
    frames : tuple of ndarray, each shape (m, n), float32
        Oldest first, as they entered.
    masks : tuple of (ndarray, shape (m, n), bool, or None)
        :attr:`WindowSchedule.masks` of the same frames.
    first : int
        Stream index, in entries, of ``frames[0]``.
    adopted : ndarray, shape (m, n), float32, or None
        The values adopted pixels take (None: no pixel adopted).
    until : ndarray, shape (m, n), int64, or None
        Frames of index below ``until`` take ``adopted`` there (and leave their mask); 0 = none.
    """

    frames: tuple
    masks: tuple
    first: int = 0
    adopted: np.ndarray | None = None
    until: np.ndarray | None = None

    def stack(self) -> np.ndarray:
        """The frames as one array, shape (N, m, n), float32, oldest first, adopted pixels applied.

        Laid out as the solver unfolds a window, (m, N, n) C-contiguous, and returned as its
        :func:`core.solver.products.fold` view: the solver then works on this memory rather than
        on a copy of it (a window's size less at a refit's peak: 9.2 MB at 320 x 240).
        """
        first = self.frames[0]
        U = np.empty((first.shape[0], len(self.frames), first.shape[1]), np.float32)
        for k, frame in enumerate(self.frames):
            U[:, k, :] = frame
        X = fold(U)
        if self.adopted is not None and self.until is not None:
            for k in range(len(X)):  # frames[k] is entry first + k
                np.copyto(X[k], self.adopted, where=self.until > self.first + k)
        return X

    def stack_masks(self) -> np.ndarray | None:
        """The masks as (N, m, n) bool, or None when no frame has one (adopted pixels left out)."""
        if all(m is None for m in self.masks):
            return None
        shape = self.frames[0].shape
        out = np.stack([np.zeros(shape, bool) if m is None else m for m in self.masks])
        if self.until is not None:
            for k in range(len(out)):
                out[k] &= self.until <= self.first + k
        return out


@dataclass
class WindowSchedule:
    """The frames of the window and the counters that schedule refits.

    Attributes
    ----------
    size : int
        Frames in the window N (>= 2).
    stride : int
        Every ``stride``-th frame enters (>= 1).
    refit_interval : int
        Frames between warm refits (>= 1).
    still_interval : int
        Frames between warm refits once the background held still at :data:`STILL_REFITS`
        refits in a row (>= 1; ``refit_interval`` = the same pace always).
    still_refits : int
        Refits in a row at which the background held still (:meth:`settled`).
    frames : list of ndarray, each shape (m, n), float32
        The window, oldest first.
    masks : list of (ndarray, shape (m, n), bool, or None)
        For each frame, the pixels that entered it as the frame showed them although the model
        called them foreground (the warm-up's learning, ``warmup_entries``); None = none. The refits
        leave them out of the spread and of the samples' seeding.
    start : int
        Count of the frames that have left: the stream index, in entries, of ``frames[0]``.
    since_entry : int
        Frames since the last one entered.
    since_refit : int
        Frames since the last refit was started.
    new_since_refit : int
        Frames that entered since the last refit was started.
    adopted, until : ndarray, shape (m, n), or None
        Adopted ghosts (:meth:`adopt`): the frames of index below ``until`` take ``adopted``
        there, applied when the window is stacked (:class:`WindowFrames`); None while no frame
        that was in the window at an adoption is left.
    """

    size: int
    stride: int
    refit_interval: int
    still_interval: int
    still_refits: int = 0
    frames: list = field(default_factory=list)
    masks: list = field(default_factory=list)
    start: int = 0
    since_entry: int = 0
    since_refit: int = 0
    new_since_refit: int = 0
    adopted: np.ndarray | None = field(default=None, repr=False, compare=False)
    until: np.ndarray | None = field(default=None, repr=False, compare=False)
    _until_max: int = field(default=0, repr=False, compare=False)

    #: The counters a checkpoint stores, in order (a checkpoint of the release before
    #: ``still_refits`` holds the first four: :meth:`load` takes it as 0).
    COUNTERS = ("start", "since_entry", "since_refit", "new_since_refit", "still_refits")

    def enters_next(self) -> bool:
        """Whether the next frame enters the window (bool)."""
        return not self.frames or self.since_entry + 1 >= self.stride

    def push(self, frame: np.ndarray, fg: np.ndarray | None = None) -> bool:
        """Count one frame and let it enter when its turn comes.

        Parameters
        ----------
        frame : ndarray, shape (m, n), float32
            Kept by reference (not copied) when it enters.
        fg : ndarray, shape (m, n), bool, optional
            Its pixels that the model called foreground and that enter as they are (``masks``).

        Returns
        -------
        bool
            Whether it entered.
        """
        enters = self.enters_next()
        self.since_entry += 1
        self.since_refit += 1
        if enters:
            self.frames.append(frame)
            self.masks.append(fg)
            self.since_entry = 0
            self.new_since_refit += 1
            if len(self.frames) > self.size:
                self.frames.pop(0)
                self.masks.pop(0)
                self.start += 1
                if self.until is not None and self.start >= self._until_max:  # every adopted frame has left
                    self.adopted = self.until = None
        return enters

    def refit_due(self, solved_slices: Optional[int], entered: bool) -> bool:
        """Whether a refit is due after the frame just pushed.

        Parameters
        ----------
        solved_slices : int or None
            Frames in the window of the last solution; None when there is none.
        entered : bool
            Whether the frame just pushed entered.

        Returns
        -------
        bool
        """
        if self.growing(solved_slices):
            n = len(self.frames)
            return entered and n >= 2 and (n & (n - 1) == 0 or n == self.size)
        return self.since_refit >= self.interval() and self.new_since_refit > 0

    def interval(self) -> int:
        """Frames between warm refits now: ``still_interval`` after :data:`STILL_REFITS` still
        refits in a row, else ``refit_interval`` (int)."""
        return self.still_interval if self.still_refits >= STILL_REFITS else self.refit_interval

    def settled(self, still: bool) -> None:
        """Count a refit at which the background held still (``still``), or start the count over."""
        self.still_refits = self.still_refits + 1 if still else 0

    def growing(self, solved_slices: Optional[int]) -> bool:
        """Whether refits are still cold: no solution yet, or one of a window shorter than ``size``."""
        return solved_slices is None or solved_slices < self.size

    def started_refit(self) -> None:
        """Restart the refit counters (a refit was started on the current window)."""
        self.since_refit = 0
        self.new_since_refit = 0

    def view(self) -> WindowFrames:
        """The window's frames and masks now, by reference (a refit stacks them on its thread)."""
        if self.adopted is None:
            return WindowFrames(tuple(self.frames), tuple(self.masks), self.start)
        assert self.until is not None  # copies: adopt writes into these in place
        return WindowFrames(tuple(self.frames), tuple(self.masks), self.start, self.adopted.copy(), self.until.copy())

    def stack(self) -> np.ndarray:
        """The window as one array, shape (N, m, n), float32, oldest first."""
        return self.view().stack()

    def stack_masks(self) -> np.ndarray | None:
        """The frames' ``masks`` as (N, m, n) bool, or None when no frame has one."""
        return self.view().stack_masks()

    def map(self, fn: Callable[[np.ndarray], np.ndarray]) -> None:
        """Replace every frame of the window by ``fn(frame)`` (a new array; e.g. a change of light),
        and the adopted values by ``fn(adopted)``: ``fn`` is per pixel."""
        self.frames = [fn(f) for f in self.frames]
        if self.adopted is not None:
            self.adopted = fn(self.adopted)

    def adopt(self, where: np.ndarray, x: np.ndarray) -> None:
        """Take ``x`` (m, n) float32 at the pixels ``where`` (m, n) bool into every frame now in the
        window, their masks cleared there: the model takes the frame there as its background (an
        uncovered ghost, :mod:`core.streaming.ghosts`), and the next refit solves for it.

        The frames themselves are not touched (one may be a frame a caller holds, or in a view a
        refit stacks): the values are held apart and applied when the window is stacked
        (:class:`WindowFrames`), so an adoption costs its pixels, not the window's 30 frames.
        """
        if self.adopted is None:
            self.adopted = np.zeros(where.shape, np.float32)
            self.until = np.zeros(where.shape, np.int64)
        assert self.until is not None
        np.copyto(self.adopted, x, where=where)
        self._until_max = self.start + len(self.frames)
        self.until[where] = self._until_max

    # ----------------------------------------------------------------- checkpoints
    def state(self) -> dict[str, np.ndarray]:
        """The frames, their masks and the counters as named arrays: ``frames`` (N, m, n) float32,
        ``masks`` (N, m, n) bool (all False where a frame has none) and ``counters`` (5,) int64 in
        the order of :data:`COUNTERS`."""
        masks = self.stack_masks()
        return {
            "frames": self.stack(),
            "masks": np.zeros((len(self.frames),) + self.frames[0].shape, bool) if masks is None else masks,
            "counters": np.array([getattr(self, name) for name in self.COUNTERS], np.int64),
        }

    def load(self, state: Mapping[str, np.ndarray], frame_shape: tuple[int, int]) -> None:
        """Take back what :meth:`state` gave.

        Parameters
        ----------
        state : mapping of str to ndarray
        frame_shape : (int, int)
            The shape (m, n) the window's frames must have.

        Raises
        ------
        ValueError
            If the frames are not (N, m, n) with 1 <= N <= ``size``, hold non-finite values, or
            the counters are not four or five integers >= 0 (four: a checkpoint made before ``still_refits``).
        """
        frames = np.asarray(state["frames"], np.float32)
        counters = [int(v) for v in np.asarray(state["counters"]).ravel()]
        if frames.ndim != 3 or frames.shape[1:] != tuple(frame_shape) or not 1 <= len(frames) <= self.size:
            raise ValueError(f"window of shape {frames.shape} does not fit frames of {tuple(frame_shape)}")
        if not np.isfinite(frames).all():
            raise ValueError("window holds non-finite values")
        if len(counters) == len(self.COUNTERS) - 1:  # made before still_refits: start at 0
            counters.append(0)
        if len(counters) != len(self.COUNTERS) or min(counters) < 0:
            raise ValueError("window counters out of range")
        masks = np.asarray(state["masks"], bool) if "masks" in state else np.zeros(frames.shape, bool)
        if masks.shape != frames.shape:
            raise ValueError(f"window masks of shape {masks.shape} do not fit its frames {frames.shape}")
        self.frames = list(frames.copy())
        self.masks = [m.copy() if m.any() else None for m in masks]
        self.adopted = self.until = None
        for name, v in zip(self.COUNTERS, counters, strict=True):
            setattr(self, name, v)
