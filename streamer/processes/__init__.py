"""The processes: the capture, the worker and its parts, the subscriber, ``kdrsdl run``."""
