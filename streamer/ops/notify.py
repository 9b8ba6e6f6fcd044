"""systemd's sd_notify protocol: a datagram to $NOTIFY_SOCKET (stdlib only).

``READY=1`` once sockets are bound, ``WATCHDOG=1`` from the main loop while it
makes progress (sd_notify(3)). Without $NOTIFY_SOCKET it does nothing.
"""

import os
import socket
import time
from collections.abc import Callable


def systemd_notifier(min_interval_s: float = 1.0) -> Callable[[str], None] | None:
    """Return ``notify(state)``; None when not run under systemd (no $NOTIFY_SOCKET).

    Watchdog pings are rate-limited to one per ``min_interval_s`` seconds.
    """
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return None
    if address.startswith("@"):
        address = "\0" + address[1:]
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    last = {"WATCHDOG=1": 0.0}

    def notify(state: str) -> None:
        now = time.monotonic()
        if state in last:
            if now - last[state] < min_interval_s:
                return
            last[state] = now
        try:
            sock.sendto(state.encode(), address)
        except OSError:
            pass  # systemd gone: nothing to tell

    return notify
