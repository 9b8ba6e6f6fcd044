"""The KDRSDL decomposition (Algorithm 1 of Bahri et al., ICCV 2017), its parts, and RPCA."""

from core.solver.kdrsdl import ConvergenceWarning, KDRSDLResult, kdrsdl
from core.solver.state import KDRSDLState, slide_state
from core.solver.stein import stein_solve

__all__ = ["ConvergenceWarning", "KDRSDLResult", "KDRSDLState", "kdrsdl", "slide_state", "stein_solve"]
