"""The processing resolution: the size at which the model keeps, solves and scores frames.

Cameras deliver 720p to 4K; the background model does not need that many pixels, and its
window, its refits and its per-frame path all scale with them. Frames larger than
``processing_side`` (their longest side, pixels) are reduced by area averaging (OpenCV's
``INTER_AREA``) keeping their aspect ratio, and a mask made at that size is brought back to
the input's by bilinear interpolation of the 0/1 mask, thresholded at one half (smoother
edges than repeating pixels). Camera services do the same for motion detection (Frigate
scales its motion frame to a fixed height).
"""

import cv2
import numpy as np


def processing_shape(shape: tuple[int, int], side: int) -> tuple[int, int]:
    """The (h, w) at which frames of ``shape`` are processed.

    Parameters
    ----------
    shape : (int, int)
        Input frame shape (h, w), pixels.
    side : int
        Longest side of the processing size, pixels; 0 = the input size.

    Returns
    -------
    (int, int)
        ``shape`` itself when its longest side is at most ``side`` (or ``side`` is 0),
        else scaled so that its longest side is ``side`` (each side at least 1).
    """
    h, w = shape
    if side <= 0 or max(h, w) <= side:
        return (h, w)
    f = side / max(h, w)
    return (max(1, round(h * f)), max(1, round(w * f)))


def reduce(frame: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """``frame`` (h, w) float32 at ``shape`` (area averaging); itself when the shape is equal."""
    if frame.shape == tuple(shape):
        return frame
    return cv2.resize(frame, (shape[1], shape[0]), interpolation=cv2.INTER_AREA)


def enlarge_mask(mask: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """A bool mask brought to ``shape`` (h, w): bilinear on 0/255, thresholded at 128."""
    if mask.shape == tuple(shape):
        return mask
    m = cv2.resize(mask.view(np.uint8) * np.uint8(255), (shape[1], shape[0]), interpolation=cv2.INTER_LINEAR)
    return m >= 128


def enlarge(image: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """A float32 image (score, background) brought to ``shape`` (h, w), bilinear."""
    if image.shape == tuple(shape):
        return image
    return cv2.resize(image, (shape[1], shape[0]), interpolation=cv2.INTER_LINEAR)
