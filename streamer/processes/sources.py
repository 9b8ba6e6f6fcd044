"""Frame sources: camera index, rtsp/http(s) URL, video file, or the built-in synthetic scene.

Every source yields grayscale uint8 frames. Reads from network streams are timed:
a frozen RTSP server can make a read block and still return True (docs/design.md, "Failure handling").

FFmpeg decodes most videos into planar YUV, whose first plane (luma) already is a grayscale image.
OpenCV converts each frame to BGR, and the capture then converted BGR back to gray: reading 1280 x
720 MJPG at 30 fps took 7.5% of a core that way, 4.0% as its luma plane
(``tests/bench/profile_worker.py --process capture``; docs/results.md, "Cameras per core"). For a
video file, :class:`OpenCVSource` therefore reads the luma plane (OpenCV's ``CAP_PROP_CONVERT_RGB``
off) when, on a frame with a picture near the file's start, it reproduces OpenCV's own gray image
(:func:`luma_range`, which also tells the plane's range). Streams and cameras other than
Motion-JPEG (below) keep OpenCV's conversion: OpenCV does not say a stream's range (full or
limited, both "I420"), and two opens of a live stream cannot be made to show the same frame to
compare.

A Motion-JPEG file or stream (every frame a JPEG picture, as USB cameras and many IP cameras
deliver them over HTTP or RTSP) is read further down: its packets undecoded (OpenCV's raw mode,
``CAP_PROP_FORMAT`` -1), each decoded by libjpeg to its luma alone (full range, as JFIF defines
it) and, when the capture reduces the frames to the processing resolution, at a half, a quarter or
an eighth of its sides by the decoder's scaled inverse DCT (``IMREAD_REDUCED_GRAYSCALE``): the
capture then reduces a frame of 480 x 270 instead of 1920 x 1080. The scaled decoding is an
average over each 2 x 2 to 8 x 8 block up to rounding (0.25 grey levels on average, at most 1,
from :func:`core.streaming.resolution.reduce` on the motorway video at 1280 x 720); the decoding
takes 1.1 ms a frame instead of 2.6 at 1280 x 720 (docs/results.md, "Cameras per core").
"""

import contextlib
import os
import time
from collections.abc import Iterator
from typing import TypeGuard

import cv2
import numpy as np

from core.evaluation.scene import SyntheticScene
from core.streaming.resolution import processing_shape

#: OpenCV FFmpeg timeouts for network streams, milliseconds (docs/design.md, "Failure handling"; measured).
OPEN_TIMEOUT_MS = 3000
READ_TIMEOUT_MS = 2000
#: Largest difference, in grey levels, between OpenCV's gray frame and the mapped luma plane at
#: 99% of the pixels, for the luma plane to be used. They differ by rounding and by the chroma's
#: round trip through BGR (clipped there): 99% within 1 level (MJPG) and 2 levels (MPEG-4) on the
#: motorway videos, against 16-19 levels with the other range's table.
LUMA_TOLERANCE = 3.0
#: Frames read at most, at each open of a file, to find one with a picture for that check.
PROBE_FRAMES = 50
#: Grey levels between a frame's 1st and 99th percentiles for it to count as a picture there.
MIN_SPREAD = 24
#: The first two bytes of a JPEG picture (its start-of-image marker).
JPEG_START = b"\xff\xd8"
#: libjpeg's scaled decodings by their reduction factor (each side divided by it), luma only.
JPEG_SCALES = {
    1: cv2.IMREAD_GRAYSCALE,
    2: cv2.IMREAD_REDUCED_GRAYSCALE_2,
    4: cv2.IMREAD_REDUCED_GRAYSCALE_4,
    8: cv2.IMREAD_REDUCED_GRAYSCALE_8,
}
#: The luma plane's two ranges (ITU-R BT.601): full ("JPEG", 0-255, OpenCV's gray as is) and
#: limited ("TV", 16-235, stretched to 0-255 as OpenCV's BGR conversion does).
LUMA_TABLES = {
    "full": np.arange(256, dtype=np.uint8),
    "limited": np.clip(np.round((np.arange(256) - 16) * 255 / 219), 0, 255).astype(np.uint8),
}


class SourceError(RuntimeError):
    """The source could not be opened, or stopped delivering frames."""


class EndOfStream(SourceError):
    """A file source reached its end (and does not loop)."""


class CorruptFrame(SourceError):
    """One frame could not be decoded (a packet that is not a JPEG picture); the next read goes on
    with the frame after it."""


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

    #: Its frames are at their own size (:attr:`OpenCVSource.scale`).
    scale = 1

    def __init__(self, spec: str, width: int | None = None, height: int | None = None) -> None:
        w, h = 320, 240
        if ":" in spec:
            try:
                w, h = (int(v) for v in spec.split(":", 1)[1].lower().split("x"))
            except ValueError:
                raise SourceError(f"synthetic source must be 'synthetic' or 'synthetic:WxH', got {spec!r}") from None
        self.scene = SyntheticScene(height or h, width or w)
        self.t = 0
        #: A generated scene has no frame rate of its own; it is live (frames may be dropped).
        self.fps: float | None = None
        self.live = True

    def describe(self) -> str:
        """What is open, for the capture's log: the scene's size."""
        return f"synthetic scene, {self.scene.width} x {self.scene.height}"

    def read(self) -> np.ndarray:
        """Next frame, shape (h, w), uint8."""
        frame = self.scene.frame_uint8(self.t)
        self.t += 1
        return frame

    def release(self) -> None:
        """Nothing to release."""


def _picture(cap: cv2.VideoCapture, frames: int) -> tuple[np.ndarray | None, int]:
    """The first of the next ``frames`` frames with a picture, as gray, and how many were read.

    A frame counts as a picture when its 1st and 99th percentiles lie :data:`MIN_SPREAD` levels
    apart (a flat frame, as a fade from black, cannot tell the two ranges apart). None when the
    reads fail or show no picture.
    """
    for n in range(1, frames + 1):
        ok, frame = cap.read()
        if not ok or frame is None:
            return None, n
        gray = cv2.cvtColor(frame, cv2.COLOR_BGR2GRAY) if frame.ndim == 3 else frame
        if np.subtract(*np.percentile(gray, [99, 1])) >= MIN_SPREAD:
            return gray, n
    return None, frames


@contextlib.contextmanager
def _quiet_opencv() -> Iterator[None]:
    """OpenCV's log at errors only, for the duration (its level is process-wide)."""
    level = cv2.utils.logging.getLogLevel()
    cv2.utils.logging.setLogLevel(cv2.utils.logging.LOG_LEVEL_ERROR)
    try:
        yield
    finally:
        cv2.utils.logging.setLogLevel(level)


def luma_range(gray: np.ndarray, luma: np.ndarray) -> str | None:
    """The range of a decoder's luma plane, from one frame's OpenCV gray image and its plane.

    Each range's table maps the plane; the one closer to ``gray`` on average is taken when 99% of
    its pixels lie within :data:`LUMA_TOLERANCE` levels of ``gray``.

    Parameters
    ----------
    gray : ndarray, shape (h, w), uint8
        OpenCV's gray image of a frame (``cv2.COLOR_BGR2GRAY`` of its BGR conversion).
    luma : ndarray
        What the same frame is with OpenCV's conversion off; a luma plane is (h, w) uint8.

    Returns
    -------
    str or None
        "full" or "limited" (the key of its lookup table in ``LUMA_TABLES``); None when ``luma``
        has another shape or dtype, or neither range reproduces ``gray`` (another pixel format,
        packed or of 10 bits, whose first plane is not the picture's luma).
    """
    if luma.shape != gray.shape or luma.dtype != np.uint8:
        return None
    diffs = {name: cv2.absdiff(cv2.LUT(luma, table), gray) for name, table in LUMA_TABLES.items()}
    name = min(diffs, key=lambda n: float(diffs[n].mean()))
    return name if np.percentile(diffs[name], 99) <= LUMA_TOLERANCE else None


def _is_jpeg(packet: np.ndarray | None, ok: bool) -> TypeGuard[np.ndarray]:
    """Whether a raw-mode read (``cv2.VideoCapture.read`` with ``CAP_PROP_FORMAT`` -1) gave a
    packet that starts as a JPEG picture (:data:`JPEG_START`)."""
    return ok and packet is not None and packet.dtype == np.uint8 and bytes(packet.ravel()[:2]) == JPEG_START


def jpeg_scale(shape: tuple[int, int], side: int) -> int:
    """The factor by which a JPEG frame of ``shape`` is decoded for a processing side of ``side``.

    The largest of :data:`JPEG_SCALES` that divides both sides of ``shape`` and leaves each at
    least its processing size (:func:`core.streaming.resolution.processing_shape`); 1 when
    ``side`` is 0 or the frame is no larger than ``side``.

    Parameters
    ----------
    shape : (int, int)
        The frame's (h, w), pixels.
    side : int
        ``model.processing_side``, pixels; 0 = frames at their own size.

    Returns
    -------
    int
        1, 2, 4 or 8: 1280 x 720 gives 4 for the default side 360 (decoded at 320 x 180), 1920 x
        1080 gives 4 (480 x 270, reduced after to 320 x 180), 640 x 480 gives 2.
    """
    h, w = shape
    ph, pw = processing_shape(shape, side)
    return max(k for k in JPEG_SCALES if h % k == 0 and w % k == 0 and h // k >= ph and w // k >= pw)


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
    side : int
        The capture's processing side (pixels, 0 for none): a Motion-JPEG source's frames are
        then decoded reduced by :attr:`scale` (module docstring).

    Attributes
    ----------
    live : bool
        False for a file: its frames are all to be processed, none dropped; True for a camera or a stream.
    fps : float or None
        A file's own frame rate, frames per second (None when the file does not give one in
        (0, 1000]); None for a camera or a stream, which set their own pace.
    decoding : str
        How frames are decoded: "bgr" (OpenCV's conversion, then gray), "full" or "limited" (the
        luma plane and its range), "jpeg" (each packet by libjpeg, :func:`jpeg_scale`).
    scale : int
        The factor by which each side of the frames :meth:`read` returns is smaller than the
        source's (1, 2, 4 or 8; 1 unless ``decoding`` is "jpeg").

    Raises
    ------
    SourceError
        If the source cannot be opened.
    """

    def __init__(
        self, spec: str, loop: bool = False, read_timeout_s: float = READ_TIMEOUT_MS / 1000, side: int = 0
    ) -> None:
        self.spec, self.loop, self.read_timeout_s, self.side = spec, loop, read_timeout_s, side
        self.kind = describe(spec)
        self.live = self.kind != "file"
        if self.kind == "file" and not os.path.exists(spec):
            raise SourceError(f"video file {spec!r} does not exist")
        self.decoding, self.scale = "bgr", 1
        self.pending: np.ndarray | None = None
        self.cap = self._open()
        fps = float(self.cap.get(cv2.CAP_PROP_FPS) or 0.0)
        self.fps = fps if self.kind == "file" and 0 < fps <= 1000 else None

    def describe(self) -> str:
        """What is open, for the capture's log: kind, size, a file's frame rate and length, and a
        Motion-JPEG source's decoding."""
        w, h = int(self.cap.get(cv2.CAP_PROP_FRAME_WIDTH)), int(self.cap.get(cv2.CAP_PROP_FRAME_HEIGHT))
        text = f"{self.kind} {self.spec!r}, {w} x {h}"
        if self.kind == "file":
            n = int(self.cap.get(cv2.CAP_PROP_FRAME_COUNT) or 0)
            rate = f"{self.fps:g} fps" if self.fps else "no frame rate given"
            text += f" at {rate}" + (f", {n} frames" if n > 0 else "")
        if self.decoding == "jpeg":
            text += ", Motion-JPEG decoded to luma" + (f" at 1/{self.scale} of each side" if self.scale > 1 else "")
        return text

    def _capture(self, convert: bool = True, raw: bool = False) -> cv2.VideoCapture:
        """A new ``cv2.VideoCapture`` of the source; ``convert`` False asks FFmpeg for its own
        frames, ``raw`` for its packets undecoded."""
        if self.kind == "camera":
            return cv2.VideoCapture(int(self.spec))
        params = [cv2.CAP_PROP_N_THREADS, 1]  # one decoding thread: the other cores are the workers'
        if raw:
            params += [cv2.CAP_PROP_FORMAT, -1]
        elif not convert:
            params += [cv2.CAP_PROP_CONVERT_RGB, 0]
        if self.kind == "stream":
            if "OPENCV_FFMPEG_CAPTURE_OPTIONS" not in os.environ:
                os.environ["OPENCV_FFMPEG_CAPTURE_OPTIONS"] = "rtsp_transport;tcp|analyzeduration;200000"
            params += [cv2.CAP_PROP_OPEN_TIMEOUT_MSEC, OPEN_TIMEOUT_MS, cv2.CAP_PROP_READ_TIMEOUT_MSEC, READ_TIMEOUT_MS]
        if convert:
            return cv2.VideoCapture(self.spec, cv2.CAP_FFMPEG, params)
        with _quiet_opencv():  # "BGR conversion turned OFF": luma_range decides, not OpenCV's warning
            return cv2.VideoCapture(self.spec, cv2.CAP_FFMPEG, params)

    def _open(self) -> cv2.VideoCapture:
        self.decoding, self.scale, self.pending = "bgr", 1, None
        cap = self._capture()
        if not cap.isOpened() and self.kind == "file":  # not a video FFmpeg reads: OpenCV's other backends
            cap.release()
            cap = cv2.VideoCapture(self.spec)
            if cap.isOpened():
                return cap
        if not cap.isOpened():
            cap.release()
            raise SourceError(f"cannot open {self.kind} source {self.spec!r}")
        if self.kind == "stream":
            return self._stream(cap)
        if self.kind != "file":
            return cap
        # A file: its first frame with a picture both ways; the luma plane's capture when it
        # reproduces OpenCV's gray image there (module docstring), from the file's start again.
        gray, n = _picture(cap, PROBE_FRAMES)
        cap.release()
        if gray is not None and self._jpeg(gray, n):
            return self._capture(raw=True)
        if gray is not None:
            plain = self._capture(convert=False)
            with _quiet_opencv():
                for _ in range(n):  # the same frame of the file, as the plane
                    ok, luma = plain.read()
            plain.release()
            if ok and luma is not None:
                self.decoding = luma_range(gray, luma) or "bgr"
        return self._capture(convert=self.decoding == "bgr")

    def _stream(self, cap: cv2.VideoCapture) -> cv2.VideoCapture:
        """An open stream's capture: as it is, or, for Motion-JPEG (FFmpeg's codec tag "MJPG", an
        HTTP or RTSP camera's JPEG pictures), a second open in raw mode whose first packet is a
        JPEG picture that libjpeg decodes (kept for the first read). JPEG's luma is full range by
        definition (JFIF), so no frame has to be compared."""
        if int(cap.get(cv2.CAP_PROP_FOURCC)).to_bytes(4, "little") != b"MJPG":
            return cap
        shape = (int(cap.get(cv2.CAP_PROP_FRAME_HEIGHT)), int(cap.get(cv2.CAP_PROP_FRAME_WIDTH)))
        raw = self._capture(raw=True)
        ok, packet = raw.read() if raw.isOpened() else (False, None)
        scale = jpeg_scale(shape, self.side)
        # libjpeg must read this camera's pictures
        if not _is_jpeg(packet, ok) or cv2.imdecode(packet, JPEG_SCALES[scale]) is None:
            raw.release()
            return cap
        cap.release()
        self.decoding, self.scale, self.pending = "jpeg", scale, packet
        return raw

    def _jpeg(self, gray: np.ndarray, n: int) -> bool:
        """Whether the file's ``n``-th packet is a JPEG picture whose luma is ``gray`` (its frame as
        OpenCV converts it, within :data:`LUMA_TOLERANCE`); if so, decode by packets from now on."""
        raw = self._capture(raw=True)
        with _quiet_opencv():
            for _ in range(n):
                ok, packet = raw.read()
        raw.release()
        if not _is_jpeg(packet, ok):
            return False
        luma = cv2.imdecode(packet, cv2.IMREAD_GRAYSCALE)
        if luma is None or luma_range(gray, luma) != "full":
            return False
        self.decoding, self.scale = "jpeg", jpeg_scale(gray.shape, self.side)
        return True

    def read(self) -> np.ndarray:
        """Next frame as grayscale, shape (h / scale, w / scale), uint8 (:attr:`scale`).

        Raises
        ------
        EndOfStream
            A file ended and ``loop`` is off.
        CorruptFrame
            This frame's packet does not decode; the source stays open.
        SourceError
            A read failed or took longer than ``read_timeout_s``.
        """
        t0 = time.monotonic()
        ok, frame = self._read()
        took = time.monotonic() - t0
        if not ok and self.kind == "file":
            if not self.loop:
                raise EndOfStream(f"end of file {self.spec!r}")
            self.cap.release()
            self.cap = self._open()
            ok, frame = self._read()
        if not ok or frame is None:
            raise SourceError(f"read from {self.kind} source {self.spec!r} failed")
        if self.kind in ("stream", "camera") and took > self.read_timeout_s:
            raise SourceError(
                f"read from {self.spec!r} took {took:.1f} s (> {self.read_timeout_s:.1f} s): stream stalled"
            )
        if self.decoding == "jpeg":
            picture = cv2.imdecode(frame, JPEG_SCALES[self.scale])
            if picture is None:
                raise CorruptFrame(f"a frame of {self.spec!r} is not a JPEG picture (a corrupt packet)")
            return picture
        if self.decoding == "limited":
            return cv2.LUT(frame, LUMA_TABLES["limited"])
        if self.decoding == "full":
            return frame
        if frame.ndim == 3:
            frame = cv2.cvtColor(frame, cv2.COLOR_BGR2GRAY)
        return frame

    def _read(self) -> tuple[bool, np.ndarray | None]:
        if self.pending is not None:  # a stream's first packet, read when it was opened
            packet, self.pending = self.pending, None
            return True, packet
        if self.decoding == "bgr":
            return self.cap.read()
        with _quiet_opencv():  # OpenCV warns of the unconverted format at every frame
            return self.cap.read()

    def release(self) -> None:
        """Release the capture (a VideoCapture never recovers after a failure)."""
        self.cap.release()


def open_source(
    spec: str, loop: bool = False, width: int | None = None, height: int | None = None, side: int = 0
) -> SyntheticSource | OpenCVSource:
    """Open a source by its spec; see :func:`describe`. ``side`` as :class:`OpenCVSource`'s (0
    when ``width`` and ``height`` resize the frames: those are made from the whole frame).

    Raises
    ------
    SourceError
        If it cannot be opened.
    """
    if describe(spec) == "synthetic":
        return SyntheticSource(spec, width, height)
    return OpenCVSource(spec, loop=loop, side=0 if width and height else side)


def resize(frame: np.ndarray, width: int | None, height: int | None) -> np.ndarray:
    """Resize to ``width x height`` pixels when both are set (INTER_AREA), else return as is."""
    if width and height and frame.shape != (height, width):
        return cv2.resize(frame, (width, height), interpolation=cv2.INTER_AREA)
    return np.ascontiguousarray(frame)
