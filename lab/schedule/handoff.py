"""The threads of the overlap engine (:mod:`lab.schedule.overlap`): how each layer is handed
from the main thread to the one communication thread per rank and back.

Backward's hooks mark a layer's gradient ready; the thread takes one job per step from a queue
and runs the engine's ``_exchange`` on it; the next forward's pre-hooks wait until each layer
is applied and its emulated delivery time has passed. An exception in the thread wakes the main
thread, which re-raises it. What is sent, in which order, and the update stay in
:mod:`lab.schedule.overlap`.
"""
from __future__ import annotations

import queue
import threading
import time

from . import realtime

_POLL = 0.05  # seconds between checks for a failed peer thread while waiting


class _Abort(Exception):
    pass


class LayerHandoff:
    """Per-layer events, the hooks that set and wait for them, and the communication thread.
    Mixed into :class:`lab.schedule.overlap.Overlap`, which provides ``engine``, ``layers``,
    ``timeline``, ``_left`` (parameters still without a gradient, per layer, set each step),
    ``_step`` (the step whose backward runs), ``stamps`` (where the layers' ready times are
    posted for the other ranks, :mod:`lab.schedule.stamps`, or None), ``realtime`` and
    ``_exchange(*job)``, the thread's work for each job queued."""

    def _start_thread(self, sites) -> None:
        """The events, the hooks on every waiting site in ``sites`` and every parameter, then
        the thread."""
        n = len(self.layers)
        self.ready = [threading.Event() for _ in range(n)]
        self.applied = [threading.Event() for _ in range(n)]
        for ev in self.applied:
            ev.set()
        self.ready_t = [0.0] * n    # when each layer's gradient was ready (this step)
        self.avail_t = [0.0] * n    # when each layer's new parameters are there (emulated)
        self._hooks = []
        for site, layers in sites.items():
            self._hooks.append(site.register_forward_pre_hook(self._before_forward(layers)))
        for layer, (_, ps) in enumerate(self.layers):
            for p in ps:
                self._hooks.append(p.register_post_accumulate_grad_hook(self._grad_ready(layer)))
        self.origin = time.perf_counter()
        self.events, self.waited, self._step = [], 0.0, -1
        self.error: BaseException | None = None
        self.stopping, self.closed = False, False
        self.jobs: queue.Queue = queue.Queue()
        self.thread = threading.Thread(target=self._drain, name="lab-comm", daemon=True)
        self.thread.start()

    # -- hooks (main thread) --------------------------------------------------------------
    def _grad_ready(self, layer):
        def hook(_p):
            self._left[layer] -= 1
            if self._left[layer] == 0:
                now = self.ready_t[layer] = time.perf_counter()
                if self.stamps is not None:
                    self.stamps.post(self._step, layer, now)
                self._event("ready", layer)
                self.ready[layer].set()
        return hook

    def _before_forward(self, layers):
        def hook(_module, _inputs):
            for layer in layers:
                self._wait(layer)
                self._event("fwd", layer)
        return hook

    def _wait(self, layer: int) -> None:
        """Until ``layer``'s update is applied and its emulated delivery time has passed."""
        t0 = time.perf_counter()
        ev = self.applied[layer]
        while not ev.wait(_POLL):
            if self.error is not None or not self.thread.is_alive():
                break
        if self.error is not None:
            raise RuntimeError(f"rank {self.engine.rank}: the communication thread failed") \
                from self.error
        left = self.avail_t[layer] - time.perf_counter()
        if left > 0:
            time.sleep(left)
        self.waited += time.perf_counter() - t0

    def _event(self, *ev) -> None:
        if self.timeline:
            self.events.append([*ev, time.perf_counter() - self.origin])

    # -- the communication thread ---------------------------------------------------------
    def _drain(self) -> None:
        self.thread_rt = self.realtime and realtime.promote()   # the calling thread only
        try:
            while (job := self.jobs.get()) is not None:
                self._exchange(*job)
        except _Abort:
            pass
        except BaseException as exc:  # surfaced by the main thread's next wait
            self.error = exc
            for ev in self.applied:
                ev.set()

    def _until_ready(self, layer: int) -> None:
        while not self.ready[layer].wait(_POLL):
            if self.stopping:
                raise _Abort

    def drain(self) -> None:
        """Wait until the last step's exchange is applied everywhere (e.g. before timing another
        schedule on the same ranks); not counted as exposed communication."""
        waited = self.waited
        for layer in range(len(self.layers)):
            self._wait(layer)
        self.waited = waited

    def close(self) -> None:
        """Stop the thread (the last step already waited for its exchange); safe twice."""
        if self.closed:
            return
        self.closed, self.stopping = True, True
        self.jobs.put(None)
        self.thread.join(timeout=1.0)
        for h in self._hooks:
            h.remove()
        for ev in self.applied:
            ev.set()
