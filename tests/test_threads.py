"""sampler.threads.map_threads: the plain loop's results and errors, on several threads."""

from __future__ import annotations

import threading
import time

import pytest

from sampler.threads import map_threads


def test_results_in_item_order_on_several_threads():
    seen = set()

    def slow_first(i: int) -> int:
        seen.add(threading.get_ident())
        time.sleep(0.05 if i == 0 else 0.0)  # item 0 finishes last
        return i * i

    assert map_threads(slow_first, range(20), threads=4) == [i * i for i in range(20)]
    assert len(seen) > 1
    assert map_threads(slow_first, [], threads=4) == []
    assert map_threads(slow_first, [3], threads=1) == [9]


def test_the_first_failing_item_in_order_raises():
    """Item 7 fails at once, item 2 later: the loop would have raised item 2's error."""

    def fail(i: int) -> int:
        if i == 2:
            time.sleep(0.05)
            raise ValueError("item 2")
        if i == 7:
            raise KeyError("item 7")
        return i

    with pytest.raises(ValueError, match="item 2"):
        map_threads(fail, range(10), threads=3)
