"""Open a file beneath a folder without following any link on the way.

The workspace tools check where a path leads, then open it. Between the two,
another program may swap a folder on the way for a link to somewhere else;
opening by path would then follow the link out. Opening here never follows a
link, so a path that was checked cannot be made to lead elsewhere: the open
fails instead.

On Linux (5.6 and later) this is one ``openat2`` call with ``RESOLVE_BENEATH``
and ``RESOLVE_NO_SYMLINKS``, so the kernel does the walk. Elsewhere, or where a
sandbox refuses ``openat2``, each part of the path is opened in turn from the
folder before it, with ``O_NOFOLLOW``: the same rule, walked by hand.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import stat
import sys

# <linux/openat2.h>
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
# openat2 has the same number on every architecture since Linux 5.1 unified the new
# ones (alpha alone adds 110); the machines below are those Conch is known to run on.
SYS_OPENAT2 = 437
_OPENAT2_MACHINES = {"x86_64", "amd64", "aarch64", "arm64", "riscv64", "ppc64le", "s390x"}
# The kernel gives up with EAGAIN if a rename elsewhere raced the walk: try again a few times.
_AGAIN_TRIES = 8

_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


class _OpenHow(ctypes.Structure):
    _fields_ = [
        ("flags", ctypes.c_uint64),
        ("mode", ctypes.c_uint64),
        ("resolve", ctypes.c_uint64),
    ]


def _libc_syscall():
    if not sys.platform.startswith("linux") or platform.machine().lower() not in _OPENAT2_MACHINES:
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    call = libc.syscall
    call.restype = ctypes.c_long
    return call


_syscall = _libc_syscall()
# None until the first call finds out whether this kernel (and its sandbox) has openat2.
_openat2_works: bool | None = None if _syscall is not None else False


def _openat2(dir_fd: int, path: str, flags: int, mode: int) -> int:
    how = _OpenHow(
        flags=flags | _CLOEXEC,
        mode=mode if flags & os.O_CREAT else 0,
        resolve=RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
    )
    encoded = os.fsencode(path)
    for _ in range(_AGAIN_TRIES):
        fd = _syscall(
            ctypes.c_long(SYS_OPENAT2),
            ctypes.c_int(dir_fd),
            ctypes.c_char_p(encoded),
            ctypes.byref(how),
            ctypes.c_size_t(ctypes.sizeof(how)),
        )
        if fd >= 0:
            return fd
        code = ctypes.get_errno()
        if code != errno.EAGAIN:
            raise OSError(code, os.strerror(code), path)
    raise OSError(errno.EAGAIN, os.strerror(errno.EAGAIN), path)


def openat2_available() -> bool:
    """Whether ``open_beneath`` lets the kernel walk (``openat2``) rather than walking by hand."""
    global _openat2_works
    if _openat2_works is None:
        probe = os.open("/", os.O_RDONLY | _DIRECTORY | _CLOEXEC)
        try:
            os.close(_openat2(probe, ".", os.O_RDONLY | _DIRECTORY, 0))
            _openat2_works = True
        except OSError as exc:
            # ENOSYS: an old kernel. EPERM: a container's seccomp filter that predates it.
            if exc.errno not in (errno.ENOSYS, errno.EPERM):
                raise
            _openat2_works = False
        finally:
            os.close(probe)
    return _openat2_works


def _parts(relpath: str) -> list[str]:
    parts = [p for p in relpath.split("/") if p not in ("", ".")]
    if relpath.startswith("/") or ".." in parts:
        # The caller resolves the path first; anything climbing out here is a bug or a race.
        raise OSError(errno.EXDEV, "the path leaves the folder", relpath)
    return parts


def _open_part(dir_fd: int, name: str, flags: int, mode: int) -> int:
    try:
        return os.open(name, flags | _NOFOLLOW | _CLOEXEC, mode, dir_fd=dir_fd)
    except NotADirectoryError:
        # O_DIRECTORY|O_NOFOLLOW on a link says ENOTDIR: say ELOOP, as openat2 would.
        try:
            found = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except OSError:
            found = None
        if found is not None and stat.S_ISLNK(found.st_mode):
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), name) from None
        raise


def _walk(root_fd: int, relpath: str, flags: int, mode: int) -> int:
    parts = _parts(relpath)
    if not parts:
        return os.open(".", flags | _CLOEXEC, mode, dir_fd=root_fd)
    current = root_fd
    try:
        for name in parts[:-1]:
            step = _open_part(current, name, os.O_RDONLY | _DIRECTORY, 0)
            if current != root_fd:
                os.close(current)
            current = step
        return _open_part(current, parts[-1], flags, mode)
    finally:
        if current != root_fd:
            os.close(current)


def open_beneath(root_fd: int, relpath: str, flags: int, mode: int = 0o666) -> int:
    """A descriptor for ``relpath`` inside the folder open at ``root_fd``.

    ``relpath`` is relative, already resolved (no ``..``, no links expected).
    Raises ``OSError``: ``ELOOP`` when a link is met anywhere on the way,
    ``EXDEV`` when the path would leave the folder, and the usual errors
    (``ENOENT``, ``EISDIR``, …) otherwise.
    """
    if openat2_available():
        parts = _parts(relpath)
        return _openat2(root_fd, "/".join(parts) or ".", flags, mode)
    return _walk(root_fd, relpath, flags, mode)


def makedirs_beneath(root_fd: int, reldir: str) -> None:
    """Make the folders of ``reldir`` that are missing, each inside the one before it.

    ``mkdir`` never follows a link in the name it makes, and each parent is
    opened with ``open_beneath``, so a swapped-in link is refused, not followed.
    """
    parts = _parts(reldir)
    for depth in range(1, len(parts) + 1):
        try:
            os.close(open_beneath(root_fd, "/".join(parts[:depth]), os.O_RDONLY | _DIRECTORY))
            continue
        except FileNotFoundError:
            pass
        parent = open_beneath(
            root_fd, "/".join(parts[: depth - 1]) or ".", os.O_RDONLY | _DIRECTORY
        )
        try:
            os.mkdir(parts[depth - 1], 0o777, dir_fd=parent)
        except FileExistsError:
            pass  # made meanwhile: the next round opens it, refusing it if it is a link
        finally:
            os.close(parent)
        os.close(open_beneath(root_fd, "/".join(parts[:depth]), os.O_RDONLY | _DIRECTORY))


def open_folder(path: str) -> int:
    """A directory descriptor for the folder at ``path``, to open things beneath."""
    return os.open(path, os.O_RDONLY | _DIRECTORY | _CLOEXEC)
