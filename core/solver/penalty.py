"""Constants of the penalty (mu) schedule shared by the ALM solvers in core.

KDRSDL (paper Section 4), its per-frame core fit (core.solver.frame_fit) and RPCA by
inexact ALM (Lin et al. 2010, core.solver.rpca) all start mu at ``ETA`` over a norm of
the data, grow it by ``rho`` per iteration and cap it at ``MU_CAP`` times its
initial value.
"""

#: eta of the mu initialisation: ``mu0 = ETA * N / sum_i |X_i|_F`` for KDRSDL
#: (paper Section 4, after Lin et al.), ``ETA / |D|_2`` for RPCA.
ETA = 1.25

#: mu and muK are capped at this multiple of their initial values (paper Section 4;
#: Lin et al.'s ``mu_bar = 1e7 mu0``).
MU_CAP = 1e7
