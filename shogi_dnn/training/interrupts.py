"""Stopping a run cleanly: the stop request (SIGINT/SIGTERM -> StopFlag) and the stage input teardowns
that run in the background so that neither the checkpoint nor the exit waits for them.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

log = logging.getLogger(__name__)


class StopFlag:
    """Set by SIGINT/SIGTERM (e.g. a reclaimed spot instance); the loop checks it after every update.

    A second SIGINT while stopping raises KeyboardInterrupt (the user insists)."""

    def __init__(self) -> None:
        self.requested = False
        self.signal_name = ""
        # What a stop request does now, logged when a signal arrives ("": nothing logged, e.g. while a
        # cluster's worker waits for the others: the wait ends with its own line).
        self.action = "saving a checkpoint at the current step, then exiting"

    def request(self, name: str = "request") -> None:
        self.requested, self.signal_name = True, name

    def _handle(self, signum: int, frame: Any) -> None:
        if self.requested and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.request(signal.Signals(signum).name)
        if self.action:
            log.info("%s: %s", self.signal_name, self.action)

    @contextlib.contextmanager
    def catch_signals(self) -> Iterator[StopFlag]:
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = {sig: signal.signal(sig, self._handle) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield self
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


RELEASE_THREAD = "release-stage-input"
# A teardown still running when the interpreter exits can abort the process inside TensorFlow's C++ (seen
# once: "terminate called ... exception not rethrown" after a finished run), so a run waits for its
# teardowns before returning: long after a finished run (they are usually done), briefly after a stop.
RELEASE_WAIT_DONE, RELEASE_WAIT_STOPPED = 60.0, 5.0


def release_in_background(holder: list[Any]) -> threading.Thread:
    """Drop the objects of `holder` (the only references to a stage's input iterator) in a daemon thread.

    Destroying a tf.data iterator whose prefetch thread is inside a Python generator call waits for that
    call (a whole shuffle buffer read) and then for the generator's cleanup; on the main thread that wait
    came before the stage's checkpoint (once in five Ctrl-Cs at a stage boundary, 50+ s without output).
    In a daemon thread it overlaps the validation and the checkpoint, and never holds up the exit."""
    thread = threading.Thread(target=holder.clear, name=RELEASE_THREAD, daemon=True)
    thread.start()
    return thread


@contextlib.contextmanager
def stage_input(holder: list[Any], releases: list[threading.Thread]) -> Iterator[list[Any]]:
    """Use a stage's input iterator (holder[0], the only reference to it) for the block; then tear it down.

    A block that ends (finished or stopped) releases it in the background (release_in_background, the
    thread appended to `releases` for join_releases): its teardown waits for the generator call in
    flight (a whole shuffle buffer) and the generator's cleanup, seen to take 50+ s after a Ctrl-C at a
    stage boundary; the validation, the checkpoint and the exit that follow do not wait for it. An error
    tears it down here before it propagates, so that no teardown thread is still inside TensorFlow when
    the interpreter exits (a chief whose worker died aborted that way).
    """
    try:
        yield holder
    except BaseException:
        holder.clear()
        raise
    releases.append(release_in_background(holder))


def join_releases(threads: list[threading.Thread], timeout: float) -> None:
    """Wait up to `timeout` seconds in all for the stage teardowns started by release_in_background."""
    deadline = time.perf_counter() + timeout
    for thread in threads:
        thread.join(max(0.0, deadline - time.perf_counter()))
    threads[:] = [t for t in threads if t.is_alive()]
