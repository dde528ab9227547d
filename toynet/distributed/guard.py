"""No rank waits forever for one that has gone: the run's control channel.

MPI itself does not promise to notice that a process died: the others may wait in ``MPI_Allreduce`` for
it until someone kills them. So the processes of a toynet run also keep one small TCP connection each to
rank 0 (a star: rank 0 relays what one says to all), used only for news, never for data:

* ``fail <rank> <why>``: a rank raised (its ``sys.excepthook`` sends it) or saw a problem. Every other rank
  prints who failed and why, and exits with :data:`STOPPED_BY_ANOTHER_RANK`.
* the connection closes without a word: the rank was killed (a signal, ``os._exit``). Its peer sees the end
  of the stream, and the others stop as for ``fail``.
* ``bye <rank>``: the rank's program has ended normally (``atexit``). A rank that still waits in a collective
  :data:`GRACE` seconds after that cannot be answered any more (its peer will run no collective again): it
  stops with an error that names the collective, rather than hang.
* ``port <name>``: rank 0 hands over the MPI port a rank started by hand connects to
  (:mod:`toynet.distributed.world`).

Watching needs threads: each connection has one that reads it, and one more checks the collectives. They
run while the main thread waits in MPI, because mpi4py releases Python's GIL during MPI calls.
"""

from __future__ import annotations

import contextlib
import os
import queue
import socket
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

#: The exit code of a rank that stops because another one failed (the failing one exits with its own: 1 for
#: an uncaught exception). The launcher tells them apart by it, to name the rank that failed first.
STOPPED_BY_ANOTHER_RANK = 70

#: Seconds a rank may still wait in a collective after another rank's program ended (data already in flight
#: still arrives; nothing new will). Environment variable ``TOYNET_DIST_GRACE``.
GRACE = float(os.environ.get("TOYNET_DIST_GRACE", "5"))


def say(message: str) -> None:
    """Print a line of the distributed machinery on stderr, flushed at once (the process may end next)."""
    sys.stdout.flush()
    print(f"toynet.distributed: {message}", file=sys.stderr, flush=True)


class Guard:
    """One process's end of the control channel. ``links``: rank -> socket (rank 0 holds one per other rank,
    every other rank one to rank 0)."""

    def __init__(self, rank: int, size: int, links: dict[int, socket.socket]):
        self.rank, self.size, self.links = rank, size, links
        self.finished: dict[int, float] = {}          # rank -> when its program ended (monotonic clock)
        self.current: tuple[str, float] | None = None  # the collective this rank waits in, and since when
        self.ports: queue.Queue[str] = queue.Queue()  # MPI port names from rank 0
        self.stopping = False
        self._lock = threading.Lock()

    def start(self) -> None:
        for peer, sock in self.links.items():
            threading.Thread(target=self._listen, args=(peer, sock), daemon=True,
                             name=f"toynet-guard-rank{peer}").start()
        threading.Thread(target=self._watch_collectives, daemon=True, name="toynet-guard-collectives").start()

    # ------------------------------------------------------------------------------ sending

    def send(self, peer: int, message: str) -> None:
        line = message.replace("\n", " | ") + "\n"
        with self._lock:
            try:
                self.links[peer].sendall(line.encode())
            except OSError:
                pass  # that peer is gone already: its own end tells the others

    def tell_all(self, message: str, skip: int | None = None) -> None:
        """Rank 0: tell every other rank. Any other rank: tell rank 0, which relays."""
        for peer in self.links:
            if peer != skip:
                self.send(peer, message)

    @contextlib.contextmanager
    def collective(self, name: str, ranks: Any = None) -> Iterator[None]:
        """Mark the time this rank spends waiting in a collective (what :meth:`_watch_collectives` checks) of
        ``ranks`` (None: every rank)."""
        self.current = (name, time.monotonic(), ranks)
        try:
            yield
        finally:
            self.current = None

    def bye(self) -> None:
        """This rank's program has ended normally (called at exit)."""
        self.tell_all(f"bye {self.rank}")

    def fail(self, why: str, code: int = 1) -> None:
        """This rank failed: tell the others, then end this process with ``code`` (never returns)."""
        if not self.stopping:
            self.stopping = True
            self.tell_all(f"fail {self.rank} {why}")
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)

    # ------------------------------------------------------------------------------ listening

    def _listen(self, peer: int, sock: socket.socket) -> None:
        with sock.makefile("rb") as stream:
            for raw in stream:
                kind, _, rest = raw.decode(errors="replace").rstrip("\n").partition(" ")
                if kind == "port":
                    self.ports.put(rest)
                elif kind == "bye":
                    self.finished.setdefault(int(rest), time.monotonic())
                    if self.rank == 0:
                        self.tell_all(f"bye {rest}", skip=peer)
                elif kind == "fail":
                    origin, _, why = rest.partition(" ")
                    self._stop_because(int(origin), why)
        if peer not in self.finished and not self.stopping:
            self._stop_because(peer, "its process ended without a word (killed by a signal, os._exit, or a "
                                     "crash in native code)")

    def _stop_because(self, origin: int, why: str) -> None:
        if self.stopping:
            return
        self.stopping = True
        if self.rank == 0:
            self.tell_all(f"fail {origin} {why}", skip=origin)
        say(f"rank {self.rank} stops because rank {origin} failed: {why}")
        os._exit(STOPPED_BY_ANOTHER_RANK)

    def _watch_collectives(self) -> None:
        while not self.stopping:
            time.sleep(0.1)
            current = self.current
            if current is None or not self.finished:
                continue
            name, since, ranks = current
            for peer, when in list(self.finished.items()):
                if (ranks is None or peer in ranks) and time.monotonic() - max(when, since) > GRACE:
                    say(f"rank {self.rank} waits in {name}, but rank {peer} has ended its program: the ranks "
                        "ran different collectives (one left early, or skipped a step), so it can never "
                        "complete; stopping the run")
                    self.fail(f"waited in {name} after rank {peer} had ended its program")
