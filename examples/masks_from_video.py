"""Foreground masks of a video file, as PNG files: the library in ten lines.

python examples/masks_from_video.py VIDEO OUTDIR
"""

import pathlib
import sys

import cv2

import core

video, outdir = sys.argv[1], pathlib.Path(sys.argv[2])
outdir.mkdir(parents=True, exist_ok=True)
capture = cv2.VideoCapture(video)
subtractor = core.createBackgroundSubtractorKDRSDL()  # like cv2.createBackgroundSubtractorMOG2()
n = 0
while True:
    ok, frame = capture.read()  # BGR, as OpenCV decodes it
    if not ok:
        break
    fgmask = subtractor.apply(frame)  # uint8, 0 background, 255 foreground
    cv2.imwrite(str(outdir / f"mask_{n:06d}.png"), fgmask)
    n += 1
print(f"{n} masks in {outdir}")
