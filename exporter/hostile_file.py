"""Reading a file that someone else may have written, as hostile input.

Every file the product reads from a directory users can write (heartbeats today) goes
through `read_hostile`: a user there chooses what sits under a name, so it may be a
symlink to a device, a named pipe that blocks an open, a file that never ends, or a file
of theirs under another job's name. The read therefore:

- resolves one name in a directory opened once (no path walk, no `..`, no separators);
- looks at the entry without following it (`lstat`) and refuses anything but a regular
  file before opening it, so no device or pipe is ever opened;
- opens with ``O_NOFOLLOW | O_NONBLOCK | O_NOCTTY`` (a symlink swapped in between fails,
  a pipe swapped in cannot block) and checks the open descriptor again: a regular file,
  the same inode the `lstat` saw;
- asks the caller whether the file's owner may speak before reading a byte;
- reads at most ``max_bytes``, the caller's bound for what it reads (one byte more tells
  an over-long file, which is refused).

It never raises for what a user can arrange; every refusal says why (for logs and tests).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class Refusal(Enum):
    """Why a hostile file was not read."""

    MISSING = "no such entry (or it vanished)"
    BAD_NAME = "not a plain file name"
    NOT_REGULAR = "not a regular file (symlink, pipe, device, socket or directory)"
    SWAPPED = "replaced between the look and the open"
    OWNER = "owned by a user who may not speak for it"
    TOO_LARGE = "larger than the bound"
    UNREADABLE = "could not be read"


@dataclass(frozen=True)
class HostileRead:
    """What was read: the bytes, and the descriptor's stat (owner, inode, times)."""

    data: bytes
    stat: os.stat_result


def signature(st: os.stat_result) -> tuple[int, ...]:
    """What changes when a file is replaced, rewritten or given away."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def look(directory_fd: int, name: str) -> os.stat_result | Refusal:
    """The entry as it is, not following it; a refusal unless it is a regular file."""
    if not name or "/" in name or name in (".", ".."):
        return Refusal.BAD_NAME
    try:
        st = os.stat(name, dir_fd=directory_fd, follow_symlinks=False)
    except OSError:
        return Refusal.MISSING
    return st if stat.S_ISREG(st.st_mode) else Refusal.NOT_REGULAR


def read_hostile(
    directory_fd: int,
    name: str,
    may_own: Callable[[int], bool],
    max_bytes: int,
) -> HostileRead | Refusal:
    """The file ``name`` in the open directory, read as the module docstring says."""
    seen = look(directory_fd, name)
    if isinstance(seen, Refusal):
        return seen
    try:
        fd = os.open(name, _OPEN_FLAGS, dir_fd=directory_fd)
    except OSError as error:
        # ELOOP: a symlink was swapped in after the look; anything else: it went away.
        return Refusal.SWAPPED if error.errno == errno.ELOOP else Refusal.MISSING
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return Refusal.NOT_REGULAR
        if (st.st_dev, st.st_ino) != (seen.st_dev, seen.st_ino):
            return Refusal.SWAPPED
        if not may_own(st.st_uid):
            return Refusal.OWNER
        chunks: list[bytes] = []
        left = max_bytes + 1
        while left > 0:
            chunk = os.read(fd, left)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    except OSError:
        return Refusal.UNREADABLE
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > max_bytes:
        return Refusal.TOO_LARGE
    return HostileRead(data=data, stat=st)


def open_directory(path: str) -> int | None:
    """A descriptor on the directory users write into; None when it cannot be opened.
    The directory itself is the site's (configured), so it may be reached by a path."""
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
