"""Process lifecycle: SIGTERM/SIGINT set a stop event; logging to stderr."""

import logging
import re
import signal
import sys
import threading
from types import FrameType


class StopEvent(threading.Event):
    """A stop event that remembers the signal that set it (``signum``; None when none did)."""

    signum: int | None = None


def install_stop_handlers() -> StopEvent:
    """Return an Event set by SIGTERM or SIGINT (a clean stop: loops finish and close sockets)."""
    stop = StopEvent()

    def handler(signum: int, frame: FrameType | None) -> None:
        stop.signum = signum
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    return stop


#: A line that :func:`setup_logging` writes, parsed (``kdrsdl run`` reads its children's lines).
LOG_LINE = re.compile(r"^\S+ \S+ (?P<level>[A-Z]+) (?P<role>\w+)\[[^\]]*\] (?P<message>.*)$")


def setup_logging(role: str, camera: str, level: str = "info") -> logging.Logger:
    """Log lines ``<level> <role>[<camera>] <message>`` to stderr, from ``level`` up.

    Parameters
    ----------
    role, camera : str
        Shown in every line.
    level : {"debug", "info", "warning", "error"}
        The lowest level logged (configuration ``log_level``, flag ``--log-level``).
    """
    logging.basicConfig(
        stream=sys.stderr,
        level=getattr(logging, level.upper()),
        format=f"%(asctime)s %(levelname)s {role}[{camera}] %(message)s",
    )
    return logging.getLogger(f"kdrsdl.{role}")
