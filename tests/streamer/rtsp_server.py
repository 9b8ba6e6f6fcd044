"""A real RTSP server for tests: gst-rtsp-server on 127.0.0.1, a free port, H.264.

Run with the system interpreter (/usr/bin/python3, where `gi` is installed):
    /usr/bin/python3 rtsp_server.py FILE|testsrc [PORT]
Prints the port on stdout once serving rtsp://127.0.0.1:PORT/test (PORT 0 or
absent = a free one; a given PORT lets a test restart the server where it was).
"""

import sys

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstRtspServer", "1.0")
from gi.repository import GLib, Gst, GstRtspServer  # noqa: E402

Gst.init(None)
src = sys.argv[1]
if src == "testsrc":
    head = "videotestsrc is-live=true pattern=ball ! video/x-raw,width=320,height=240,framerate=25/1"
else:
    head = f"filesrc location={src} ! decodebin ! videoconvert ! videorate ! video/x-raw,framerate=25/1"
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
