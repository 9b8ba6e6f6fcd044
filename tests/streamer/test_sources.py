"""Frame sources: the luma plane read in place of OpenCV's BGR conversion (issue 26), and a
Motion-JPEG file's or stream's packets decoded by libjpeg at the processing size (issue 46), on real
videos and real servers (gst-rtsp-server; an HTTP camera, tests/streamer/mjpeg_http_server.py).

The videos are written here with OpenCV's own encoders from the synthetic scene (a user's clone
has them too): MJPG (full range, "yuvj420p", every frame a JPEG picture) and MPEG-4 part 2
(limited range, "yuv420p"), as the motorway video and most RTSP cameras' H.264 are.
"""

import pathlib
import subprocess
import sys

import cv2
import numpy as np
import pytest
from conftest import MOTORWAY, need
from helpers import rtsp_server

from core.evaluation.scene import SyntheticScene
from core.streaming.resolution import processing_shape, reduce
from streamer.processes.sources import LUMA_TOLERANCE, CorruptFrame, OpenCVSource, jpeg_scale, luma_range

FRAMES = 40


def _video(tmp_path, fourcc, name, size=(320, 240)):
    """A video of the synthetic scene (its moving objects on a textured background), ``size`` (w, h)."""
    path = tmp_path / name
    scene = SyntheticScene(size[1], size[0])
    out = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*fourcc), 25, size)
    assert out.isOpened(), f"OpenCV cannot write {fourcc}"
    for t in range(FRAMES):
        out.write(cv2.cvtColor(scene.frame_uint8(t), cv2.COLOR_GRAY2BGR))
    out.release()
    return path


def _opencv_gray(path):
    """Every frame as OpenCV's BGR conversion and ``COLOR_BGR2GRAY`` give it (what the capture did before)."""
    cap, frames = cv2.VideoCapture(str(path)), []
    while True:
        ok, bgr = cap.read()
        if not ok:
            return frames
        frames.append(cv2.cvtColor(bgr, cv2.COLOR_BGR2GRAY))


@pytest.mark.parametrize(("fourcc", "decoding"), [("MJPG", "jpeg"), ("FMP4", "limited")])
def test_a_file_is_read_from_its_luma_plane_as_opencv_would_convert_it(tmp_path, fourcc, decoding):
    path = _video(tmp_path, fourcc, f"scene_{fourcc}.avi")
    want = _opencv_gray(path)
    source = OpenCVSource(str(path), loop=True, side=360)
    assert source.decoding == decoding and source.scale == 1  # 320 x 240: nothing to reduce
    # twice through the file: the loop's reopen decides again and loses no frame
    got = [source.read() for _ in range(2 * len(want))]
    source.release()
    assert len(want) == FRAMES
    for i, frame in enumerate(got):
        ref = want[i % len(want)]
        assert frame.shape == ref.shape and frame.dtype == np.uint8
        diff = cv2.absdiff(frame, ref)
        # rounding, and the chroma's round trip through BGR (clipped in BGR, not in the luma):
        # measured max 4 (MJPG) and 8 (MPEG-4) levels, mean 0.8 and 1.2 on the motorway videos
        assert diff.mean() < 1.5 and diff.max() <= 10, (i, diff.mean(), diff.max())


@pytest.mark.parametrize(
    ("size", "side", "scale"),
    [((640, 480), 360, 2), ((1280, 720), 360, 4), ((1920, 1080), 360, 4), ((640, 480), 0, 1)],
)
def test_a_motion_jpeg_file_is_decoded_reduced_toward_the_processing_size(tmp_path, size, side, scale):
    """Each packet decoded by libjpeg at 1/scale of the frame's sides: once reduced to the processing
    size, the frame the model gets is what OpenCV's own decoding reduced would give it."""
    path = _video(tmp_path, "MJPG", "scene.avi", size)
    want = _opencv_gray(path)
    h, w = size[1], size[0]
    assert jpeg_scale((h, w), side) == scale
    source = OpenCVSource(str(path), loop=True, side=side)
    assert source.decoding == "jpeg" and source.scale == scale
    assert source.describe().endswith(
        "Motion-JPEG decoded to luma" + (f" at 1/{scale} of each side" if scale > 1 else "")
    )
    got = [source.read() for _ in range(2 * len(want))]  # the loop's reopen keeps the scale
    source.release()
    shape = processing_shape((h, w), side)
    for i, frame in enumerate(got):
        assert frame.shape == (h // scale, w // scale) and frame.dtype == np.uint8
        diff = cv2.absdiff(reduce(frame, shape), reduce(want[i % len(want)], shape))
        # the scaled inverse DCT against area averaging, and OpenCV's chroma round trip: measured
        # mean 0.7-1.0 and max 2-6 levels at these sizes
        assert diff.mean() < 1.5 and diff.max() <= 10, (i, diff.mean(), diff.max())


def test_a_corrupt_motion_jpeg_frame_is_skipped_and_the_file_goes_on(tmp_path):
    """A packet that is not a JPEG picture raises CorruptFrame for that frame alone (OpenCV's own
    decoding ends the file there); the next read is the next frame."""
    path = _video(tmp_path, "MJPG", "scene.avi")
    want = _opencv_gray(path)
    data = bytearray(path.read_bytes())
    starts = [i for i in range(len(data) - 2) if data[i : i + 3] == b"\xff\xd8\xff"]
    assert len(starts) == FRAMES
    data[starts[5] : starts[5] + 2] = b"\x00\x00"  # frame 5's start-of-image marker
    path.write_bytes(data)
    source = OpenCVSource(str(path))
    assert source.decoding == "jpeg"
    got = [source.read() for _ in range(5)]
    with pytest.raises(CorruptFrame, match="not a JPEG picture"):
        source.read()
    got += [source.read() for _ in range(5)]
    source.release()
    for frame, ref in zip(got, want[:5] + want[6:11], strict=True):
        assert cv2.absdiff(frame, ref).mean() < 1.5


@pytest.mark.shared_data
def test_the_real_motorway_video_is_read_from_its_luma_plane():
    source = OpenCVSource(str(need(MOTORWAY)))
    assert source.decoding == "limited"  # MPEG-4 part 2, TV range
    want = _opencv_gray(MOTORWAY)
    diffs = [cv2.absdiff(source.read(), ref) for ref in want]
    source.release()
    assert np.mean([d.mean() for d in diffs]) < 1.5 and max(d.max() for d in diffs) <= 10


def test_the_luma_plane_is_refused_unless_it_reproduces_opencvs_gray():
    gray = SyntheticScene(240, 320).frame_uint8(5)
    assert luma_range(gray, gray) == "full"
    assert luma_range(gray, np.round(16 + gray * (219 / 255)).astype(np.uint8)) == "limited"
    assert luma_range(gray, gray[:, :-2]) is None  # another shape (a padded plane)
    assert luma_range(gray, gray.astype(np.uint16) * 4) is None  # a 10-bit plane
    # right values, wrong places (a plane of another layout)
    assert luma_range(gray, np.random.default_rng(0).permutation(gray.ravel()).reshape(gray.shape)) is None
    # 2 levels off passes (rounding, chroma); LUMA_TOLERANCE + 2 does not
    assert luma_range(gray, cv2.add(gray, 2)) is not None
    assert luma_range(gray, cv2.add(gray, int(LUMA_TOLERANCE) + 2)) is None


def test_a_motion_jpeg_stream_is_decoded_by_packets_reduced_toward_the_processing_size():
    """A real RTSP server sending each 640 x 480 frame as a JPEG picture (RFC 2435): the stream's
    packets are decoded at half their sides, as the file's are, from its first frame on."""
    server, port = rtsp_server("testsrc:640x480", codec="jpeg")
    try:
        source = OpenCVSource(f"rtsp://127.0.0.1:{port}/test", side=360)
        frames = [source.read() for _ in range(10)]
        description = source.describe()
        reference = cv2.VideoCapture(f"rtsp://127.0.0.1:{port}/test")
        ok, bgr = reference.read()
        reference.release()
        source.release()
    finally:
        server.kill()
        server.wait()
    assert source.decoding == "jpeg" and source.scale == 2
    assert description.endswith("640 x 480, Motion-JPEG decoded to luma at 1/2 of each side")
    assert all(f.shape == (240, 320) and f.dtype == np.uint8 for f in frames)
    # GStreamer's moving ball over a still pattern: every part but the ball is the same picture as
    # OpenCV's own decoding of a later frame, reduced (the ball covers under 5% of the frame)
    assert ok
    diff = cv2.absdiff(frames[-1], reduce(cv2.cvtColor(bgr, cv2.COLOR_BGR2GRAY), (240, 320)))
    assert np.median(diff) <= 1 and np.mean(diff <= 3) > 0.9, (np.median(diff), np.mean(diff <= 3))


def test_a_motion_jpeg_http_camera_is_decoded_by_packets():
    """A real HTTP server sending the synthetic scene at 1280 x 720 as multipart JPEG pictures, as
    many IP cameras do: decoded at a quarter of its sides, each frame one of the scene's, reduced."""
    server = subprocess.Popen(
        [sys.executable, str(pathlib.Path(__file__).with_name("mjpeg_http_server.py")), "1280x720"],
        stdout=subprocess.PIPE,
    )
    try:
        port = int(server.stdout.readline())
        source = OpenCVSource(f"http://127.0.0.1:{port}/video", side=360)
        frames = [source.read() for _ in range(5)]
        description = source.describe()
        source.release()
    finally:
        server.kill()
        server.wait()
    assert source.decoding == "jpeg" and source.scale == 4
    assert description.endswith("1280 x 720, Motion-JPEG decoded to luma at 1/4 of each side"), description
    scene = SyntheticScene(720, 1280)
    first = [reduce(scene.frame_uint8(t), (180, 320)) for t in range(40)]
    for i, frame in enumerate(frames):
        assert frame.shape == (180, 320) and frame.dtype == np.uint8
        # the server starts at the scene's frame 0 for this client: frame i is the scene's frame i,
        # within the JPEG's loss (measured: mean difference 0.27 levels; 2.2 or more to any other)
        diffs = [cv2.absdiff(frame, ref).mean() for ref in first]
        assert int(np.argmin(diffs)) == i and diffs[i] < 1.0, (i, np.argmin(diffs), min(diffs))


def test_a_stream_keeps_opencvs_conversion():
    """A real RTSP server's H.264: two opens of a live stream cannot be compared frame for frame."""
    source_video = str(MOTORWAY) if MOTORWAY.exists() else "testsrc"
    server, port = rtsp_server(source_video)
    try:
        source = OpenCVSource(f"rtsp://127.0.0.1:{port}/test")
        frames = [source.read() for _ in range(3)]
        source.release()
    finally:
        server.kill()
        server.wait()
    assert source.decoding == "bgr"
    assert all(f.shape == (240, 320) and f.dtype == np.uint8 for f in frames)
