"""The live view in a real headless browser (issue 24): Debian's Chromium driven by Playwright.

A real worker with a zone and its view port, fed the generated scene of test_events (a white
square crossing the zone "door"); the page is loaded, then screenshotted.
"""

import json
import os
import socket
import time
import urllib.error
import urllib.request

import numpy as np
import pytest
from helpers import free_port, metric, scrape, wait_for
from test_events import DOOR, ENTER, ROW, SIDE, SPEED, Run, frame

CHROMIUM = "/usr/bin/chromium"
#: The flags this machine's closed network needs (the workplace's notes on headless Chromium).
FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip


@pytest.fixture
def browser():
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} is not installed (Debian package chromium; .ci/run installs it as root)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is in the test extra")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield b
        b.close()


def viewers(port):
    """The worker's ``kdrsdl_view_viewers``, or None when /metrics did not answer in time."""
    s = scrape(port)
    return None if s is None else metric(s, "kdrsdl_view_viewers", camera="cam1")


def _pixels(png):
    import cv2

    return cv2.imdecode(np.frombuffer(png, np.uint8), cv2.IMREAD_COLOR)  # BGR


def test_the_page_shows_the_mask_in_colour_the_zone_and_the_events(tmp_path, browser):
    view = free_port()
    run = Run(tmp_path, "--view-port", view, "--preview-fps", 10)
    for t in range(ENTER):  # the background, no object yet
        run.send(t)
    page = browser.new_page(viewport={"width": 900, "height": 700})
    page.goto(f"http://127.0.0.1:{view}/", wait_until="domcontentloaded")  # the MJPEG image never "loads"
    wait_for(lambda: viewers(run.port) == 1, 20, "the page's stream")
    # the square enters the door: frames until it is well inside
    inside = ENTER + 100 // SPEED + 3
    for t in range(ENTER, inside + 1):
        run.send(t)
        time.sleep(0.02)
    page.wait_for_selector("li.event", timeout=10_000)
    assert "start door" in page.inner_text("#events")
    _, (x, y, w, h) = frame(inside)

    def shot():
        img = _pixels(page.locator("#stream").screenshot())
        # the frame at its own size (the element may start at a fractional row: one more row captured)
        assert img.shape[0] - 120 in (0, 1) and img.shape[1] - 160 in (0, 1), img.shape
        return img[:120, :160]

    def redness(img):
        b, g, r = img[y + 4 : y + h - 4, x + 4 : x + w - 4].reshape(-1, 3).astype(int).T
        return np.median(r - np.maximum(g, b))

    # the mask's overlay: the white square tinted red where the last frame has it (JPEG blurs a
    # pixel or two at the edges). The browser may still paint an earlier frame for a moment: the
    # preview of the last one comes within 1/preview_fps s, and is waited for up to 10 s.
    (img,) = wait_for(lambda: (lambda i: [i] if redness(i) > 80 else None)(shot()), 10, "the object in red")
    # outside the object, away from the zone: grey
    bg = img[100:115, 5:60].reshape(-1, 3).astype(int)
    assert np.abs(bg[:, 2] - bg[:, 1]).max() < 25
    # the zone's outline in yellow (BGR 0, 255, 255) along its left edge, below the object
    x0, y0 = DOOR[0]
    edge = img[ROW + SIDE + 6 : DOOR[2][1] - 3, x0 : x0 + 2].reshape(-1, 3).astype(int)
    assert np.median(edge[:, 2]) > 180 and np.median(edge[:, 1]) > 180 and np.median(edge[:, 0]) < 90, edge[:5]
    # the page's text: fps and latency, from /state.json
    stats = page.inner_text("#stats")
    assert "fps" in stats and "latency" in stats and "door" in stats
    page.screenshot(path=str(tmp_path / "page.png"))  # kept with the test's files, for a person to look at
    if os.environ.get("KDRSDL_VIEW_SCREENSHOT"):
        page.screenshot(path=os.environ["KDRSDL_VIEW_SCREENSHOT"])
    page.close()
    wait_for(lambda: viewers(run.port) == 0, 20, "the stream to end")
    run.close()


def test_the_view_answers_state_json_and_404_and_listens_on_loopback(tmp_path):
    view = free_port()
    run = Run(tmp_path, "--view-port", view)
    run.send(0)
    state = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{view}/state.json", timeout=5).read())
    assert state["camera"] == "cam1" and state["zones"] == {"door": 0.0} and state["viewers"] == 0
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(f"http://127.0.0.1:{view}/nothing", timeout=5)
    assert e.value.code == 404
    # bound to 127.0.0.1 only: another address of this machine (127.0.0.2, loopback too on Linux,
    # so the test never depends on the host name) is refused
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.2", view), timeout=2)
    run.close()
