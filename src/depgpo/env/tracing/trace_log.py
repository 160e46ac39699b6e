"""An episode's strace log, read as it grows: whole lines only, in bounded chunks, and the flood limit."""

from __future__ import annotations

import os
from pathlib import Path

from depgpo.env.tracing.trace_parser import TraceParser

TRACE_CHUNK = 16 << 20  # bytes of strace log parsed at a time


class TraceLimit(RuntimeError):
    """The agent's commands flooded the tracer past SandboxLimits.trace_bytes: the episode ends, reward 0."""


class TraceLog:
    """One shell's log (`path`) on the episode's trace tmpfs (`traces`, of `trace_bytes`), fed to `parser`."""

    def __init__(self, path: Path, traces: Path, trace_bytes: int, parser: TraceParser):
        self.path, self.traces, self.trace_bytes, self.parser = path, traces, trace_bytes, parser
        self.offset = 0

    def feed(self) -> None:
        """Parse what strace has written since the last call. Raises TraceLimit when the tmpfs is full."""
        try:
            fh = open(self.path, "rb")
        except FileNotFoundError:
            return
        with fh:
            fh.seek(self.offset)
            for chunk in iter(lambda: fh.read(TRACE_CHUNK), b""):  # bounded memory, however large the log
                # Whole lines only: strace may be mid-line, and a half-written UTF-8 sequence must not be decoded.
                whole = chunk[:chunk.rfind(b"\n") + 1]
                self.offset += len(whole)
                self.parser.feed(whole.decode("utf-8", "replace"))
                if len(whole) < len(chunk):
                    fh.seek(self.offset)
                    if not whole:
                        break
        if self._full():
            raise TraceLimit(f"the episode's commands made more than {self.trace_bytes} bytes of trace "
                             "(SandboxLimits.trace_bytes); the episode ends here")

    def _full(self) -> bool:
        try:
            st = os.statvfs(self.traces)
        except OSError:
            return False
        return os.path.ismount(self.traces) and st.f_bavail * st.f_frsize < 4 << 20
