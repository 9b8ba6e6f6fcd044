"""The worker's heap: a refit's freed temporaries kept for the next refit, not faulted in afresh.

A refit allocates and frees about six window-sized temporaries (50 MiB at 320 x 240, window 30)
on its own thread. glibc gives that thread an arena of its own, made of 64 MiB heaps, and unmaps
a heap as soon as it is empty, whatever its thresholds. Every refit then faulted its temporaries
back in, the kernel zeroing each page: a fifth of the refit thread's CPU at 320 x 240
(docs/results.md, "Cameras per core").

:func:`hold_freed_heap` sets glibc's allocator (``mallopt``) so that the process keeps those
pages: one arena for every thread (the main heap, which honours the trim threshold), arrays up
to :data:`MMAP_THRESHOLD` taken from it rather than mapped one by one, and up to
:data:`TRIM_THRESHOLD` of free memory kept at its top. The worker's resident memory then stays
at its peak, the refits' temporaries included, between refits (docs/design.md, "Processes").
"""

import ctypes

# glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8

#: Allocations up to this size come from the heap, bytes: a window-sized array at the largest
#: processing size (30 x 360 x 360 float32, 15.6 MB) included. glibc's own threshold moves with
#: the sizes freed, up to the same 32 MiB.
MMAP_THRESHOLD = 32 * 2**20
#: Free memory the heap keeps at its top, bytes: more than a refit's temporaries at the largest
#: processing size (about 95 MB with the default window of 30).
TRIM_THRESHOLD = 128 * 2**20

# glibc's mallopt, or None where the C library has none (musl, macOS).
_mallopt = getattr(ctypes.CDLL(None), "mallopt", None)


def hold_freed_heap() -> bool:
    """Keep the heap that a refit frees for the next one (glibc ``mallopt``).

    Call it before the process starts its threads: a thread that has already allocated keeps
    its arena. The settings hold for the whole process.

    Returns
    -------
    bool
        True when glibc took all three settings; False when the C library has no ``mallopt``
        (the allocator then behaves as it does by default) or refused one.
    """
    if _mallopt is None:
        return False
    settings = ((_M_ARENA_MAX, 1), (_M_MMAP_THRESHOLD, MMAP_THRESHOLD), (_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    return all(_mallopt(param, value) == 1 for param, value in settings)
