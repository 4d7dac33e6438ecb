"""What a person sees while a run works: one progress line per long step, and Prefect kept quiet.

Library code reports with `progress.step(name, done, total)`; nothing is shown unless a front end
(the `chunkeval` command) has installed a display with `show_progress()`. On a terminal the line is
redrawn in place as a bar; elsewhere (a log file, CI) each step prints one plain line.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager, nullcontext

from chunkeval.errors import InputError

_sink: Callable[[str, int | None, int | None], None] | None = None
_clocks: list[Stopwatch] = []  # the stopwatches timing a stage now, innermost last


def stage(name: str, show: bool = False):
    """Time the block as a stage of the run timing this work now (a context manager; nothing when none is)."""
    return _clocks[-1].stage(name, show) if _clocks else nullcontext()


NOTICE = "chunkeval_notice"  # a record attribute: a line a person should see that is not a warning


def notice(message: str, *args) -> None:
    """Say a line without -v that reports no problem (the backend `auto` chose, a probe begun): logged at WARNING
    level, so that every handler shows it as before (Prefect's flow logs too), and marked so that the command line
    prints it as `chunkeval: …`, without a `WARNING:` a healthy run should not show."""
    logging.getLogger("chunkeval").warning(message, *args, extra={NOTICE: True})


def step(name: str, done: int | None = None, total: int | None = None) -> None:
    """Report progress of a step (`done` of `total` units where it counts them)."""
    if _sink is not None:
        _sink(name, done, total)


def ended(name: str) -> None:
    """The step `name` is over (a shown stage has ended): no line repeats it while the next one has not begun."""
    if _sink is not None and hasattr(_sink, "end"):
        _sink.end(name)


class Stopwatch:
    """Seconds per stage of a run, in the order the stages first ran (a stage timed twice adds up): wall-clock
    seconds, and the CPU seconds of this process meanwhile (every thread; on a busy machine, what a stage cost).

    Stages nest: library code deep inside one opens its own with `progress.stage(name)` (a model built on first
    use, say), whose seconds are then its own and not its parent's."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.cpu: dict[str, float] = {}
        self._open: list[list[float]] = []  # per open stage: wall and CPU at its start, and its children's

    @contextmanager
    def stage(self, name: str, show: bool = False):
        """Time the block as stage `name`; with `show`, it is also the progress step shown meanwhile."""
        if show:
            step(name)
        frame = [time.perf_counter(), time.process_time(), 0.0, 0.0]
        self._open.append(frame)
        _clocks.append(self)
        try:
            yield
        finally:
            if show:
                ended(name)
            _clocks.remove(self)
            self._open.pop()
            wall, cpu = time.perf_counter() - frame[0], time.process_time() - frame[1]
            self.add(name, wall - frame[2], cpu - frame[3])
            if self._open:
                self._open[-1][2] += wall
                self._open[-1][3] += cpu

    def add(self, name: str, seconds: float, cpu: float = 0.0) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds
        self.cpu[name] = self.cpu.get(name, 0.0) + cpu

    def merge(self, seconds: dict[str, float], cpu: dict[str, float] | None = None) -> None:
        for name, value in seconds.items():
            self.add(name, value, (cpu or {}).get(name, 0.0))

    def line(self, width: int = 120) -> str:
        """What a command prints of its stages: `stage seconds: loading 1.20 (cpu 1.15), chunking 3.41 (cpu 3.30), …`,
        folded at `width` columns (the stages continue on indented lines)."""
        import textwrap

        text = "stage seconds: " + ", ".join(
            f"{name} {value:.2f} (cpu {self.cpu.get(name, 0.0):.2f})" for name, value in self.seconds.items()
        )
        return "\n".join(textwrap.wrap(text, width, subsequent_indent="  ", break_on_hyphens=False))


OFF_TERMINAL_EVERY = 10.0  # seconds: off a terminal, a long step says where it is at least this often


class TerminalProgress:
    """Progress of the long steps on `stream`: a bar redrawn in place on a terminal; off one (a log, CI), one line
    when a step begins, one at least every `OFF_TERMINAL_EVERY` seconds while it lasts (`tick`, called by
    `show_progress`'s clock, says it again where no update came: a batch, a request or a stage that takes long) and
    one when a bar is full (never one per update)."""

    def __init__(self, stream=None, width: int = 28):
        self.stream = stream or sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.width = width
        self.current: str | None = None
        self.counts: tuple[int | None, int | None] = (None, None)
        self.over = False  # the current step has ended (its bar is full, or its stage closed)
        self.started = time.monotonic()
        self.said = 0.0  # when the last line off a terminal was written
        self.lock = threading.Lock()

    def _line(self, now: float) -> str:
        name, (done, total) = self.current, self.counts
        elapsed = now - self.started
        if total:
            filled = int(self.width * min(done or 0, total) / total)
            line = f"{name:<10} [{'#' * filled}{'.' * (self.width - filled)}] {done}/{total}  {elapsed:4.0f} s"
            if done and done < total:  # at the pace so far
                line += f", about {elapsed * (total - done) / done:.0f} s left"
            return line
        return f"{name}…" + (f"  {elapsed:4.0f} s" if elapsed >= 1 else "")

    def __call__(self, name: str, done: int | None, total: int | None) -> None:
        with self.lock:
            began = name != self.current
            if began:
                if self.current is not None and self.tty:
                    self.stream.write("\n")
                self.current = name
                self.started = time.monotonic()
            now = time.monotonic()
            self.counts = (done, total)
            self.over = bool(total) and done == total
            line = self._line(now)
            if self.tty:
                self.stream.write("\r" + line)
            elif began or self.over or now - self.said >= OFF_TERMINAL_EVERY:
                self.stream.write(line + "\n")
                self.said = now
            self.stream.flush()

    def tick(self) -> None:
        """Off a terminal, the current step's line again where none was written for `OFF_TERMINAL_EVERY` seconds."""
        with self.lock:
            now = time.monotonic()
            if self.tty or self.current is None or self.over or now - self.said < OFF_TERMINAL_EVERY:
                return
            self.stream.write(self._line(now) + "\n")
            self.stream.flush()
            self.said = now

    def end(self, name: str) -> None:
        with self.lock:
            if name == self.current:
                self.over = True

    def close(self) -> None:
        if self.current is not None and self.tty:
            self.stream.write("\n")
            self.stream.flush()
        self.current = None


@contextmanager
def show_progress(stream=None):
    """Show progress on `stream` (stderr) while the block runs; the display is removed after it. Off a terminal a
    clock (a daemon thread) lets a long step say where it is at least every `OFF_TERMINAL_EVERY` seconds."""
    global _sink
    display = TerminalProgress(stream)
    _sink = display
    stop = threading.Event()
    clock = None
    if not display.tty:
        clock = threading.Thread(target=_tick, args=(display, stop), name="chunkeval-progress", daemon=True)
        clock.start()
    try:
        yield display
    finally:
        stop.set()
        if clock is not None:
            clock.join()
        _sink = None
        display.close()


def _tick(display: TerminalProgress, stop: threading.Event) -> None:
    while not stop.wait(min(1.0, OFF_TERMINAL_EVERY / 4)):
        display.tick()


def quiet_prefect(verbose: bool = False) -> None:
    """Keep Prefect's console to warnings (its logs still reach the Prefect API and UI), and keep a
    temporary server's telemetry off. Takes effect when called before Prefect is first imported."""
    os.environ.setdefault("PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL", "INFO" if verbose else "WARNING")
    if not verbose:  # a local Dask cluster's shutdown chatter (workers killed after their grace period)
        logging.getLogger("distributed").setLevel(logging.ERROR)
    if not os.environ.get("PREFECT_API_URL"):  # a temporary server: no telemetry, and time to start on a busy machine
        os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
        os.environ.setdefault("DO_NOT_TRACK", "1")  # the client's too: its first-run notice on a terminal says so
        os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")


# how Prefect's crash lines name an interrupt (^C, SIGTERM): they are not shown, the command's one line says it
INTERRUPTED = ("interrupt signal", "termination signal", "KeyboardInterrupt", "Terminated", "TerminationSignal")


class _SaidInOneLine(logging.Filter):
    """Drops Prefect's console records of an input error (its traceback, and the failed states that repeat
    it): the command says it in one line. Drops chunkeval's own records too where chunkeval's logger has a
    console of its own (the CLI's): that one says them, once. The records still reach the Prefect API and UI."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name.split(".")[0] == "chunkeval" and any(
            isinstance(h, logging.StreamHandler) for h in logging.getLogger("chunkeval").handlers
        ):
            return False

        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, InputError):
            return False
        message = record.getMessage()
        if ("Crash detected!" in message or "in state Crashed" in message or "Crashed(" in message) and any(
            why in message for why in INTERRUPTED
        ):  # an interrupt: the command says `chunkeval: interrupted`, the run is recorded so
            return False
        return "InputError" not in message


def one_line_input_errors() -> None:
    """Keep input errors raised in tasks to the command's one line on the console (called by a flow once
    Prefect has set up its logging: its console handler exists from then)."""
    from prefect.logging.handlers import PrefectConsoleHandler

    # its console handler, on the root logger: only that one (another stream handler there, a test's log capture
    # say, is not Prefect's console and keeps every record)
    for handler in logging.getLogger().handlers + logging.getLogger("prefect").handlers:
        if isinstance(handler, PrefectConsoleHandler) and not any(
            isinstance(f, _SaidInOneLine) for f in handler.filters
        ):
            handler.addFilter(_SaidInOneLine())
