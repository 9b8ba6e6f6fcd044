"""Digests of the model's masks and backgrounds: does a change leave them the same to the bit?

Run: ``OPENBLAS_NUM_THREADS=1 python tests/bench/digest_masks.py [SOURCE ...] [--frames 1200]
[--config FILE] [--json PATH] [--against PATH]``.

A SOURCE is a CDnet sequence directory (its ``input/`` frames, from the first) or a video file.
By default: the motorway video and the six CDnet sequences in ``../shared/data``. Each goes
through a :class:`KDRSDLBackgroundSubtractor` with the ``[model]`` knobs of ``--config`` (the
defaults without one) and inline refits, so that two runs of the same code give the same bits,
for at most ``--frames`` frames. Printed for each source: its frames and the SHA-256 of its
masks and of its backgrounds at the processing resolution (float32), in order. ``--json`` writes
them; ``--against`` compares them with such a file (a source by its path below
``shared/data/``) and exits with status 1 when a digest differs or a source is not in it. A
change meant to leave the masks alone (a faster step, a refactoring) is checked by a run on the
commit before it with ``--json`` and a run after with ``--against`` (docs/results.md, "Cameras
per core").
"""

import argparse
import hashlib
import json
import pathlib
import sys

import cv2
import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from core.streaming import kernels  # noqa: E402
from core.streaming.background import KDRSDLBackgroundSubtractor  # noqa: E402
from streamer.config import load  # noqa: E402
from streamer.evaluation.cdnet import Sequence, read_gray  # noqa: E402

DATA = ROOT.parent / "shared" / "data"
DEFAULT_SOURCES = [
    DATA / "video" / "motorway_320x240.avi",
    *(
        DATA / "cdnet2014" / name
        for name in (
            "baseline/highway",
            "baseline/office",
            "baseline/pedestrians",
            "cameraJitter/badminton",
            "dynamicBackground/canoe",
            "dynamicBackground/fall",
        )
    ),
]


def frames_of(source, limit):
    """Grayscale uint8 frames of ``source`` (a CDnet sequence directory or a video), at most ``limit``."""
    path = pathlib.Path(source)
    if path.is_dir():
        seq = Sequence.open(path)
        for i in range(seq.first_input, min(seq.last_input, seq.first_input + limit - 1) + 1):
            yield read_gray(seq.input_path(i))
        return
    cap = cv2.VideoCapture(str(path))
    if not cap.isOpened():
        raise SystemExit(f"{path}: cannot open it as a video")
    try:
        for _ in range(limit):
            ok, frame = cap.read()
            if not ok:
                return
            yield cv2.cvtColor(frame, cv2.COLOR_BGR2GRAY)
    finally:
        cap.release()


def digest(source, limit, params):
    """``{"frames", "masks", "backgrounds"}`` of one source: the count and two SHA-256 hex digests."""
    model = KDRSDLBackgroundSubtractor(params)
    masks, backgrounds, n = hashlib.sha256(), hashlib.sha256(), 0
    for frame in frames_of(source, limit):
        result = model.process(frame)
        masks.update(np.ascontiguousarray(result.fgmask).tobytes())
        backgrounds.update(np.ascontiguousarray(result.background_processing, np.float32).tobytes())
        n += 1
    model.close()
    return {"frames": n, "masks": masks.hexdigest(), "backgrounds": backgrounds.hexdigest()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("sources", nargs="*", help="CDnet sequence directories or video files")
    ap.add_argument("--frames", type=int, default=1200, help="most frames of each source")
    ap.add_argument("--config", help="TOML file whose [model] knobs the model takes")
    ap.add_argument("--json", help="write the digests here")
    ap.add_argument("--against", help="compare with the digests of an earlier --json; exit 1 if any differs")
    args = ap.parse_args()
    kernels.warm()  # compiled now: on an empty cache the model would run numpy until a child compiled them
    sources = args.sources or [str(p) for p in DEFAULT_SOURCES]
    missing = [s for s in sources if not pathlib.Path(s).exists()]
    if missing:
        raise SystemExit(f"not found: {', '.join(missing)} (the default sources are in ../shared/data)")
    params = load(args.config).model.params()
    earlier = {}
    if args.against:
        earlier = {key(s): d for s, d in json.loads(pathlib.Path(args.against).read_text()).items()}
    out, differ = {}, []
    for source in sources:
        d = out[source] = digest(source, args.frames, params)
        verdict = ""
        if args.against:
            same = earlier.get(key(source)) == d
            verdict = "  same" if same else "  DIFFERS" if key(source) in earlier else "  NOT IN THE EARLIER FILE"
            if not same:
                differ.append(source)
        print(f"{source}: {d['frames']} frames, masks {d['masks'][:16]}, backgrounds {d['backgrounds'][:16]}{verdict}")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    if differ:
        raise SystemExit(f"{len(differ)} of {len(sources)} sources differ or were not compared: {', '.join(differ)}")


def key(source: str) -> str:
    """A source's name in an ``--against`` comparison: its path below ``shared/data/`` (the same
    whichever checkout, or link to ``../shared``, the runs were made from), else the path itself."""
    return source.split("/shared/data/", 1)[-1]


if __name__ == "__main__":
    main()
