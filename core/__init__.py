"""kdrsdl-stream's numerics: KDRSDL (Bahri et al., ICCV 2017) and the streaming model built on it.

Grouped by job, as scikit-learn keeps ``decomposition/`` apart from ``metrics/``:

- :mod:`core.solver`: the decomposition itself (Algorithm 1, its products, Stein solves,
  proximal steps, the warm-start state) and the RPCA baseline;
- :mod:`core.streaming`: the streaming background model (window schedule, refits, per-pixel
  decision, post-processing, checkpoint state) behind an OpenCV-style subtractor;
- :mod:`core.evaluation`: synthetic scenes and the background-subtraction metrics.

numpy, scipy and OpenCV's image functions only; nothing here imports ZeroMQ, Prometheus or
``streamer``.

The subtractor is one import, as OpenCV's are::

    import core
    sub = core.createBackgroundSubtractorKDRSDL()   # like cv2.createBackgroundSubtractorMOG2()
    fgmask = sub.apply(frame)                       # gray or BGR; uint8 0/255
"""

from core.solver import ConvergenceWarning, KDRSDLResult, KDRSDLState, kdrsdl, slide_state, stein_solve
from core.streaming.background import (
    BackgroundParams,
    FrameResult,
    KDRSDLBackgroundSubtractor,
    createBackgroundSubtractorKDRSDL,
)

__all__ = [
    "BackgroundParams",
    "FrameResult",
    "KDRSDLBackgroundSubtractor",
    "createBackgroundSubtractorKDRSDL",
    "ConvergenceWarning",
    "KDRSDLResult",
    "KDRSDLState",
    "kdrsdl",
    "slide_state",
    "stein_solve",
]
