"""The live view: a page that shows what the worker sees, for a person tuning a camera.

Served by the worker itself, which alone holds both the frame and its mask (docs/design.md,
"Live view"), on its own port, loopback by default:

- ``/``: the page. It shows the MJPEG stream and, polled from ``/state.json`` twice a second,
  the fps, the latency, the zones' fractions and the last events;
- ``/stream.mjpeg``: ``multipart/x-mixed-replace`` JPEG frames, at most ``preview_fps`` a
  second to each viewer: the frame in grey, the mask overlaid in red, region boxes in green,
  zones outlined in yellow with their names, ignored areas in grey;
- ``/state.json``: the same facts as JSON.

The HTTP server is the standard library's WSGI server, threaded, as for ``/metrics``
(:func:`streamer.ops.metrics.start_http`); no MJPEG library on PyPI is better kept than the 10 lines
of multipart below. With no viewer connected, :meth:`LiveView.offer` only counts the frame: no
copy, no drawing, no JPEG (docs/results.md, "Motion and live view" has the figures).
"""

from __future__ import annotations

import collections
import functools
import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

import cv2
import numpy as np

if TYPE_CHECKING:
    from prometheus_client import Gauge

    from streamer.motion.stage import MotionResult

#: JPEG quality of the preview (OpenCV's IMWRITE_JPEG_QUALITY, 0-100).
JPEG_QUALITY = 80
#: Events the page lists, newest first.
EVENTS_SHOWN = 20
#: Seconds a stream waits for a new frame before it sends the last one again: the write is how a
#: viewer who left is noticed (a paused camera would otherwise hold the stream open for ever).
WAIT_S = 1.0
#: Colours (BGR): the mask's overlay, region boxes, zone outlines, ignored areas.
MASK_BGR, REGION_BGR, ZONE_BGR, IGNORE_BGR = (0, 0, 255), (0, 255, 0), (0, 255, 255), (128, 128, 128)

BOUNDARY = "kdrsdl-frame"

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>kdrsdl live view: {camera}</title>
<style>
body {{ font: 14px system-ui, sans-serif; margin: 12px; background: #111; color: #ddd; }}
#stream {{ image-rendering: pixelated; display: block; }}
#stats {{ margin: 8px 0; }} li {{ font-family: monospace; }}
</style></head>
<body>
<h1>camera {camera}</h1>
<img id="stream" src="stream.mjpeg" alt="frame with the foreground mask overlaid">
<div id="stats">waiting for frames</div>
<h2>last events</h2><ul id="events"></ul>
<script>
function render(s) {{
  const zones = Object.entries(s.zones).map(([z, f]) => `${{z}} ${{(100 * f).toFixed(1)}}%`).join(", ");
  document.getElementById("stats").textContent =
    `${{s.fps.toFixed(1)}} fps, latency ${{(1000 * s.latency_s).toFixed(0)}} ms, ` +
    `foreground ${{(100 * s.fg_ratio).toFixed(1)}}%` + (zones ? `, zones: ${{zones}}` : "");
  document.getElementById("events").innerHTML = s.events.map(e =>
    `<li class="event">${{new Date(e.t_capture_ns / 1e6).toLocaleTimeString()}} ${{e.event}} ${{e.zone}}` +
    (e.reason ? ` (${{e.reason}}, ${{e.duration_s.toFixed(1)}} s)` : "") + `</li>`).join("");
}}
async function poll() {{
  try {{ render(await (await fetch("state.json", {{cache: "no-store"}})).json()); }} catch (e) {{}}
  setTimeout(poll, 500);
}}
poll();
</script>
</body></html>
"""


@dataclass(frozen=True)
class _Shown:
    """The last frame offered while someone watched."""

    seq: int
    frame: np.ndarray
    fgmask: np.ndarray
    boxes: list[tuple[int, int, int, int]]
    input_shape: tuple[int, int]


class LiveView:
    """The live view of one camera: what the worker offers per frame, and the WSGI app that shows it.

    Parameters
    ----------
    camera : str
    ignore : sequence of polygons
        Ignored areas, (x, y) in input pixels (drawn in grey).
    zones : dict of str to polygon
        Named zones (outlined in yellow with their names).
    preview_fps : float
        JPEG frames a second sent to each viewer, at most (> 0).
    viewers : prometheus_client Gauge, optional
        Set to the number of streams open.
    """

    def __init__(
        self,
        camera: str,
        ignore: Sequence[Sequence[Sequence[float]]],
        zones: Mapping[str, Sequence[Sequence[float]]],
        preview_fps: float,
        viewers: Optional[Gauge] = None,
    ) -> None:
        self.camera, self.period = camera, 1.0 / preview_fps
        self._ignore = [np.round(np.asarray(p, float)).astype(np.int32) for p in ignore]
        self._zones = {n: np.round(np.asarray(p, float)).astype(np.int32) for n, p in zones.items()}
        self._gauge = viewers
        self._cond = threading.Condition()
        self._shown: Optional[_Shown] = None
        self._jpeg: tuple[int, bytes] = (-1, b"")
        self._times: collections.deque[float] = collections.deque(maxlen=31)
        self._facts: dict[str, Any] = {"latency_s": 0.0, "fg_ratio": 0.0, "zones": {}}
        self._events: collections.deque[dict] = collections.deque(maxlen=EVENTS_SHOWN)
        self.viewers = 0
        self.closed = False

    # ----------------------------------------------------------------- the worker's side
    def offer(
        self,
        seq: int,
        frame: np.ndarray,
        motion: MotionResult,
        latency_s: float,
        input_shape: tuple[int, int] | None = None,
    ) -> None:
        """One published mask: its frame (h, w) uint8, the motion result and its latency (seconds).

        ``input_shape`` is the frame's size in input pixels, those of the polygons and boxes (the
        source's when the capture reduced the frame; default the frame's own): the preview is
        drawn at that size. References, not copies, are kept (the frame and the mask are not written to afterwards),
        so that a viewer who connects sees the last frame at once; without a viewer nothing is
        drawn or encoded.
        """
        self._times.append(time.monotonic())
        self._facts = {"latency_s": latency_s, "fg_ratio": motion.fg_ratio, "zones": motion.zones}
        shape = (frame.shape[0], frame.shape[1]) if input_shape is None else input_shape
        self._shown = _Shown(seq, frame, motion.fgmask, [r.box for r in motion.regions.listed], shape)
        if self.viewers:
            with self._cond:
                self._cond.notify_all()

    def note(self, header: dict) -> None:
        """An event published (its header), for the page's list."""
        self._events.appendleft(header)

    def close(self) -> None:
        """End every stream (the worker stops)."""
        with self._cond:
            self.closed = True
            self._cond.notify_all()

    # ----------------------------------------------------------------- the viewers' side
    def state(self) -> dict:
        """``/state.json``: camera, fps (over the last 30 masks), latency_s, fg_ratio, zones, events, viewers."""
        t = list(self._times)
        fps = (len(t) - 1) / (t[-1] - t[0]) if len(t) > 1 and t[-1] > t[0] else 0.0
        return {"camera": self.camera, "fps": fps, **self._facts, "events": list(self._events), "viewers": self.viewers}

    def render(self, shown: _Shown) -> np.ndarray:
        """The preview image (h, w, 3) uint8 BGR of a frame: mask in red, boxes, zones, ignored areas."""
        frame = shown.frame
        if frame.shape != shown.input_shape:  # reduced by the capture: drawn at the input size
            frame = cv2.resize(frame, (shown.input_shape[1], shown.input_shape[0]), interpolation=cv2.INTER_LINEAR)
        bgr = cv2.cvtColor(frame, cv2.COLOR_GRAY2BGR)
        mask = shown.fgmask
        if mask.shape != frame.shape:
            mask = cv2.resize(mask, (frame.shape[1], frame.shape[0]), interpolation=cv2.INTER_NEAREST)
        tinted = cv2.addWeighted(bgr, 0.5, np.full_like(bgr, MASK_BGR), 0.5, 0)
        np.copyto(bgr, tinted, where=(mask > 0)[..., None])
        for poly in self._ignore:
            cv2.polylines(bgr, [poly], True, IGNORE_BGR, 1)
        for name, poly in self._zones.items():
            cv2.polylines(bgr, [poly], True, ZONE_BGR, 2)
            x, y = poly.min(axis=0)
            cv2.putText(bgr, name, (int(x) + 3, int(y) + 14), cv2.FONT_HERSHEY_SIMPLEX, 0.45, ZONE_BGR, 1, cv2.LINE_AA)
        for x, y, w, h in shown.boxes:
            cv2.rectangle(bgr, (x, y), (x + w - 1, y + h - 1), REGION_BGR, 1)
        return bgr

    def _jpeg_of(self, shown: _Shown) -> bytes:
        """The JPEG of ``shown``, encoded once however many viewers ask."""
        seq, data = self._jpeg
        if seq != shown.seq:
            ok, buf = cv2.imencode(".jpg", self.render(shown), [cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY])
            data = buf.tobytes() if ok else b""
            self._jpeg = (shown.seq, data)
        return data

    def stream(self) -> Iterator[bytes]:
        """The parts of one viewer's MJPEG stream, at most one per ``period`` seconds."""
        with self._cond:
            self.viewers += 1
        self._set_gauge()
        try:
            last, due = -1, 0.0
            # Each part ends with the next boundary: a browser shows a part when it sees the
            # boundary after it, so a part that waited for the next frame would show late.
            yield f"--{BOUNDARY}\r\n".encode()
            while not self.closed:
                with self._cond:
                    news = self._cond.wait_for(functools.partial(self._news, last), WAIT_S)
                    shown = self._shown
                if self.closed or shown is None:
                    continue
                wait = due - time.monotonic()
                if news and wait > 0:
                    time.sleep(wait)
                    continue  # take the newest frame after the pause
                last, due = shown.seq, time.monotonic() + self.period
                jpeg = self._jpeg_of(shown)
                head = f"Content-Type: image/jpeg\r\nContent-Length: {len(jpeg)}\r\n\r\n".encode()
                yield head + jpeg + f"\r\n--{BOUNDARY}\r\n".encode()
        finally:
            with self._cond:
                self.viewers -= 1
            self._set_gauge()

    def _news(self, seen: int) -> bool:
        """Closed, or a frame newer than ``seen`` to show."""
        return self.closed or (self._shown is not None and self._shown.seq != seen)

    def _set_gauge(self) -> None:
        if self._gauge is not None:
            self._gauge.set(self.viewers)

    def app(self, environ: dict, start_response: Callable[..., Any]) -> Iterator[bytes] | list[bytes]:
        """The WSGI application: ``/``, ``/stream.mjpeg``, ``/state.json``; 404 otherwise."""
        path = environ.get("PATH_INFO", "/")
        nocache = ("Cache-Control", "no-store")
        if path == "/":
            start_response("200 OK", [("Content-Type", "text/html; charset=utf-8"), nocache])
            return [PAGE.format(camera=self.camera).encode()]
        if path == "/state.json":
            start_response("200 OK", [("Content-Type", "application/json"), nocache])
            return [json.dumps(self.state()).encode()]
        if path == "/stream.mjpeg":
            start_response("200 OK", [("Content-Type", f"multipart/x-mixed-replace; boundary={BOUNDARY}"), nocache])
            return self.stream()
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"not found: try / (the page), /stream.mjpeg or /state.json\n"]
