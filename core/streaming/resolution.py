"""The processing resolution: the size at which the model keeps, solves and scores frames.

Cameras deliver 720p to 4K; the background model does not need that many pixels, and its
window, its refits and its per-frame path all scale with them. Frames larger than
``processing_side`` (their longest side, pixels) are reduced by area averaging (OpenCV's
``INTER_AREA``) keeping their aspect ratio, by an exact integer factor where one lands within an
eighth below ``processing_side`` (1280 x 720 by 4), and a mask made at that size is brought back to
the input's by bilinear interpolation of the 0/1 mask, thresholded at one half (smoother
edges than repeating pixels). Camera services do the same for motion detection (Frigate
scales its motion frame to a fixed height).

The contract between the processes, here only: the capture sends a frame reduced to the
processing resolution (:func:`reduce_to_side`, with the source's shape in its header), so that a
large frame crosses the socket once, small; the worker's model then works at the frame's own size,
and the mask is published at the source's size (:func:`published_mask`) unless the masks are asked
at the processing size. The evaluation feeds every method the same way.
"""

import cv2
import numpy as np

#: A frame is reduced by an exact integer factor when one brings its longest side within this
#: fraction below ``processing_side``: 1280 x 720 to 320 x 180 (4) instead of 360 x 202 (3.56).
#: An exact factor is the cheapest reduction and leaves no resampling phase: the capture's
#: reduction of 1280 x 720 took 0.04 ms instead of 0.70 ms, and a 1280 x 720 camera (worker and
#: capture) 0-7 points of a core less in four pairs of runs, 4 on average, at 21% fewer pixels
#: (docs/results.md, "Cameras per core").
EXACT_FACTOR_SLACK = 1 / 8


def processing_shape(shape: tuple[int, int], side: int) -> tuple[int, int]:
    """The (h, w) at which frames of ``shape`` are processed.

    A frame whose longest side is larger than ``side`` is reduced by the smallest integer factor
    that divides both its sides and brings the longest within :data:`EXACT_FACTOR_SLACK` below
    ``side`` (1280 x 720, 1920 x 1080 and 3840 x 2160 to 320 x 180; 640 x 480 to 320 x 240;
    720 x 480 to 360 x 240). Without one (800 x 600, 1024 x 768), it is scaled so that its longest
    side is ``side``, aspect kept.

    Parameters
    ----------
    shape : (int, int)
        Input frame shape (h, w), pixels.
    side : int
        Longest side of the processing size, pixels; 0 = the input size.

    Returns
    -------
    (int, int)
        ``shape`` itself when its longest side is at most ``side`` (or ``side`` is 0), else
        reduced as above (each side at least 1).
    """
    h, w = shape
    long = max(h, w)
    if side <= 0 or long <= side:
        return (h, w)
    f = -(-long // side)  # the smallest factor that brings the longest side to side or below
    while long / f >= side * (1 - EXACT_FACTOR_SLACK):
        if h % f == 0 and w % f == 0:
            return (h // f, w // f)
        f += 1
    s = side / long
    return (max(1, round(h * s)), max(1, round(w * s)))


def refit_shape(shape: tuple[int, int], scale: int) -> tuple[int, int]:
    """The (h, w) at which refits solve frames of ``shape`` (h, w): each side divided by
    ``scale`` (rounded down, at least 1); ``shape`` itself when ``scale`` is 1."""
    if scale <= 1:
        return (int(shape[0]), int(shape[1]))
    return (max(1, shape[0] // scale), max(1, shape[1] // scale))


def reduce(frame: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """``frame`` (h, w) float32 at ``shape`` by area averaging; itself when the shape is equal.

    While both sides are at least twice the target's, the frame is first halved (the mean of each
    2 x 2 block, OpenCV's fast path for an integer factor), then one ``INTER_AREA`` step brings
    it to ``shape``: 1280 x 720 to 360 x 202 in 0.36 ms instead of 0.86 ms in one step of the
    non-integer factor 3.56 (one OpenCV thread, one-off timing). A factor of exactly 2 (a 720 x 480
    frame to 360 x 240) is the one halving, and 4 (1280 x 720 to 320 x 180, :func:`processing_shape`)
    two, with no step after them (0.04 ms).

    Parameters
    ----------
    frame : ndarray, shape (h, w), float32 (the model) or uint8 (the capture, rounded)
    shape : (int, int)
        Target ``(h, w)``, pixels, at most the frame's on each side.

    Returns
    -------
    ndarray, shape ``shape``, the frame's dtype
    """
    h, w = shape
    while frame.shape[0] >= 2 * h and frame.shape[1] >= 2 * w:
        frame = cv2.resize(frame, (frame.shape[1] // 2, frame.shape[0] // 2), interpolation=cv2.INTER_AREA)
    if frame.shape == (h, w):
        return frame
    return cv2.resize(frame, (w, h), interpolation=cv2.INTER_AREA)


def reduce_to_side(frame: np.ndarray, side: int) -> np.ndarray:
    """``frame`` (h, w) at the processing resolution of longest side ``side`` (:func:`processing_shape`,
    :func:`reduce`): itself when it is no larger; the capture sends frames so, uint8."""
    return reduce(frame, processing_shape(frame.shape, side))


def published_mask(fgmask: np.ndarray, source_shape: tuple[int, int], mask_resolution: str) -> np.ndarray:
    """The mask as the worker publishes it for a frame the capture reduced (the contract above).

    Parameters
    ----------
    fgmask : ndarray, shape (h, w), uint8
        The model's 0/255 mask at the size of the frame it was given.
    source_shape : (int, int)
        ``(h, w)`` of the frame at the source, pixels (the frame header's ``source_shape``).
    mask_resolution : str
        "input": enlarged to ``source_shape`` (:func:`enlarge_mask`); "processing": as it is.

    Returns
    -------
    ndarray, uint8
        ``fgmask`` itself when no enlarging is due.
    """
    return enlarge_mask(fgmask, source_shape) if mask_resolution == "input" else fgmask


def enlarge_mask(fgmask: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """A uint8 0/255 mask brought to ``shape`` (h, w): bilinear, thresholded at 128, 0/255 again.

    Two passes over the large mask (the resize, then the threshold in place); itself when the
    shape is equal.
    """
    if fgmask.shape == tuple(shape):
        return fgmask
    m = cv2.resize(fgmask, (shape[1], shape[0]), interpolation=cv2.INTER_LINEAR)
    cv2.threshold(m, 127, 255, cv2.THRESH_BINARY, dst=m)
    return m


def enlarge(image: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """A float32 image (score, background) brought to ``shape`` (h, w), bilinear."""
    if image.shape == tuple(shape):
        return image
    return cv2.resize(image, (shape[1], shape[0]), interpolation=cv2.INTER_LINEAR)
