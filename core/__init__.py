"""kdrsdl-stream numerics: KDRSDL (Bahri et al., ICCV 2017) and what builds on it.

numpy and scipy only; nothing here touches OpenCV, ZeroMQ or Prometheus.
"""

from core.kdrsdl import ConvergenceWarning, KDRSDLResult, kdrsdl
from core.state import KDRSDLState, slide_state
from core.stein import stein_solve

__all__ = [
    "ConvergenceWarning",
    "KDRSDLResult",
    "KDRSDLState",
    "kdrsdl",
    "slide_state",
    "stein_solve",
]
