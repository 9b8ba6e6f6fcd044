"""The worker's model stage: one frame through the background model, and a typed report.

The model never takes the camera down: an exception resets it to a cold start and is reported,
as are a resolution change (reset) and a refit that failed numerically (reset). The solver
facts that every mask header carries (docs/design.md, "Wire format") are kept here. The worker
reaches the model only through this stage: its checkpoints, its stop and its background image.
"""

import dataclasses
import time
from dataclasses import dataclass
from typing import Mapping, Optional

import numpy as np

from core.streaming.background import FrameResult, KDRSDLBackgroundSubtractor
from core.streaming.light import LightChange
from core.streaming.params import BackgroundParams
from core.streaming.refit import RefitReport
from core.streaming.resolution import published_mask


@dataclass(frozen=True)
class SolverFacts:
    """The last refit, as the mask header's ``solver`` object.

    Attributes
    ----------
    start : str
        "none" (no solution yet), "cold", "warm", "restored" (from a checkpoint) or "reset".
    iterations : int
    residual : float or None
        The solver's last stopping criterion.
    rank : int
        Numerical rank of A.
    """

    start: str = "none"
    iterations: int = 0
    residual: Optional[float] = None
    rank: int = 0


@dataclass(frozen=True)
class StageReport:
    """What :meth:`ModelStage.process` did with one frame.

    Attributes
    ----------
    result : FrameResult or None
        The mask and score; None when the model failed on the frame (``error``).
    seconds : float
        Model time, seconds.
    previous_shape : (int, int) or None
        The previous frames' shape when this frame's differed: the model was reset.
    refit : RefitReport or None
        The window refit installed at this frame.
    exception : Exception or None
        What the model raised (it was reset; the frame gets no mask).
    """

    result: Optional[FrameResult]
    seconds: float
    previous_shape: Optional[tuple] = None
    refit: Optional[RefitReport] = None
    exception: Optional[Exception] = None

    @property
    def light(self) -> Optional[LightChange]:
        """The change of light the model absorbed at this frame (:mod:`core.streaming.light`), or None."""
        return None if self.result is None else self.result.light


class ModelStage:
    """The worker's background model and its solver facts.

    Parameters
    ----------
    params : core.streaming.params.BackgroundParams
        Refits run on their own thread whatever ``async_refit`` says.
    """

    def __init__(self, params: BackgroundParams) -> None:
        self.model = KDRSDLBackgroundSubtractor(params, async_refit=True)
        self.facts = SolverFacts()

    # ----------------------------------------------------------------- checkpoints
    @property
    def n_frames(self) -> int:
        """Frames the model has seen."""
        return self.model.n_frames

    def checkpoint(self) -> dict[str, np.ndarray | np.generic] | None:
        """The model's checkpoint arrays (:meth:`KDRSDLBackgroundSubtractor.checkpoint`)."""
        return self.model.checkpoint()

    def restore(self, arrays: Mapping[str, np.ndarray]) -> bool:
        """Continue from checkpoint arrays; True (and the facts say "restored") when warm.

        Raises
        ------
        ValueError
            If the arrays do not fit the model (:meth:`KDRSDLBackgroundSubtractor.restore`).
        """
        warm = self.model.restore(arrays)
        if warm:
            state = self.model.state
            self.facts = SolverFacts("restored", 0, None, 0 if state is None else int(state.rank))
        return warm

    # ----------------------------------------------------------------- stop
    @property
    def refit_running(self) -> str | None:
        """ "cold" or "warm" while a window refit runs on its thread, else None."""
        return self.model.refit_running

    def close(self, wait: float) -> bool:
        """Stop a running refit, waiting at most ``wait`` seconds; False when it did not stop."""
        return self.model.close(wait=wait)

    def background_image(self) -> Optional[np.ndarray]:
        """The model's background image, (h, w) uint8 (OpenCV's ``getBackgroundImage``); None before one exists."""
        return self.model.getBackgroundImage()

    # ----------------------------------------------------------------- frames

    def process(self, image: np.ndarray, input_shape: tuple[int, int] | None = None) -> StageReport:
        """One frame through the model; a :class:`StageReport` whose result holds the mask as published.

        Parameters
        ----------
        image : ndarray, shape (h, w), uint8
            The frame as received.
        input_shape : (int, int), optional
            ``(h, w)`` of the frame in the source's pixels, when the capture reduced it (the
            header's ``source_shape``). With ``mask_resolution = "input"`` the result's ``fgmask``
            is enlarged to it (:func:`core.streaming.resolution.published_mask`); the score and
            ``fgmask_processing`` stay at the processing size. None: the frame's own shape.
        """
        model = self.model
        previous = model.shape if model.shape is not None and model.shape != image.shape else None
        t0 = time.perf_counter()
        try:
            res = model.process(image)
        except Exception as exc:  # a defect in the model must not take the camera down: reset, go on
            model.reset()
            return StageReport(None, time.perf_counter() - t0, previous, exception=exc)
        mask = published_mask(res.fgmask, input_shape or res.fgmask.shape, model.params.mask_resolution)
        if mask is not res.fgmask:
            res = dataclasses.replace(res, fgmask=mask)
        self._note(res.refit)
        return StageReport(res, time.perf_counter() - t0, previous, res.refit)

    def collect_refit(self) -> Optional[RefitReport]:
        """Install a refit that finished while no frame came (:meth:`KDRSDLBackgroundSubtractor.collect_refit`).

        Returns
        -------
        RefitReport or None
            The refit installed now (the next frame's report will not repeat it), or None.
        """
        r = self.model.collect_refit()
        self._note(r)
        return r

    def _note(self, r: Optional[RefitReport]) -> None:
        """The solver facts of an installed refit."""
        if r is None:
            return
        if r.reset:
            self.facts = SolverFacts("reset")
        else:
            self.facts = SolverFacts("warm" if r.warm else "cold", r.n_iter, r.residual, r.rank)
