"""Progress of the long stages (SFT steps, filtering attempts, RL updates, evaluation episodes) on stderr.

    with Progress(total, "sft", "step") as progress:
        for ...:
            progress.advance(loss=f"{loss:.3f}")

In a terminal, a tqdm bar. Where stderr is not a terminal (a Snakemake rule's log, a Slurm job's log), one plain
line every `every_percent` of the work or every `every_s` seconds, whichever comes first, and one at the end, so that
`tail -f LOG` shows where a stage stands without a bar's carriage returns. Under CI (CI=true), nothing.
DEPGPO_PROGRESS=bar|lines|off overrides the choice.

It only counts and prints: no random draw, no tensor, so a run's results are the same with or without it.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import IO

MODES = ("bar", "lines", "off")
MODE_VARIABLE = "DEPGPO_PROGRESS"


def progress_mode(stream: IO[str]) -> str:
    """bar, lines or off: DEPGPO_PROGRESS if set to one of them, off under CI, a bar on a terminal, else lines."""
    chosen = os.environ.get(MODE_VARIABLE, "").strip().lower()
    if chosen in MODES:
        return chosen
    if os.environ.get("CI", "").strip().lower() in ("1", "true", "yes"):
        return "off"
    isatty = getattr(stream, "isatty", None)
    return "bar" if callable(isatty) and isatty() else "lines"


def _columns(stream: IO[str]) -> int:
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError):
        return 0


def duration(seconds: float) -> str:
    """4m02s, 1h03m, 12s."""
    seconds = max(0, int(round(seconds)))
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{seconds:02d}s" if minutes else f"{seconds}s"


class Progress:
    """Counts `total` units of work named `unit` under `label`; `advance(n, key=value...)` after each."""

    def __init__(self, total: int, label: str, unit: str, stream: IO[str] | None = None, every_percent: float = 10.0,
                 every_s: float = 60.0, initial: int = 0, note: str = "", quiet: bool = False,
                 clock: Callable[[], float] = time.monotonic):
        """`initial`: units already done (a resumed run); `note`: the first line (what runs, where its results go);
        `quiet`: nothing at all, whatever the mode."""
        self.total, self.label, self.unit = max(0, int(total)), label, unit
        self.stream = stream if stream is not None else sys.stderr
        self.every_percent, self.every_s, self.clock = every_percent, every_s, clock
        self.mode = "off" if quiet else progress_mode(self.stream)
        self.done = self.last_done = self.initial = initial
        self.status: dict[str, object] = {}
        self.started = self.last_line = clock()
        self.bar = None
        self.solved = 0  # rollout_done's count
        if self.mode != "off":
            self._line(note or f"{initial}/{self.total} {unit}s")
        if self.mode == "bar":
            from tqdm import tqdm

            sized = _columns(self.stream) > 0  # a terminal that says its width (a bare pty says 0)
            self.bar = tqdm(total=self.total, initial=initial, desc=label, unit=unit, file=self.stream,
                            dynamic_ncols=sized, ncols=None if sized else 100, mininterval=0.5)

    def advance(self, n: int = 1, **status: object) -> None:
        self.done += n
        self.status.update(status)
        if self.bar is not None:
            if status:
                self.bar.set_postfix({key: str(value) for key, value in self.status.items()}, refresh=False)
            self.bar.update(n)
        elif self.mode == "lines":
            now = self.clock()
            step = self.total * self.every_percent / 100
            if self.done >= self.total or self.done - self.last_done >= step or now - self.last_line >= self.every_s:
                self._report(now)

    def rollout_done(self, rollout) -> None:
        """`attempt_tasks`' on_rollout for filtering and evaluation: one more episode, and the count solved so far."""
        self.solved += rollout.reward >= 1.0
        self.advance(solved=self.solved)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        elif self.mode == "lines" and self.done != self.last_done:
            self._report(self.clock())

    def _report(self, now: float) -> None:
        elapsed = now - self.started
        words = f"{self.done}/{self.total} {self.unit}s"
        if self.total:
            words += f" ({100 * self.done / self.total:.0f}%)"
        words += f", {duration(elapsed)}"
        if self.initial < self.done < self.total:  # the rate of this process's own work
            words += f", ~{duration(elapsed / (self.done - self.initial) * (self.total - self.done))} left"
        if self.status:
            words += "; " + " ".join(f"{key} {value}" for key, value in self.status.items())
        self._line(words)
        self.last_line, self.last_done = now, self.done

    def _line(self, words: str) -> None:
        print(f"[{self.label}] {words}", file=self.stream, flush=True)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
