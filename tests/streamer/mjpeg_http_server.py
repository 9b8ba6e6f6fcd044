"""A real Motion-JPEG HTTP server for tests, as many IP cameras serve their pictures.

Run: ``python mjpeg_http_server.py WxH``. Serves, to each client of any path, the synthetic scene
(:class:`core.evaluation.scene.SyntheticScene`) at ``WxH`` as ``multipart/x-mixed-replace`` JPEG
pictures at 25 frames a second, each part with its frame number in an ``X-Frame`` header; prints
the port on stdout once listening on 127.0.0.1.
"""

import http.server
import pathlib
import socketserver
import sys
import time

import cv2

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

from core.evaluation.scene import SyntheticScene  # noqa: E402

W, H = (int(v) for v in sys.argv[1].split("x"))
SCENE = SyntheticScene(H, W)
FPS = 25


class Camera(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's name)
        self.send_response(200)
        self.send_header("Content-Type", "multipart/x-mixed-replace; boundary=frame")
        self.end_headers()
        t = 0
        try:
            while True:
                jpeg = cv2.imencode(".jpg", SCENE.frame_uint8(t))[1].tobytes()
                head = f"--frame\r\nContent-Type: image/jpeg\r\nContent-Length: {len(jpeg)}\r\nX-Frame: {t}\r\n\r\n"
                self.wfile.write(head.encode() + jpeg + b"\r\n")
                t += 1
                time.sleep(1 / FPS)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def log_message(self, *args):
        pass


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


server = Server(("127.0.0.1", 0), Camera)
print(server.server_address[1], flush=True)
server.serve_forever()
