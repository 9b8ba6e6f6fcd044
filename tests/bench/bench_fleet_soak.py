"""A fleet soak (issue 46): N cameras for a long run, one worker killed with SIGKILL every few minutes.

Run: ``python tests/bench/bench_fleet_soak.py [--cameras 4] [--size 320x240] [--minutes 30]
[--kill-every 5] [--json FILE] [--config FILE]``.

N pairs of ``kdrsdl capture`` (the motorway video resized to ``--size``, looping at 30 fps, live)
and ``kdrsdl worker`` (each with a state directory, checkpointing every 60 s), each camera on its
own ipc endpoints; this process subscribes to every camera's masks. Every ``--kill-every``
minutes one worker, in turn, is killed with SIGKILL and started again at once with the same
command: the benchmark's own restart, as ``Restart=always`` would do it. Reported:

- for each kill, the seconds from the restart to the camera's first mask of the new worker, and
  whether the new worker restored the checkpoint warm
  (``kdrsdl_worker_checkpoint_restores_total{result="warm"}``) and published ``solver.start``
  ``"restored"`` first;
- for every camera, the masks received and the gaps in ``seq`` within a worker's epoch (a mask
  published and never received), and the frames its worker(s) lost or dropped, in all and in
  the fleet's start (its first 2 minutes: every worker starts at once, then every capture); a
  killed camera loses the frames sent while its worker was down, the others none;
- for every camera, the frames no mask came for (jumps in the masks' ``frame_seq``), by when:
  within 30 s after the camera's own kill, after another camera's, or at other times (with the
  second of the run);
- every worker process's RSS from 2 minutes after its start to its end, for those that lived at
  least ``--minutes`` less 10 minutes (growth of the last minute's median over the third minute's);
- the masks' latency p99 per 5 minutes, and the machine's load.
"""

import argparse
import json
import os
import pathlib
import signal
import sys
import tempfile
import time

import numpy as np
import zmq

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "streamer"))
sys.path.insert(0, str(ROOT / "tests" / "bench"))
sys.path.insert(0, str(ROOT))

from bench_hd import VIDEO, make_input  # noqa: E402
from helpers import free_port, kdrsdl, memory_mib, metric, scrape, stop, wait_for  # noqa: E402

from core.streaming import kernels  # noqa: E402
from streamer.wire.protocol import decode  # noqa: E402

SAMPLE_S = 10
AFTER_KILL_S = 30
WARMUP_S = 120


class Camera:
    """One camera's worker (restartable) and capture, and what its masks showed."""

    def __init__(self, i, path, tmp, config=()):
        self.name, self.tmp = f"c{i}", tmp
        self.frames, self.masks = f"ipc://{tmp}/f{i}", f"ipc://{tmp}/m{i}"
        self.state = pathlib.Path(tmp) / f"state{i}"
        self.port = free_port()
        self.lives = []  # one per worker process: {"pid", "t0", "rss": [(t, MiB)], "first_mask_s", ...}
        self.epochs = {}  # worker epoch -> last seq received
        self.gaps = self.masks_received = 0
        self.last_frame = None  # the last mask's frame_seq (the capture is never restarted)
        self.missed = []  # (t, frames): a jump in frame_seq, frames no mask came for (dropped or lost)
        self.counters = {"lost": 0.0, "dropped": 0.0}
        self.at_start = None  # the counters at the end of the fleet's start (WARMUP_S)
        self.worker = self.capture = None
        self.config = config  # ("--config", FILE) for the worker and the capture, or ()
        self.start_worker(0.0)

    def start_capture(self, path):
        """Start the camera's capture, once its worker serves its metrics."""
        wait_for(lambda: scrape(self.port), 60, f"worker {self.name}'s metrics")
        self.capture = kdrsdl("capture", "--camera", self.name, "--source", path, "--loop", "--live", "--fps", 30,
                              "--frames-endpoint", self.frames, *self.config, bare=True)  # fmt: skip

    def start_worker(self, t):
        self.worker = kdrsdl("worker", "--camera", self.name, "--frames-endpoint", self.frames,
                             "--masks-endpoint", self.masks, "--metrics-port", self.port, "--state-dir", self.state,
                             "--checkpoint-interval", 60, *self.config, bare=True)  # fmt: skip
        self.lives.append({"pid": self.worker.pid, "t0": t, "rss": [], "first_mask_s": None, "first_start": None})

    def add_counters(self):
        """Add the live worker's lost and dropped frames (before it is killed or stopped)."""
        s, now = scrape(self.port), self.live_counters()
        for k, v in now.items():
            self.counters[k] += v
        return s

    def live_counters(self):
        """The live worker's lost and dropped frames so far."""
        s = scrape(self.port)
        dropped = sum(
            metric(s, "kdrsdl_worker_frames_dropped_total", camera=self.name, reason=r) for r in ("overload", "error")
        )
        return {"lost": metric(s, "kdrsdl_worker_frames_lost_total", camera=self.name), "dropped": dropped}

    def mark_start(self):
        """Note the counters at the end of the fleet's start (every worker then alive since it began)."""
        now = self.live_counters()
        self.at_start = {k: self.counters[k] + now[k] for k in now}

    def mask(self, header, t):
        self.masks_received += 1
        epoch, seq = header["epoch"], header["seq"]
        frame = header["frame_seq"]
        if self.last_frame is not None and frame > self.last_frame + 1:
            self.missed.append((t, frame - self.last_frame - 1))
        self.last_frame = frame if self.last_frame is None else max(frame, self.last_frame)
        life = self.lives[-1]
        if epoch not in self.epochs:
            if life["first_mask_s"] is None and self.epochs:  # the first mask of a restarted worker
                life["first_mask_s"] = t - life["t0"]
                life["first_start"] = header["solver"]["start"]
        else:
            self.gaps += max(0, seq - self.epochs[epoch] - 1)
        self.epochs[epoch] = seq


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cameras", type=int, default=4)
    ap.add_argument("--size", default="320x240")
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--kill-every", type=float, default=5, help="minutes between kills (default %(default)s)")
    ap.add_argument("--json", help="write the figures as JSON")
    ap.add_argument("--config", help="TOML file for every capture and worker (e.g. [worker] backlog)")
    args = ap.parse_args()
    kernels.warm()  # compiled into numba's cache before anything is timed: workers load them
    if not VIDEO.exists():
        sys.exit(f"needs the motorway video at {VIDEO}")
    tmp = tempfile.mkdtemp(prefix="kdrsdl-fleet-")
    path, _ = make_input(args.size, tmp)
    # every worker first, then the captures: the workers' own start (imports, kernels, the first
    # frames on the numpy reference) is a burst of CPU that would make the first cameras drop frames
    config = ("--config", args.config) if args.config else ()
    cams = [Camera(i, path, tmp, config) for i in range(args.cameras)]
    for c in cams:
        c.start_capture(path)
    sub = zmq.Context.instance().socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"mask/")
    sub.setsockopt(zmq.RCVHWM, 100000)
    for c in cams:
        sub.connect(c.masks)
    by_name = {c.name: c for c in cams}
    kills, lat = [], []  # kills: the cameras in turn; lat: (t, s)
    kill_times = []
    t_start = time.monotonic()
    next_sample, next_kill, victim = t_start, t_start + 60 * args.kill_every, 0
    started = None  # when the fleet's start ended (WARMUP_S), s
    print(f"fleet soak: {args.cameras} cameras at {args.size}, {args.minutes:g} min, a kill every "
          f"{args.kill_every:g} min", flush=True)  # fmt: skip
    while (now := time.monotonic()) - t_start < 60 * args.minutes:
        t = now - t_start
        if sub.poll(100):
            msg = decode(sub.recv_multipart(copy=False), "mask")
            by_name[msg.header["camera"]].mask(msg.header, t)
            lat.append((t, (time.time_ns() - msg.header["t_capture_ns"]) / 1e9))
        if started is None and t >= WARMUP_S:
            started = t
            for c in cams:
                c.mark_start()
        if now >= next_sample:
            next_sample += SAMPLE_S
            for c in cams:
                if c.worker.poll() is None:
                    c.lives[-1]["rss"].append((t, memory_mib(c.worker.pid)))
        if now >= next_kill and now - t_start < 60 * args.minutes - 30:
            next_kill += 60 * args.kill_every
            c = cams[victim % len(cams)]
            victim += 1
            c.add_counters()
            c.worker.send_signal(signal.SIGKILL)
            c.worker.wait(10)
            c.start_worker(time.monotonic() - t_start)
            kills.append(c)
            kill_times.append(t)
            print(f"  {t / 60:4.1f} min: killed and restarted {c.name}'s worker", flush=True)
    load = os.getloadavg()
    restores = {}
    for c in cams:
        s = c.add_counters()
        restores[c.name] = metric(s, "kdrsdl_worker_checkpoint_restores_total", camera=c.name, result="warm")
        stop(c.capture)
        stop(c.worker)
    sub.close()

    print(f"\nframes lost and dropped: all, and (in brackets) in the fleet's first {WARMUP_S} s, every worker starting")
    print("\n| camera | workers killed | masks received | gaps | frames lost | frames dropped |")
    print("|---|---|---|---|---|---|")
    out = {"args": vars(args), "load": load, "cameras": {}, "kills": []}
    for c in cams:
        n_killed = sum(k is c for k in kills)
        lost, dropped = c.counters["lost"], c.counters["dropped"]
        first = c.at_start or {"lost": float("nan"), "dropped": float("nan")}
        print(
            f"| {c.name} | {n_killed} | {c.masks_received} | {c.gaps} | {lost:.0f} ({first['lost']:.0f}) "
            f"| {dropped:.0f} ({first['dropped']:.0f}) |"
        )
        out["cameras"][c.name] = {"killed": n_killed, "masks": c.masks_received, "gaps": c.gaps,
                                  "lost": lost, "dropped": dropped, "at_start": first}  # fmt: skip
    print(f"\nframes no mask came for, by when (a kill: within {AFTER_KILL_S} s after one, of any camera)")
    print("\n| camera | after its own kill | after another's kill | at other times (t, frames) |")
    print("|---|---|---|---|")
    for c in cams:
        own = [k for k, v in zip(kill_times, kills, strict=True) if v is c]
        near = {"own": 0, "other": 0}
        other_times = []
        for t, n in c.missed:
            if any(0 <= t - k <= AFTER_KILL_S for k in own):
                near["own"] += n
            elif any(0 <= t - k <= AFTER_KILL_S for k in kill_times):
                near["other"] += n
            else:
                other_times.append(f"{t:.0f} s: {n}")
        print(f"| {c.name} | {near['own']} | {near['other']} | {', '.join(other_times) or 0} |")
        out["cameras"][c.name]["missed"] = c.missed
    out["kill_times"] = kill_times
    print("\n| kill | camera | first mask after the restart (s) | first mask's solver.start |")
    print("|---|---|---|---|")
    seen = {}
    for i, c in enumerate(kills):
        seen[c.name] = seen.get(c.name, 0) + 1
        life = c.lives[seen[c.name]]
        print(f"| {i + 1} | {c.name} | {life['first_mask_s']} | {life['first_start']} |")
        out["kills"].append({"camera": c.name, "first_mask_s": life["first_mask_s"], "start": life["first_start"]})
    print(f"\nwarm restores counted by the last workers: {restores}")
    print("\n| worker process | lived (min) | RSS at 3 min -> last minute (MiB) | growth |")
    print("|---|---|---|---|")
    out["rss"] = []
    for c in cams:
        for life in c.lives:
            if len(life["rss"]) < 2:
                continue
            t, rss = (np.array(v) for v in zip(*life["rss"], strict=True))
            lived = (t[-1] - life["t0"]) / 60
            if lived < args.minutes - 10:
                continue
            first = rss[(t >= life["t0"] + WARMUP_S) & (t < life["t0"] + WARMUP_S + 60)]
            if not len(first):
                continue
            base = np.median(first)
            last = np.median(rss[t >= t[-1] - 60])
            print(
                f"| {c.name} pid {life['pid']} | {lived:.1f} | {base:.0f} -> {last:.0f} | {(last - base) / base:+.1%} |"
            )
            out["rss"].append({"camera": c.name, "lived_min": lived, "base": base, "last": last})
    lat_a = np.array(lat)
    print("\n| minutes | masks | latency p99 (ms) |")
    print("|---|---|---|")
    for m0 in np.arange(0, args.minutes, 5):
        sel = lat_a[(lat_a[:, 0] >= 60 * m0) & (lat_a[:, 0] < 60 * (m0 + 5)), 1]
        if len(sel):
            print(f"| {m0:g}-{m0 + 5:g} | {len(sel)} | {1000 * np.percentile(sel, 99):.1f} |")
    print(f"\nload average at the end: {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(out, indent=1, default=float))


if __name__ == "__main__":
    main()
