"""A message header's cost to write and to read: orjson, as the protocol does it, against Python's ``json``.

Run: ``python tests/bench/bench_headers.py [--regions 6] [--rounds 7]``.

A 320 x 240 frame's and mask's messages as a capture and a worker build them
(:func:`streamer.wire.protocol.encode`) and as a worker and a subscriber read them
(:func:`~streamer.wire.protocol.decode`): the mask's header with every field of
:func:`streamer.wire.messages.mask_fields`, ``--regions`` regions and one zone. Each call is timed
back to back, 2,000 calls a round, with the protocol's JSON (orjson) and, in the same rounds, with
its two JSON functions swapped for the standard library's (``json.dumps(header, separators=(",",
":")).encode()`` and ``json.loads(data.decode())``, what the protocol used before). Printed: each
one's best round, microseconds a call, and their ratio. The pixels are not copied either way.
"""

import argparse
import functools
import json
import pathlib
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from streamer.wire import protocol  # noqa: E402

CALLS = 2000


def mask_extra(regions: int) -> dict:
    """A mask header's fields after the envelope's, as :func:`streamer.wire.messages.mask_fields` writes them."""
    return {
        "frame_seq": 12345,
        "frame_epoch": "6e86b236100d52a8",
        "frame_index": 12345,
        "input_shape": [240, 320],
        "latency_s": 0.0041234567,
        "threshold": None,
        "fg_ratio": 0.031234,
        "regions": [{"box": [10 + i, 20, 30, 40], "area": 500 + i, "centroid": [25.5, 30.25]} for i in range(regions)],
        "regions_omitted": 0,
        "zones": {"road": 0.012345},
        "solver": {"start": "warm", "iterations": 13, "residual": 0.00123456, "rank": 12},
        "mask_resolution": "input",
        "processing_shape": [240, 320],
        "light_change": None,
    }


def stdlib_dumps(header: dict[str, Any]) -> bytes:
    """The standard library's compact JSON."""
    return json.dumps(header, separators=(",", ":")).encode()


def stdlib_loads(data: Any) -> Any:
    """The standard library's JSON of UTF-8 bytes."""
    return json.loads(bytes(data).decode("utf-8"))


def best_us(call: Callable[[], object], rounds: int, stdlib: bool) -> float:
    """The fastest of ``rounds`` rounds of :data:`CALLS` calls, microseconds a call; with ``stdlib``
    the protocol's JSON functions are the standard library's meanwhile."""
    own = protocol._dumps, protocol._loads
    if stdlib:
        protocol._dumps, protocol._loads = stdlib_dumps, stdlib_loads
    try:
        best = float("inf")
        for _ in range(rounds):
            t0 = time.perf_counter()
            for _ in range(CALLS):
                call()
            best = min(best, (time.perf_counter() - t0) / CALLS * 1e6)
        return best
    finally:
        protocol._dumps, protocol._loads = own


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--regions", type=int, default=6, help="regions in the mask's header (default 6)")
    ap.add_argument("--rounds", type=int, default=7, help="rounds; each call's best is reported (default 7)")
    a = ap.parse_args()
    image = np.zeros((240, 320), np.uint8)
    epoch, extra = protocol.new_epoch(), mask_extra(a.regions)
    for kind, fields in (("frame", {"frame_index": 12345}), ("mask", extra)):
        parts = [bytes(p) for p in protocol.encode(kind, "cam0", epoch, 12345, time.time_ns(), image, **fields)]
        calls = {
            "write": functools.partial(protocol.encode, kind, "cam0", epoch, 12345, 0, image, **fields),
            "read": functools.partial(protocol.decode, parts, kind),
        }
        for what, call in calls.items():
            times = {}
            for _ in range(2):  # alternated, so that a slow spell of the machine hits both
                for stdlib in (False, True):
                    t = best_us(call, a.rounds, stdlib)
                    times[stdlib] = min(times.get(stdlib, t), t)
            print(
                f"{kind} ({len(parts[1])} bytes of header), {what}: {times[False]:.1f} us with orjson, "
                f"{times[True]:.1f} us with the standard library's json (ratio {times[True] / times[False]:.2f})"
            )


if __name__ == "__main__":
    main()
