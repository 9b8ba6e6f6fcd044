"""A real RTSP server for tests: gst-rtsp-server on 127.0.0.1, a free port, H.264 or Motion-JPEG.

Run with the system interpreter (/usr/bin/python3, where `gi` is installed):
    /usr/bin/python3 rtsp_server.py FILE|testsrc|testsrc:WxH [PORT] [h264|jpeg]
Prints the port on stdout once serving rtsp://127.0.0.1:PORT/test (PORT 0 or
absent = a free one; a given PORT lets a test restart the server where it was). ``testsrc`` is
GStreamer's moving ball at 320 x 240, or at ``WxH``; ``jpeg`` sends each frame as a JPEG picture
(RFC 2435), as many IP cameras can.
"""

import sys

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstRtspServer", "1.0")
from gi.repository import GLib, Gst, GstRtspServer  # noqa: E402

Gst.init(None)
src = sys.argv[1]
codec = sys.argv[3] if len(sys.argv) > 3 else "h264"
if src.startswith("testsrc"):
    w, h = src.split(":", 1)[1].split("x") if ":" in src else ("320", "240")
    head = f"videotestsrc is-live=true pattern=ball ! video/x-raw,width={w},height={h},framerate=25/1"
else:
    head = f"filesrc location={src} ! decodebin ! videoconvert ! videorate ! video/x-raw,framerate=25/1"
if codec == "jpeg":
    launch = f"( {head} ! videoconvert ! video/x-raw,format=I420 ! jpegenc ! rtpjpegpay name=pay0 pt=26 )"
else:
    launch = (
        f"( {head} ! videoconvert ! x264enc tune=zerolatency speed-preset=ultrafast key-int-max=25"
        " ! rtph264pay name=pay0 pt=96 )"
    )
server = GstRtspServer.RTSPServer()
server.set_address("127.0.0.1")
server.set_service(sys.argv[2] if len(sys.argv) > 2 else "0")
factory = GstRtspServer.RTSPMediaFactory()
factory.set_launch(launch)
factory.set_shared(True)
server.get_mount_points().add_factory("/test", factory)
if server.attach(None) == 0:
    sys.exit(f"cannot bind 127.0.0.1:{sys.argv[2]}")
print(server.get_bound_port(), flush=True)
GLib.MainLoop().run()
