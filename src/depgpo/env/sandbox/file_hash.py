"""What hashing the agent's files may cost the harness: per file and per episode, bounded and recorded.

The harness hashes a file when the episode starts (the task's files), after each command that wrote it, and when
the judge asks whether the agent changed a file the verifier ran or read (judging/tampering.agent_change). Hashing
whole files made that linear in what the agent could allocate: 16 sparse 1000 MB files (`truncate -s`) cost an
episode 14.7 s against 1.2 s, 0.85 s each, bounded by nothing but the inode limit. Now (docs/threat-model.md):

- A file of at most `FILE_SHA256_MAX_BYTES` (64 MiB) is hashed whole: "sha256:HEX" of its content, as before.
- A larger one is hashed by its data alone: "sparse-sha256:HEX" over its size and the offsets and content of its
  data extents (SEEK_DATA, SEEK_HOLE): holes cost nothing. Content and allocation together: a change of content
  always changes it; an allocation change alone (a hole written with zeros) may too, and counts as a change.
- A file is read for at most `HashBudget.file_bytes` of data (64 MiB) and the episode for at most
  `HashBudget.episode_bytes` (1 GiB) beyond the line-tracked files (at most scope.TEXT_MAX_BYTES each, read whole
  for their lines anyway). A file past either bound is not hashed: its version is
  "unhashed:SIZE:INODE:MTIME_NS:CTIME_NS", and the path is kept in `HashBudget.unhashed` with why. That is metadata,
  not content (on tmpfs a write through a shared mapping into a hole changes neither time), so the judge never takes
  an unhashed file for unchanged: it counts as changed ("unknown"). An agent can spend the budget; it only makes its
  own files count as changed.
"""

from __future__ import annotations

import errno
import hashlib
import os
from dataclasses import dataclass, field

from depgpo.trajectory.scope import TEXT_MAX_BYTES

FILE_SHA256_MAX_BYTES = 64 << 20  # hashed whole up to here (the format every earlier record has)
FILE_DATA_MAX_BYTES = 64 << 20    # the data read of one file, at most
EPISODE_HASH_BYTES = 1 << 30      # the data read of an episode's files larger than TEXT_MAX_BYTES, at most (~0.9 s)
CHUNK = 1 << 20
UNHASHED = "unhashed:"


@dataclass
class HashBudget:
    """One episode's allowance (SandboxLayout.hashing), and what it left unhashed."""

    file_bytes: int = FILE_DATA_MAX_BYTES
    episode_bytes: int = EPISODE_HASH_BYTES
    spent: int = 0                                           # data read of files larger than TEXT_MAX_BYTES
    unhashed: dict[str, str] = field(default_factory=dict)   # sandbox path -> why it was not hashed (last time)

    def refusal(self, cost: int) -> str | None:
        """Why a file whose data are `cost` bytes is not to be read, or None."""
        if cost <= TEXT_MAX_BYTES:
            return None
        if cost > self.file_bytes:
            return f"more than {_mib(self.file_bytes)} of data"
        if cost > self.episode_bytes - self.spent:
            return f"the episode's hashing budget ({_mib(self.episode_bytes)}) was spent"
        return None

    def charge(self, nbytes: int) -> None:
        if nbytes > TEXT_MAX_BYTES:
            self.spent += nbytes


def _mib(n: int) -> str:
    return f"{n >> 20} MiB"


def unhashed_version(st: os.stat_result) -> str:
    return f"{UNHASHED}{st.st_size}:{st.st_ino}:{st.st_mtime_ns}:{st.st_ctime_ns}"


def is_unhashed(version_hash: str | None) -> bool:
    return version_hash is not None and version_hash.startswith(UNHASHED)


def content_hash(fd: int, path: str, budget: HashBudget) -> str:
    """The hash of the regular file open at `fd` (sandbox path `path`) within `budget`, or its unhashed version."""
    st = os.fstat(fd)
    sparse = st.st_size > FILE_SHA256_MAX_BYTES
    cost = min(st.st_size, st.st_blocks * 512) if sparse else st.st_size  # st_blocks: what is allocated
    why = budget.refusal(cost)
    if why is None:
        digest, read = (_data_hash if sparse else _whole_hash)(fd, st.st_size, max(cost, TEXT_MAX_BYTES) + CHUNK)
        budget.charge(read)
        if digest is not None:
            budget.unhashed.pop(path, None)
            return digest
        why = "its data grew while it was read"
    budget.unhashed[path] = why
    return unhashed_version(st)


def _whole_hash(fd: int, size: int, limit: int) -> tuple[str | None, int]:
    digest, offset = hashlib.sha256(), 0
    while offset <= FILE_SHA256_MAX_BYTES and offset < limit:
        chunk = os.pread(fd, CHUNK, offset)
        if not chunk:
            return "sha256:" + digest.hexdigest(), offset
        digest.update(chunk)
        offset += len(chunk)
    return None, offset


def _data_hash(fd: int, size: int, limit: int) -> tuple[str | None, int]:
    """sha256 over the size and the offsets and content of each data extent (SEEK_DATA to SEEK_HOLE): reads what is
    allocated alone, at most `limit` bytes. A change of content changes it; so may a change of allocation alone
    (a hole written with zeros), which the judge then counts as a change too: never the other way round."""
    digest, offset, read = hashlib.sha256(b"%d\0" % size), 0, 0
    while offset < size:
        try:
            start = os.lseek(fd, offset, os.SEEK_DATA)
        except OSError as e:
            if e.errno == errno.ENXIO:  # no data past offset: a hole to the end
                break
            raise
        end = min(os.lseek(fd, start, os.SEEK_HOLE), size)
        if start >= end:
            break
        digest.update(b"%d:%d\0" % (start, end))
        while start < end:
            chunk = os.pread(fd, min(CHUNK, end - start), start)
            if not chunk:
                break  # it shrank meanwhile
            read += len(chunk)
            if read > limit:
                return None, read
            digest.update(chunk)
            start += len(chunk)
        offset = end
    return "sparse-sha256:" + digest.hexdigest(), read


def unhashed_notes(budget: HashBudget) -> list[str]:
    """A line for the trajectory's errors: the files the episode did not hash, and why."""
    items = sorted(budget.unhashed.items())
    if not items:
        return []
    shown = ", ".join(f"{path} ({why})" for path, why in items[:5])
    shown += f" and {len(items) - 5} more" if items[5:] else ""
    return [f"{len(items)} files were not hashed ({_mib(budget.spent)} of the episode's {_mib(budget.episode_bytes)} "
            f"spent): {shown}; recorded as 'unhashed:SIZE:INODE:MTIME_NS:CTIME_NS', and where the judge needed their "
            f"content they counted as changed (docs/threat-model.md)"]
