"""The CPU live-bytes counter the memory-bound tests rely on: a wrong count would pass them."""

from __future__ import annotations

import torch
from live_bytes import LiveBytes, LiveBytesTracker


def test_counts_new_storages_until_freed_and_views_add_nothing():
    with LiveBytes() as live:
        a = torch.empty(1000)
        assert live.allocated == 4000
        v = a[10:20].view(2, 5)
        a.add_(1)  # in place: nothing new
        assert live.allocated == 4000
        b = a * 2
        assert live.allocated == 8000 and live.peak == 8000
        del a
        assert live.allocated == 8000  # the view keeps it
        del v
        assert live.allocated == 4000
        del b
        assert live.allocated == 0 and live.peak == 8000


def test_the_tracker_measures_a_section_beyond_what_was_allocated():
    with LiveBytes() as live:
        tracker = LiveBytesTracker(live)
        keep = torch.empty(250)
        tracker.start()

        def work():
            t = torch.empty(1000)
            u = torch.empty(500)
            del t, u
            return torch.empty(10)

        out, cost = tracker.section(work)
        assert cost == 6000 and tracker.allocated() == 1040
        assert tracker.overall() == 7000
        del keep, out
