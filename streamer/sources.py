"""Frame sources: camera index, rtsp/http(s) URL, video file, or the built-in synthetic scene.

Every source yields grayscale uint8 frames. Reads from network streams are timed:
a frozen RTSP server can make a read block and still return True (docs/design.md, "Failure handling").
"""

import os
import time

import cv2
import numpy as np

from core.evaluation.scene import SyntheticScene

#: OpenCV FFmpeg timeouts for network streams, milliseconds (docs/design.md, "Failure handling"; measured).
OPEN_TIMEOUT_MS = 3000
READ_TIMEOUT_MS = 2000


class SourceError(RuntimeError):
    """The source could not be opened, or stopped delivering frames."""


class EndOfStream(SourceError):
    """A file source reached its end (and does not loop)."""


def describe(spec: str) -> str:
    """Kind of a source spec: "synthetic", "camera", "stream" or "file"."""
    if spec == "synthetic" or spec.startswith("synthetic:"):
        return "synthetic"
    if spec.isdigit():
        return "camera"
    if spec.split("://", 1)[0].lower() in ("rtsp", "rtsps", "http", "https"):
        return "stream"
    return "file"


class SyntheticSource:
    """The project's synthetic scene as a source (:class:`core.evaluation.scene.SyntheticScene`).

    ``synthetic`` or ``synthetic:WxH``; frame ``t`` is deterministic, so ground
    truth for any frame is available from the scene.
    """

    def __init__(self, spec: str, width: int | None = None, height: int | None = None) -> None:
        w, h = 320, 240
        if ":" in spec:
            try:
                w, h = (int(v) for v in spec.split(":", 1)[1].lower().split("x"))
            except ValueError:
                raise SourceError(f"synthetic source must be 'synthetic' or 'synthetic:WxH', got {spec!r}") from None
        self.scene = SyntheticScene(height or h, width or w)
        self.t = 0

    def read(self) -> np.ndarray:
        """Next frame, shape (h, w), uint8."""
        frame = self.scene.frame_uint8(self.t)
        self.t += 1
        return frame

    def release(self) -> None:
        """Nothing to release."""


class OpenCVSource:
    """A camera, stream or file through ``cv2.VideoCapture``.

    Parameters
    ----------
    spec : str
        Device index ("0"), URL (rtsp://, http(s)://) or file path.
    loop : bool
        Files only: start again at the end instead of raising EndOfStream.
    read_timeout_s : float
        A read that takes longer than this (seconds) counts as a failure.

    Raises
    ------
    SourceError
        If the source cannot be opened.
    """

    def __init__(self, spec: str, loop: bool = False, read_timeout_s: float = READ_TIMEOUT_MS / 1000) -> None:
        self.spec, self.loop, self.read_timeout_s = spec, loop, read_timeout_s
        self.kind = describe(spec)
        if self.kind == "file" and not os.path.exists(spec):
            raise SourceError(f"video file {spec!r} does not exist")
        self.cap = self._open()

    def _open(self) -> cv2.VideoCapture:
        if self.kind == "camera":
            cap = cv2.VideoCapture(int(self.spec))
        elif self.kind == "stream":
            if "OPENCV_FFMPEG_CAPTURE_OPTIONS" not in os.environ:
                os.environ["OPENCV_FFMPEG_CAPTURE_OPTIONS"] = "rtsp_transport;tcp|analyzeduration;200000"
            cap = cv2.VideoCapture(
                self.spec,
                cv2.CAP_FFMPEG,
                [
                    cv2.CAP_PROP_OPEN_TIMEOUT_MSEC,
                    OPEN_TIMEOUT_MS,
                    cv2.CAP_PROP_READ_TIMEOUT_MSEC,
                    READ_TIMEOUT_MS,
                    cv2.CAP_PROP_N_THREADS,
                    1,
                ],
            )
        else:
            cap = cv2.VideoCapture(self.spec)
        if not cap.isOpened():
            cap.release()
            raise SourceError(f"cannot open {self.kind} source {self.spec!r}")
        return cap

    def read(self) -> np.ndarray:
        """Next frame as grayscale, shape (h, w), uint8.

        Raises
        ------
        EndOfStream
            A file ended and ``loop`` is off.
        SourceError
            A read failed or took longer than ``read_timeout_s``.
        """
        t0 = time.monotonic()
        ok, frame = self.cap.read()
        took = time.monotonic() - t0
        if not ok and self.kind == "file":
            if not self.loop:
                raise EndOfStream(f"end of file {self.spec!r}")
            self.cap.release()
            self.cap = self._open()
            ok, frame = self.cap.read()
        if not ok or frame is None:
            raise SourceError(f"read from {self.kind} source {self.spec!r} failed")
        if self.kind in ("stream", "camera") and took > self.read_timeout_s:
            raise SourceError(
                f"read from {self.spec!r} took {took:.1f} s (> {self.read_timeout_s:.1f} s): stream stalled"
            )
        if frame.ndim == 3:
            frame = cv2.cvtColor(frame, cv2.COLOR_BGR2GRAY)
        return frame

    def release(self) -> None:
        """Release the capture (a VideoCapture never recovers after a failure)."""
        self.cap.release()


def open_source(
    spec: str, loop: bool = False, width: int | None = None, height: int | None = None
) -> SyntheticSource | OpenCVSource:
    """Open a source by its spec; see :func:`describe`.

    Raises
    ------
    SourceError
        If it cannot be opened.
    """
    if describe(spec) == "synthetic":
        return SyntheticSource(spec, width, height)
    return OpenCVSource(spec, loop=loop)


def resize(frame: np.ndarray, width: int | None, height: int | None) -> np.ndarray:
    """Resize to ``width x height`` pixels when both are set (INTER_AREA), else return as is."""
    if width and height and frame.shape != (height, width):
        return cv2.resize(frame, (width, height), interpolation=cv2.INTER_AREA)
    return np.ascontiguousarray(frame)
