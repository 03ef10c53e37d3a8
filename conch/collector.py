"""Python's garbage collector, settled for a long-running server once it has started.

A full (oldest-generation) collection walks every tracked object the process holds.
By the time ``conch serve`` listens, that is some 200,000 objects that live as long as
the process does (Django, its apps, Daphne, Twisted, the model SDK, compiled
templates), and walking them took 100-190 ms on this project's two-core machine: a
pause that held the GIL and so every request, push and reply in flight, every few
seconds while requests came in (it showed in the inbound door's p99).

:func:`settle` collects what start-up left as garbage, then moves everything that is
left into the permanent generation (:func:`gc.freeze`), which collections never walk:
a full collection walks only what the server made since. It is called once, when
start-up is done; reference counting still frees everything at once as before, and
cycles made after it are still found. What start-up made and would later drop in a
cycle stays until the process ends, a small and bounded cost.
"""

from __future__ import annotations

import gc


def settle() -> int:
    """Collect start-up's garbage and freeze what is left; how many objects were frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
