"""Whether two replies work in the same place: the same computer and the same folder.

The same folder is the same one, or one inside the other, with links followed
and case folded where the disk ignores case. Inside Conch's own folder, where
each task's worktree is, only the very same folder counts: two worktrees
side by side are different places even though both sit under it.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from django.conf import settings


def conch_own_folder() -> str:
    return _own_folder(str(settings.CONCH_HOME))


@lru_cache(maxsize=8)
def _own_folder(home: str) -> str:
    return os.path.realpath(Path(home) / "worktrees")


@lru_cache(maxsize=4096)
def _real(path: str) -> str:
    return os.path.realpath(os.path.expanduser(path or "/"))


@lru_cache(maxsize=4096)
def disk_ignores_case(real_path: str) -> bool:
    """Ask the disk itself: does the folder answer to its name in the other case?"""
    probe = real_path
    while probe and probe != os.path.dirname(probe):
        name = os.path.basename(probe)
        swapped = name.swapcase()
        if swapped != name:
            other = os.path.join(os.path.dirname(probe), swapped)
            try:
                return os.path.exists(other) and os.path.samefile(probe, other)
            except OSError:
                return False
        probe = os.path.dirname(probe)
    return False


def folder_key(path: str) -> str:
    real = _real(path)
    return real.casefold() if disk_ignores_case(real) else real


def _inside(child: str, parent: str) -> bool:
    return child == parent or child.startswith(parent.rstrip(os.sep) + os.sep)


def same_folder(a: str, b: str) -> bool:
    ka, kb = folder_key(a), folder_key(b)
    own = folder_key(conch_own_folder())
    if _inside(ka, own) or _inside(kb, own):
        return ka == kb
    return _inside(ka, kb) or _inside(kb, ka)


def same_place(place_a: str, folder_a: str, place_b: str, folder_b: str) -> bool:
    return place_a == place_b and same_folder(folder_a, folder_b)


def for_person(path: str) -> str:
    """A folder the way a person reads it: ``~/src/app``."""
    home = os.path.expanduser("~")
    if home and home != "/" and _inside(path, home):
        return "~" + path[len(home) :]
    return path


def shown_path(path: str, folder: str) -> str:
    """A changed file relative to the folder a chat works in, or as a person reads it."""
    real_folder = _real(folder)
    if _inside(path, real_folder) and path != real_folder:
        return path[len(real_folder.rstrip(os.sep)) + 1 :]
    return for_person(path)


def forget() -> None:
    """Drop cached answers (tests that make and remove links)."""
    _real.cache_clear()
    disk_ignores_case.cache_clear()
    _own_folder.cache_clear()
