"""Regions, zones and events (issue 24): the pure parts, on masks and fractions built by hand."""

import numpy as np
import pytest

from streamer.motion.events import EventDetector, union
from streamer.motion.regions import find_regions
from streamer.motion.zones import ZoneMap, rasterise
from streamer.wire.messages import region_fields


def _mask(shape=(60, 80)):
    return np.zeros(shape, np.uint8)


@pytest.mark.parametrize("compiled", [False, True], ids=["opencv", "compiled"])
def test_regions_are_the_components_largest_first_with_exact_boxes_areas_and_centroids(compiled):
    m = _mask()
    m[10:20, 5:25] = 255  # 10 x 20 = 200 px
    m[40:50, 60:70] = 255  # 100 px
    m[30, 30] = 255  # 1 px: under min_area
    m[2:4, 70:72] = 255  # 4 px
    m[2:4, 74:76] = 255  # 4 px, same area: the left one first
    r = find_regions(m, min_area=2, max_regions=3, compiled=compiled)
    assert [(g.box, g.area, g.centroid) for g in r.listed] == [
        ((5, 10, 20, 10), 200, (14.5, 14.5)),
        ((60, 40, 10, 10), 100, (64.5, 44.5)),
        ((70, 2, 2, 2), 4, (70.5, 2.5)),
    ]
    assert r.omitted == 1  # the second 4-px square; the 1-px one is under min_area, not omitted
    assert region_fields(r.listed[0]) == {"box": [5, 10, 20, 10], "area": 200, "centroid": [14.5, 14.5]}
    assert find_regions(_mask(), 1, 10, compiled=compiled).listed == []
    # diagonal neighbours are one component (8-connectivity)
    d = _mask()
    d[5, 5] = d[6, 6] = 255
    assert [g.area for g in find_regions(d, 1, 10, compiled=compiled).listed] == [2]
    with pytest.raises(ValueError, match="2-D uint8"):
        find_regions(np.zeros((4, 4), bool), 1, 1)


@pytest.mark.parametrize("compiled", [False, True], ids=["opencv", "compiled"])
def test_regions_of_a_mask_at_half_the_input_size_are_in_input_pixels(compiled):
    m = _mask((30, 40))
    m[5:10, 4:14] = 255  # 5 x 10 mask pixels = 20 x 10 input pixels at scale 2
    (g,) = find_regions(m, min_area=200, max_regions=5, scale=(2.0, 2.0), compiled=compiled).listed
    assert g.box == (8, 10, 20, 10) and g.area == 200
    assert g.centroid == (17.5, 14.5)  # pixel centres: mask pixel 8.5 covers input pixels 17 and 18
    assert find_regions(m, min_area=201, max_regions=5, scale=(2.0, 2.0)).listed == []


def test_a_polygon_covers_its_outline_and_zone_fractions_are_exact():
    square = [[10, 10], [19, 10], [19, 19], [10, 19]]
    assert rasterise([square], (60, 80)).sum() == 100  # 10 x 10, the outline included
    zm = ZoneMap([], {"a": square, "b": [[0, 0], [79, 0], [79, 59], [0, 59]]}, (60, 80), (60, 80))
    m = _mask()
    m[15:25, 15:25] = 255  # 25 px in a (rows 15-19, cols 15-19), 100 in b
    assert zm.fractions(m) == {"a": 0.25, "b": 100 / 4800}
    assert zm.box(m, "a") == (15, 15, 5, 5) and zm.box(m, None) == (15, 15, 10, 10)
    assert zm.box(_mask(), "a") is None
    assert zm.names == ["a", "b"]


def test_ignored_pixels_are_zeroed_left_out_of_every_fraction_and_filled_for_the_model():
    ignore = [[0, 0], [39, 0], [39, 59], [0, 59]]  # the left half
    zm = ZoneMap([ignore], {"all": [[0, 0], [79, 0], [79, 59], [0, 59]]}, (60, 80), (60, 80))
    m = np.full((60, 80), 255, np.uint8)
    out = zm.apply(m)
    assert out[:, :40].max() == 0 and out[:, 40:].min() == 255 and m.min() == 255  # a new array
    assert zm.counted == 2400 and zm.fractions(out) == {"all": 1.0}  # the ignored half is not in the zone
    frame = np.tile(np.arange(80, dtype=np.uint8), (60, 1))
    filled = zm.fill_ignored(frame)
    # the median of the visible columns 40..79 (sampled one pixel in 7): 59 or 60
    assert set(np.unique(filled[:, :40])) <= {59, 60} and np.array_equal(filled[:, 40:], frame[:, 40:])
    assert frame[0, 0] == 0  # the frame itself is untouched
    # a global change of light moves the fill with it: median(g x + o) = g median(x) + o
    lit = (frame.astype(float) * 1.5 + 10).astype(np.uint8)
    assert abs(int(zm.fill_ignored(lit)[0, 0]) - int(1.5 * filled[0, 0] + 10)) <= 1


def test_zones_at_the_processing_size_scale_their_polygons():
    zm = ZoneMap([], {"a": [[0, 0], [39, 0], [39, 29], [0, 29]]}, (60, 80), (30, 40))
    m = _mask((30, 40))
    m[:15, :20] = 255
    assert zm.fractions(m)["a"] == pytest.approx(1.0, abs=0.15)  # 20 x 15 rounded from 19.5 x 14.5
    assert zm.box(m, "a") == (0, 0, 40, 30)


def test_points_outside_the_frame_are_refused_naming_the_polygon():
    with pytest.raises(ValueError, match=r"motion.zones\[0\] 'a': point \(80, 0\) lies outside the 80 x 60 frame"):
        ZoneMap([], {"a": [[0, 0], [80, 0], [0, 10]]}, (60, 80), (60, 80))
    with pytest.raises(ValueError, match=r"motion.ignore\[1\]"):
        ZoneMap([[[0, 0], [1, 0], [0, 1]], [[0, 0], [1, 60], [0, 1]]], {}, (60, 80), (60, 80))


def _run(det, fractions, t0=0):
    """Feed ``fractions`` (one per frame, one zone "z"); ``[(frame, event)]``."""
    out = []
    for i, f in enumerate(fractions):
        for e in det.update("ep", t0 + i, (t0 + i) * 10**8, {"z": f}, lambda z, i=i: (i, 0, 1, 1)):
            out.append((t0 + i, e))
    return out


def test_an_event_starts_after_min_frames_and_ends_after_quiet_frames():
    det = EventDetector(["z"], threshold=0.1, min_frames=3, quiet_frames=4)
    fr = [0, 0.2, 0.3, 0, 0.2, 0.5, 0.3, 0.05, 0.2, 0, 0, 0, 0, 0, 0]
    #     0  1    2    3  4    5    6    7     8    9 10 11 12 13 14
    events = _run(det, fr)
    (t_start, start), (t_end, end) = events
    assert (t_start, start.event, start.zone) == (6, "start", "z")  # frames 4, 5, 6; 1-2 was too short
    assert start.fields == {"frame_epoch": "ep", "first_seq": 4, "fraction": 0.3, "box": [4, 0, 3, 1]}
    assert start.t_capture_ns == 6 * 10**8
    # frame 8 is active again, so the quiet count restarts: frames 9-12 end it
    assert (t_end, end.event) == (12, "end")
    assert end.fields == {
        "frame_epoch": "ep",
        "first_seq": 4,
        "last_seq": 8,
        "duration_s": 0.4,
        "peak": 0.5,
        "box": [4, 0, 5, 1],
        "reason": "quiet",
    }
    assert det.open_zones == []


def test_zones_have_their_own_events_and_a_stop_ends_only_open_ones():
    det = EventDetector(["a", "b"], threshold=0.0, min_frames=1, quiet_frames=2)
    got = det.update("ep", 0, 0, {"a": 0.5, "b": 0.0}, lambda z: None)
    assert [(e.event, e.zone) for e in got] == [("start", "a")]
    assert det.update("ep", 1, 1, {"a": 0.5, "b": 0.0}, lambda z: None) == []
    (end,) = det.end_all("stop")
    assert (end.event, end.zone, end.fields["reason"], end.fields["box"]) == ("end", "a", "stop", None)


def test_an_open_event_is_checkpointed_and_ended_as_restart_at_the_next_frame():
    det = EventDetector(["z"], threshold=0.1, min_frames=2, quiet_frames=5)
    _run(det, [0.2, 0.4, 0.3])
    state = det.state()
    assert [s["zone"] for s in state] == ["z"]
    fresh = EventDetector(["z"], threshold=0.1, min_frames=2, quiet_frames=5)
    assert fresh.restore(state + [{"zone": "y", "nonsense": 1}]) == 1  # what does not fit is skipped
    (t, end), *rest = _run(fresh, [0.0], t0=100)
    assert (t, end.event, end.zone) == (100, "end", "z") and rest == []
    assert end.fields["reason"] == "restart" and (end.fields["first_seq"], end.fields["last_seq"]) == (0, 2)
    assert end.t_capture_ns == 2 * 10**8 and end.fields["peak"] == 0.4
    assert fresh.state() == []


def test_union_and_light_change():
    assert union((0, 0, 2, 2), (5, 5, 1, 1)) == (0, 0, 6, 6) and union(None, (1, 2, 3, 4)) == (1, 2, 3, 4)
    e = EventDetector(["frame"], 0.0, 1, 1).light_change(7, 70, 0.61234567, -0.01)
    assert (e.event, e.zone, e.fields) == ("light_change", "frame", {"frame_seq": 7, "gain": 0.612346, "offset": -0.01})
    with pytest.raises(ValueError):
        EventDetector(["a", "a"], 0.1, 1, 1)


def test_the_stage_measures_an_enlarged_mask_on_its_processing_size_original():
    from core.streaming.resolution import enlarge_mask
    from streamer.config import MotionConfig, ZoneConfig
    from streamer.motion.stage import MotionStage

    cfg = MotionConfig(
        min_area=1,
        ignore=[[[0, 0], [60, 0], [60, 60], [0, 60]]],
        zones=[ZoneConfig(name="right", polygon=[[160, 0], [319, 0], [319, 239], [160, 239]])],
    )
    small = _mask((120, 160))  # the processing size: half the input's
    small[20:40, 100:140] = 255  # 20 x 40 px, in the zone
    small[70:90, 30:50] = 255  # 20 x 20 px, outside it
    small[5:20, 5:20] = 255  # inside the ignored square (input 0..60): never foreground
    big = enlarge_mask(small, (240, 320))  # what the worker publishes
    header = {"epoch": "e", "seq": 0, "t_capture_ns": 0}
    res = MotionStage(cfg).update(big, (240, 320), header, small)
    assert res.fgmask.shape == (240, 320) and not res.fgmask[:61, :61].any()  # zeroed where published
    # measured at the processing size, in input pixels (scale 2): exact boxes and areas
    assert [(g.box, g.area) for g in res.regions.listed] == [((200, 40, 80, 40), 3200), ((60, 140, 40, 40), 1600)]
    # the same regions as the published mask's own, within the enlargement's 1 px of edge
    full = find_regions(res.fgmask, 1, 20)
    for a, b in zip(res.regions.listed, full.listed, strict=True):
        assert np.abs(np.subtract(a.box, b.box)).max() <= 1 and abs(a.area - b.area) <= 0.05 * b.area
    # fractions over the pixels not ignored: 1200 of 120 x 160 - 31 x 31 small pixels (the ignored
    # square, outline included, at half size), and the zone's 800 of its 120 x 80
    assert res.fg_ratio == pytest.approx(1200 / (120 * 160 - 31 * 31), rel=0.01)
    assert res.zones == {"right": pytest.approx(800 / (120 * 80), rel=0.02)}
