"""A synthetic traffic-like video with exact ground truth, generated frame by frame.

The built-in default source of the service (``--source synthetic``) and test data
the project makes itself: a textured static background, objects moving across it,
slow illumination drift and Gaussian sensor noise.
"""

import numpy as np


class SyntheticScene:
    """Deterministic synthetic video: ``frame(t)`` and its foreground ``fgmask(t)``.

    Parameters
    ----------
    height, width : int
        Frame size in pixels (>= 16 each).
    n_objects : int
        Number of moving objects (ellipses), >= 0.
    noise_std : float
        Standard deviation of the additive Gaussian sensor noise, in intensity
        units of [0, 1].
    drift : float
        Relative amplitude of the slow illumination drift (gain ``1 + drift *
        sin(2 pi t / drift_period)``).
    drift_period : float
        Period of the drift, in frames.
    seed : int
        Random seed; the same seed gives the same video.

    Raises
    ------
    ValueError
        If a size or parameter is out of range.

    Notes
    -----
    Each object differs from the background by at least 0.25 in intensity, so
    ground truth (the object's pixels) is unambiguous; frames are in [0, 1].
    """

    def __init__(
        self,
        height: int = 240,
        width: int = 320,
        n_objects: int = 4,
        noise_std: float = 0.01,
        drift: float = 0.05,
        drift_period: float = 600.0,
        seed: int = 0,
    ) -> None:
        if height < 16 or width < 16:
            raise ValueError(f"height and width must be >= 16 pixels, got {height} x {width}")
        if n_objects < 0 or noise_std < 0 or drift < 0 or drift_period <= 0:
            raise ValueError("n_objects, noise_std and drift must be >= 0 and drift_period > 0")
        self.height, self.width = int(height), int(width)
        self.noise_std, self.drift, self.drift_period = float(noise_std), float(drift), float(drift_period)
        self.seed = int(seed)
        rng = np.random.default_rng(seed)
        yy, xx = np.mgrid[0:height, 0:width] / max(height, width)
        bg = np.full((height, width), 0.5)
        for _ in range(6):
            fy, fx = rng.uniform(1, 8, size=2)
            phase = rng.uniform(0, 2 * np.pi)
            bg += 0.06 * np.sin(2 * np.pi * (fy * yy + fx * xx) + phase)
        bg += 0.1 * (xx - 0.5)
        self.background = np.clip(bg, 0.15, 0.85)
        self._yy, self._xx = np.mgrid[0:height, 0:width]
        self.objects = []
        for k in range(n_objects):
            ry = rng.uniform(0.06, 0.12) * height
            rx = rng.uniform(0.08, 0.16) * width
            lane = (k + 0.5) / max(n_objects, 1) * height
            speed = rng.uniform(3.0, 8.0) * width / 320 * rng.choice([-1, 1])
            bright = rng.choice([0.0, 1.0])
            start = rng.uniform(0, width)
            self.objects.append((lane, ry, rx, speed, bright, start))

    def _object_masks(self, t):
        period = self.width + 4 * max((o[2] for o in self.objects), default=0)
        for lane, ry, rx, speed, bright, start in self.objects:
            cx = (start + speed * t) % period - 2 * rx
            inside = ((self._yy - lane) / ry) ** 2 + ((self._xx - cx) / rx) ** 2 <= 1.0
            yield inside, bright

    def fgmask(self, t: int) -> np.ndarray:
        """Exact ground truth of frame ``t``.

        Parameters
        ----------
        t : int
            Frame index (>= 0).

        Returns
        -------
        ndarray, shape (height, width), bool
            True where a moving object covers the pixel.
        """
        mask = np.zeros((self.height, self.width), dtype=bool)
        for inside, _ in self._object_masks(t):
            mask |= inside
        return mask

    def frame(self, t: int) -> np.ndarray:
        """Frame ``t`` of the video.

        Parameters
        ----------
        t : int
            Frame index (>= 0).

        Returns
        -------
        ndarray, shape (height, width), float32
            Grayscale intensities in [0, 1].
        """
        img = self.background.copy()
        for inside, bright in self._object_masks(t):
            # Objects are at least 0.25 away from the background they cover.
            img[inside] = np.where(
                bright > 0.5,
                np.minimum(1.0, self.background[inside] + 0.35),
                np.maximum(0.0, self.background[inside] - 0.35),
            )
        img *= 1.0 + self.drift * np.sin(2 * np.pi * t / self.drift_period)
        noise = np.random.default_rng((self.seed, t)).normal(0.0, self.noise_std, img.shape)
        return np.clip(img + noise, 0.0, 1.0).astype(np.float32)

    def frame_uint8(self, t: int) -> np.ndarray:
        """Frame ``t`` as 8-bit grayscale, shape (height, width), uint8 (what a camera gives)."""
        return np.round(self.frame(t) * 255).astype(np.uint8)
