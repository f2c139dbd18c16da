"""A small text progress meter for long commands (items done, items/s and ETA on one line,
written to stderr; redrawn on a terminal, at most every ``log_every`` seconds elsewhere)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TextIO, TypeAlias, cast

if TYPE_CHECKING:
    import signal
    from types import FrameType

    from django.core.management.base import OutputWrapper

    # What signal.signal() takes and returns.
    _SignalHandler: TypeAlias = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None


def command_stream(output: OutputWrapper) -> TextIO:
    """The stream under a command's ``self.stdout``/``self.stderr`` wrapper (no added newlines)."""
    # Django's OutputWrapper keeps the stream in ``_out``, which django-stubs do not declare.
    return cast(TextIO, output._out)


def format_duration(seconds: float) -> str:
    """``75`` → ``"1:15"``, ``3725`` → ``"1:02:05"``."""
    seconds = max(0, round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class Progress:
    """``Progress(total, label="images")``; ``advance(n)`` after each batch, ``close()`` at the
    end. ``total`` None: unknown length (no bar, no ETA)."""

    def __init__(
        self,
        total: int | None,
        *,
        label: str = "images",
        stream: TextIO | None = None,
        log_every: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total = total
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.log_every = log_every
        self.clock = clock
        self.done = 0
        self.started = clock()
        # A stream of unknown length writes its first line after ``log_every`` seconds.
        self._last_write = float("-inf") if total is not None else self.started
        self._tty = bool(getattr(self.stream, "isatty", lambda: False)())

    @property
    def elapsed(self) -> float:
        return self.clock() - self.started

    @property
    def rate(self) -> float:
        elapsed = self.elapsed
        return self.done / elapsed if elapsed > 0 else 0.0

    @property
    def eta(self) -> float | None:
        rate = self.rate
        if self.total is None:
            return None
        return (self.total - self.done) / rate if rate > 0 else None

    def line(self) -> str:
        if self.total is None:
            return f"{self.done} {self.label} ({self.rate:.0f}/s, {format_duration(self.elapsed)})"
        width = 24
        frac = self.done / self.total if self.total else 1.0
        bar = "#" * int(frac * width) + "-" * (width - int(frac * width))
        eta = self.eta
        eta_text = format_duration(eta) if eta is not None else "?"
        return (
            f"[{bar}] {self.done}/{self.total} {self.label} {frac:6.1%} "
            f"{self.rate:.2f} {self.label}/s ETA {eta_text}"
        )

    def advance(self, n: int = 1) -> None:
        self.done += n
        now = self.clock()
        if self._tty:
            self.stream.write("\r" + self.line())
            self.stream.flush()
        elif now - self._last_write >= self.log_every or (self.total is not None and self.done >= self.total):
            self.stream.write(self.line() + "\n")
            self.stream.flush()
            self._last_write = now

    def close(self) -> None:
        """End the line (a logged meter of unknown total writes its final count)."""
        if self._tty or (self.total is None and self._last_write > self.started):
            self.stream.write("\n" if self._tty else self.line() + "\n")
            self.stream.flush()


class StageProgress:
    """One line per stage of a streamed import (``progress(stage, rows)``); ``close()`` at the end."""

    def __init__(self, stream: TextIO | None = None, *, log_every: float = 10.0) -> None:
        self.stream = stream
        self.log_every = log_every
        self.meters: dict[str, Progress] = {}
        self._current: Progress | None = None

    def __call__(self, stage: str, rows: int) -> None:
        meter = self.meters.get(stage)
        if meter is None:
            if self._current is not None:
                self._current.close()
            meter = self.meters[stage] = Progress(
                None, label=f"rows {stage}", stream=self.stream, log_every=self.log_every
            )
            self._current = meter
        meter.advance(rows)

    def close(self) -> None:
        if self._current is not None:
            self._current.close()
            self._current = None


class StopFlag:
    """Set by SIGINT/SIGTERM while installed (``with StopFlag() as stop``): loops stop after the
    current batch; a second signal raises KeyboardInterrupt."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.requested = False
        self._previous: dict[int, _SignalHandler] = {}

    def __bool__(self) -> bool:
        return self.requested

    def __call__(self) -> bool:
        return self.requested

    def request(self, signum: int | None = None, frame: object = None) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        self.stream.write("\nStopping after the current batch (signal again to abort now)…\n")
        self.stream.flush()

    def __enter__(self) -> StopFlag:
        import signal
        import threading

        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                self._previous[signum] = signal.signal(signum, self.request)
        return self

    def __exit__(self, *exc: object) -> None:
        import signal

        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()
