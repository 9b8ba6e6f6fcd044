"""The background subtractors that ``kdrsdl evaluate`` runs beside ours, behind one interface.

Every method takes the same grayscale uint8 frame and returns a boolean foreground mask (and,
where the method has one, a continuous foreground score for ROC curves):

- ``kdrsdl-stream``: our streaming model at its defaults (refits synchronous, so runs repeat),
  fed as the service feeds it: a frame larger than the processing resolution reduced to it in
  uint8 first (what the capture sends), the mask enlarged back to the frame's size (what the
  worker publishes; the contract: :mod:`core.streaming.resolution`).
- ``mog2``, ``knn``: OpenCV's subtractors at their defaults, shadows off.
- ``mog2+post``, ``knn+post``: the same masks through our mask post-processing, so the model's
  own contribution shows apart from the post-processing's.
- ``gsoc``, ``cnt``: OpenCV contrib's ``cv2.bgsegm`` subtractors at their defaults.
- ``subsense``, ``pawcs``: BGSLibrary's (pybgs) SuBSENSE (St-Charles et al., TIP 2015) and PAWCS
  (St-Charles et al., WACV 2015) at their defaults. PAWCS accepts 3-channel frames only: it gets
  the grayscale frame replicated to three channels, the same information.

A method whose package is not installed raises :class:`Unavailable` with the install command.
"""

import os
import tempfile
from dataclasses import dataclass
from typing import Callable, Optional

import cv2
import numpy as np

from core.streaming import resolution
from core.streaming.background import BackgroundParams, KDRSDLBackgroundSubtractor
from core.streaming.postprocess import postprocess

PEERS_INSTALL = "pip install 'kdrsdl-stream[peers]' (builds pybgs; needs Debian's libopencv-dev, cmake, g++)"


class Unavailable(RuntimeError):
    """A method whose package is absent; the message says how to install it."""


@dataclass
class Subtractor:
    """One running method: ``apply(frame) -> (mask, score)``.

    Attributes
    ----------
    apply : callable
        Takes a grayscale frame, uint8 (h, w); returns a foreground mask, bool (h, w), and a
        continuous score, float32 (h, w) in [0, 1], or None for a mask-only method.
    params : dict
        The settings the method runs with, for the results.
    """

    apply: Callable[[np.ndarray], tuple]
    params: dict


def _opencv(factory, post, params):
    sub = factory()
    post_params = BackgroundParams()

    def apply(frame):
        mask = sub.apply(frame) > 127
        if post:
            mask = postprocess(mask, post_params.open_size, post_params.close_size, post_params.fill_holes)
        return mask, None

    if post:
        params = {
            **params,
            "post": {
                "open_size": post_params.open_size,
                "close_size": post_params.close_size,
                "fill_holes": post_params.fill_holes,
            },
        }
    return Subtractor(apply, params)


def _kdrsdl_stream(model=None):
    sub = KDRSDLBackgroundSubtractor(model)
    side = sub.params.processing_side

    def apply(frame):
        out = sub.process(resolution.reduce_to_side(frame, side))
        mask = resolution.published_mask(out.fgmask, frame.shape, "input") > 0
        return mask, resolution.enlarge(out.score_processing, frame.shape)

    return Subtractor(apply, dict(vars(sub.params)))


def _bgsegm(name):
    if not hasattr(cv2, "bgsegm"):
        raise Unavailable("OpenCV's contrib module is missing: pip install opencv-contrib-python-headless")
    factory = {"gsoc": cv2.bgsegm.createBackgroundSubtractorGSOC, "cnt": cv2.bgsegm.createBackgroundSubtractorCNT}
    return _opencv(factory[name], False, {"defaults": True})


def _pybgs(name):
    try:
        import pybgs
    except ImportError:
        raise Unavailable(f"pybgs is not installed: {PEERS_INSTALL}") from None
    # BGSLibrary reads ./config/<Name>.xml at construction if present, and writes its settings
    # there: build it in an empty directory, so the defaults always apply and nothing is left behind.
    here = os.getcwd()
    with tempfile.TemporaryDirectory() as scratch:
        os.mkdir(os.path.join(scratch, "config"))
        os.chdir(scratch)
        try:
            algo = {"subsense": pybgs.SuBSENSE, "pawcs": pybgs.PAWCS}[name]()
        finally:
            os.chdir(here)
    three_channels = name == "pawcs"

    def apply(frame):
        if three_channels:
            frame = cv2.cvtColor(frame, cv2.COLOR_GRAY2BGR)
        return np.asarray(algo.apply(frame)) > 127, None

    return Subtractor(apply, {"defaults": True, "input": "gray x3" if three_channels else "gray"})


_FACTORIES = {
    "kdrsdl-stream": _kdrsdl_stream,
    "mog2": lambda: _opencv(
        lambda: cv2.createBackgroundSubtractorMOG2(detectShadows=False),
        False,
        {"detectShadows": False, "defaults": True},
    ),
    "knn": lambda: _opencv(
        lambda: cv2.createBackgroundSubtractorKNN(detectShadows=False),
        False,
        {"detectShadows": False, "defaults": True},
    ),
    "mog2+post": lambda: _opencv(
        lambda: cv2.createBackgroundSubtractorMOG2(detectShadows=False),
        True,
        {"detectShadows": False, "defaults": True},
    ),
    "knn+post": lambda: _opencv(
        lambda: cv2.createBackgroundSubtractorKNN(detectShadows=False), True, {"detectShadows": False, "defaults": True}
    ),
    "gsoc": lambda: _bgsegm("gsoc"),
    "cnt": lambda: _bgsegm("cnt"),
    "subsense": lambda: _pybgs("subsense"),
    "pawcs": lambda: _pybgs("pawcs"),
}

#: Seed of OpenCV's random number generator at the creation of every method.
RNG_SEED = 0

#: Methods of the CDnet protocol, in the order results list them.
METHODS = tuple(_FACTORIES)


def create(name: str, model: BackgroundParams | None = None) -> Subtractor:
    """A fresh instance of method ``name``.

    Parameters
    ----------
    name : str
        One of :data:`METHODS`.
    model : core.streaming.params.BackgroundParams, optional
        kdrsdl-stream's knobs (default: its defaults); the other methods ignore it.

    Raises
    ------
    ValueError
        If ``name`` is not one of :data:`METHODS`.
    Unavailable
        If the method's package is not installed (the message gives the install command).
    """
    if name not in _FACTORIES:
        raise ValueError(f"unknown method {name!r}; choose from {', '.join(METHODS)}")
    # OpenCV's KNN samples from the process-wide RNG: seeding it here makes a method's result
    # independent of what ran before it in the same process (measured: up to 0.004 F otherwise).
    cv2.setRNGSeed(RNG_SEED)
    if name == "kdrsdl-stream":
        return _kdrsdl_stream(model)
    return _FACTORIES[name]()


def availability(name: str) -> Optional[str]:
    """None when method ``name`` can run here, else why not and how to install it."""
    try:
        create(name)
    except Unavailable as exc:
        return str(exc)
    return None
