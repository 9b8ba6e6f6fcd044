"""The worker's snapshot at stop: frame | background | score | mask, whatever the mask's resolution."""

import numpy as np

from streamer.processes.worker import contact_sheet


def test_masks_at_the_processing_resolution_are_brought_to_the_frames_size():
    frame = np.full((720, 1280), 7, np.uint8)
    mask = np.zeros((180, 320), np.uint8)  # 1280 x 720's processing size
    mask[50:100, 100:200] = 255
    sheet = contact_sheet(frame, None, np.full((180, 320), 0.1, np.float32), mask)
    assert sheet.shape == (720, 4 * 1280) and sheet.dtype == np.uint8
    assert (sheet[:, :1280] == 7).all() and (sheet[:, 1280:2560] == 0).all()  # frame, then no background yet
    assert (sheet[:, 2560:3840] == 102).all()  # score 0.1 shown x4: 0.4 * 255
    shown = sheet[:, 3840:] > 0
    assert abs(shown.mean() - (mask > 0).mean()) < 0.01  # the mask's blob, enlarged
