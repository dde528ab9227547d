"""How the processes of a run find each other and talk: toynet's wiring, on MPI.

**Why MPI.** Deep-learning frameworks move tensors between processes with *collectives*: all-reduce,
all-gather, reduce-scatter, all-to-all, broadcast. OneFlow and PyTorch have their own engines for them (on
NCCL for GPUs); toynet is for reading, so it does not build one: it uses MPI, the standard those collectives
come from, through ``mpi4py`` and the MPICH library of the ``mpich`` wheel (``pip install -e .[distributed]``:
no compiler, no system package). Its collectives are decades old and tested on every machine there is, they
take NumPy arrays as they are (CuPy arrays go through the host), and their names are the ones OneFlow's
boxing speaks. The alternatives: collectives hand-made on sockets would teach socket programming, and be
slower and less correct; PyTorch's gloo would mean installing PyTorch to learn OneFlow; NCCL needs GPUs.
What toynet adds is small and readable: how processes meet (here), what happens when one fails
(:mod:`.guard`), and the tensor side (:mod:`.comm`, :mod:`.boxing`, global tensors).

**How a run starts.** :func:`describe` reads which process this is from the environment, with no
communication; :func:`world` connects the processes the first time a collective needs them. Three ways:

* ``python -m toynet.distributed.launch --nproc_per_node N train.py`` (:mod:`.launch`), or processes started
  *by hand*, as OneFlow's pages do: ``MASTER_ADDR=127.0.0.1 MASTER_PORT=17789 WORLD_SIZE=2 RANK=0 LOCAL_RANK=0
  python train.py`` in one terminal, ``RANK=1 LOCAL_RANK=1`` in another. The launcher only sets these
  variables and watches its children, so both are the same path:

  1. *Rendezvous* (TCP): rank 0 listens at ``MASTER_ADDR:MASTER_PORT``, every other rank connects and says
     ``hello <rank> <world size>``. These connections stay open as the control channel (:mod:`.guard`); they
     never carry tensor data.
  2. Each process starts MPI as a job of one process, with a one-process PMI server of its own
     (:mod:`.pmi`: MPICH 5.0 cannot connect processes it started without one).
  3. Rank 0 opens an MPI port (``MPI.Open_port``) and hands its name to rank 1 over the control channel;
     rank 1 ``Connect``\\ s, rank 0 ``Accept``\\ s, and ``Merge`` makes one communicator of the two. Rank 2
     joins those two the same way, and so on: the world communicator, ranks in order. From here on every
     byte of data goes through MPI.

* ``mpiexec -n N python train.py``, the MPICH wheel's own launcher: MPI's ``COMM_WORLD`` is already the
  world; toynet only adds the control channel (rank 0 picks a free port and tells the others over MPI).

Waiting has a limit (``TOYNET_DIST_TIMEOUT`` seconds, 60 by default): a rank that never shows up is an
error that names the address and the ranks that did come, never a hang.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import queue
import socket
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .guard import Guard, say

TIMEOUT = float(os.environ.get("TOYNET_DIST_TIMEOUT", "60"))

NEEDS_MPI = ("more than one process needs MPI, which this Python does not have: install toynet's distributed "
             "extra, `pip install -e .[distributed]` (mpi4py and the MPICH wheel)")

_PMI_SCRIPT = Path(__file__).with_name("pmi.py")


@dataclass
class World:
    """This process's place in the run. ``how``: ``"one process"``, ``"by hand"`` (the launcher's way too)
    or ``"mpiexec"``. ``comm`` is the MPI communicator of all the processes, once :func:`world` connected."""

    rank: int
    size: int
    local_rank: int
    how: str
    comm: Any = None
    mpi: Any = None          # the mpi4py.MPI module
    guard: Guard | None = None
    exit_comm: Any = None    # a second communicator, for the barrier at exit only

    @property
    def ranks(self) -> range:
        """Who runs its collectives: every process (a :class:`toynet.distributed.comm.Group` names some)."""
        return range(self.size)


_world: World | None = None


def describe() -> World:
    """Who this process is, from the environment (OneFlow's ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, or the
    ``PMI_RANK``/``PMI_SIZE`` mpiexec sets). Connects nothing: ``flow.env.get_rank()`` reads it."""
    global _world
    if _world is None:
        _world = _from_environment(os.environ)
    return _world


def world() -> World:
    """:func:`describe`, with the processes connected (the first call of a collective does it)."""
    w = describe()
    if w.size > 1 and w.comm is None:
        _connect(w)
    return w


def _from_environment(env: Any) -> World:
    if int(env.get("PMI_SIZE", "1")) > 1:
        rank = int(env["PMI_RANK"])
        return World(rank, int(env["PMI_SIZE"]), int(env.get("MPI_LOCALRANKID", rank)), "mpiexec")
    if "WORLD_SIZE" not in env and "RANK" not in env:
        return World(0, 1, 0, "one process")
    try:
        size, rank = int(env.get("WORLD_SIZE", "1")), int(env.get("RANK", "0"))
        local_rank = int(env.get("LOCAL_RANK", rank))
    except ValueError:
        raise RuntimeError(f"RANK, WORLD_SIZE and LOCAL_RANK must be whole numbers, got RANK={env.get('RANK')!r} "
                           f"WORLD_SIZE={env.get('WORLD_SIZE')!r} LOCAL_RANK={env.get('LOCAL_RANK')!r}") from None
    if size < 1 or not 0 <= rank < size:
        raise RuntimeError(f"RANK={rank} with WORLD_SIZE={size}: the rank must be in 0..WORLD_SIZE-1")
    if size > 1 and not (env.get("MASTER_ADDR") and env.get("MASTER_PORT")):
        raise RuntimeError(f"WORLD_SIZE={size} needs MASTER_ADDR and MASTER_PORT too: where rank 0 waits for the "
                           "others (for example MASTER_ADDR=127.0.0.1 MASTER_PORT=17789), the same in every process")
    return World(rank, size, local_rank, "by hand" if size > 1 else "one process")


def import_mpi() -> Any:
    """``mpi4py.MPI``, started (importing it calls ``MPI_Init``), or a clear error when it is not installed."""
    try:
        import mpi4py
    except ImportError:
        raise RuntimeError(NEEDS_MPI) from None
    mpi4py.rc.initialize = mpi4py.rc.finalize = True
    from mpi4py import MPI
    return MPI


# ------------------------------------------------------------------------------------------ connecting


def _connect(w: World) -> None:
    if importlib.util.find_spec("mpi4py") is None:   # before any waiting: every rank says it at once
        raise RuntimeError(NEEDS_MPI)
    if w.how == "mpiexec":
        w.mpi = import_mpi()
        w.comm = w.mpi.COMM_WORLD
        if (w.comm.Get_rank(), w.comm.Get_size()) != (w.rank, w.size):
            raise RuntimeError(f"mpiexec's PMI_RANK/PMI_SIZE ({w.rank}/{w.size}) differ from MPI's "
                               f"({w.comm.Get_rank()}/{w.comm.Get_size()})")
        w.guard = Guard(w.rank, w.size, _links_over_mpi(w))
        w.guard.start()
    else:
        w.guard = Guard(w.rank, w.size, _rendezvous(w))
        w.guard.start()              # from here on, a rank that dies stops the others
        _give_process_manager(w)
        w.mpi = import_mpi()
        for key in ("PMI_FD", "PMI_RANK", "PMI_SIZE"):  # MPI has read them; child processes must not
            os.environ.pop(key, None)
        w.comm = _join(w)
    w.exit_comm = w.comm.Dup()
    if not (hasattr(sys, "ps1") or sys.flags.interactive):  # at a prompt, a typo must not end the run
        sys.excepthook = _report_and_stop
    atexit.register(_at_exit, w)     # registered after mpi4py's MPI_Finalize, so it runs before it


def _rendezvous(w: World) -> dict[int, socket.socket]:
    """Rank 0 waits at MASTER_ADDR:MASTER_PORT for the others; each says ``hello <rank> <size>``."""
    addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    deadline = time.monotonic() + TIMEOUT
    if w.rank != 0:
        while True:
            try:
                sock = socket.create_connection((addr, port), timeout=5)
                break
            except OSError as error:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"rank {w.rank} could not reach rank 0 at MASTER_ADDR:MASTER_PORT = "
                                       f"{addr}:{port} within {TIMEOUT:.0f} s ({error}); is rank 0 running, with "
                                       "the same MASTER_ADDR and MASTER_PORT? (TOYNET_DIST_TIMEOUT sets the wait)"
                                       ) from None
                time.sleep(0.1)
        sock.settimeout(None)
        sock.sendall(f"hello {w.rank} {w.size}\n".encode())
        return {0: sock}
    try:
        server = socket.create_server((addr, port))
    except OSError as error:
        raise RuntimeError(f"rank 0 cannot listen at MASTER_ADDR:MASTER_PORT = {addr}:{port} ({error}); choose "
                           "another MASTER_PORT, and a MASTER_ADDR of this machine") from None
    links: dict[int, socket.socket] = {}
    with server:
        while len(links) < w.size - 1:
            server.settimeout(max(deadline - time.monotonic(), 0.001))
            try:
                conn, _ = server.accept()
                hello = _read_line(conn, deadline).split()
            except TimeoutError:
                raise RuntimeError(f"rank 0 waited {TIMEOUT:.0f} s at {addr}:{port}, and only ranks "
                                   f"{sorted([0, *links])} of WORLD_SIZE={w.size} came; start the others with "
                                   "the same MASTER_ADDR, MASTER_PORT and WORLD_SIZE") from None
            if len(hello) != 3 or hello[0] != "hello" or int(hello[2]) != w.size or \
                    not 0 < int(hello[1]) < w.size or int(hello[1]) in links:
                raise RuntimeError(f"rank 0 got {' '.join(hello)!r} at {addr}:{port}, expected 'hello <rank> "
                                   f"{w.size}' from one of ranks 1..{w.size - 1} not seen yet (seen: "
                                   f"{sorted(links)}): are two runs using the same MASTER_PORT?")
            conn.settimeout(None)
            links[int(hello[1])] = conn
    return links


def _read_line(conn: socket.socket, deadline: float) -> str:
    data = b""
    while not data.endswith(b"\n"):
        conn.settimeout(max(deadline - time.monotonic(), 0.001))
        chunk = conn.recv(1)   # byte by byte: what follows the line belongs to the control channel
        if not chunk:
            break
        data += chunk
    return data.decode(errors="replace")


def _links_over_mpi(w: World) -> dict[int, socket.socket]:
    """Under mpiexec: rank 0 listens on a free port and tells the others over MPI where."""
    hosts = w.comm.allgather(socket.gethostname())
    if w.rank == 0:
        server = socket.create_server(("", 0))
        w.comm.bcast(("127.0.0.1" if len(set(hosts)) == 1 else hosts[0], server.getsockname()[1]), root=0)
        links = {}
        with server:
            server.settimeout(TIMEOUT)
            while len(links) < w.size - 1:
                conn, _ = server.accept()
                rank = int(_read_line(conn, time.monotonic() + TIMEOUT).split()[1])
                conn.settimeout(None)
                links[rank] = conn
        return links
    addr = w.comm.bcast(None, root=0)
    sock = socket.create_connection(addr, timeout=TIMEOUT)
    sock.settimeout(None)
    sock.sendall(f"hello {w.rank} {w.size}\n".encode())
    return {0: sock}


def _give_process_manager(w: World) -> None:
    """Start this process's own one-process PMI server (:mod:`.pmi`), unless a process manager runs it."""
    if any(key in os.environ for key in ("PMI_FD", "PMI_PORT", "PMIX_RANK")):
        return
    ours, theirs = socket.socketpair()
    kvsname = f"toynet-{socket.gethostname()}-{os.getpid()}-rank{w.rank}"
    subprocess.Popen([sys.executable, "-I", str(_PMI_SCRIPT), kvsname], stdin=theirs,
                     stdout=subprocess.DEVNULL, close_fds=True)
    theirs.close()
    # MPI reads and writes this socket for as long as it runs: detached, no Python object closes it.
    os.environ.update(PMI_FD=str(ours.detach()), PMI_RANK="0", PMI_SIZE="1")


def _join(w: World) -> Any:
    """Open_port / Accept / Connect / Merge: one communicator of all the processes, ranks in order."""
    MPI, guard = w.mpi, w.guard
    if w.rank == 0:
        port, comm = MPI.Open_port(), MPI.COMM_SELF
        for newcomer in range(1, w.size):
            guard.send(newcomer, f"port {port}")
            comm = _merge(comm, comm.Accept(port, root=0), high=False)
        MPI.Close_port(port)
    else:
        try:
            port = guard.ports.get(timeout=TIMEOUT)
        except queue.Empty:
            raise RuntimeError(f"rank {w.rank} got no MPI port from rank 0 within {TIMEOUT:.0f} s") from None
        comm = _merge(MPI.COMM_SELF, MPI.COMM_SELF.Connect(port, root=0), high=True)
        for _ in range(w.rank + 1, w.size):           # then help the later ranks in
            comm = _merge(comm, comm.Accept(None, root=0), high=False)
    if (comm.Get_rank(), comm.Get_size()) != (w.rank, w.size):
        raise RuntimeError(f"joining made rank {comm.Get_rank()} of {comm.Get_size()}, expected {w.rank} of {w.size}")
    return comm


def _merge(old: Any, inter: Any, high: bool) -> Any:
    merged = inter.Merge(high=high)  # the group that was there first takes the low ranks
    inter.Free()
    if old != describe().mpi.COMM_SELF:
        old.Free()
    return merged


# ------------------------------------------------------------------------------------ failing, exiting


def _report_and_stop(kind: type, value: BaseException, tb: Any) -> None:
    """``sys.excepthook`` of every rank: the usual traceback, then tell the other ranks and stop."""
    w = describe()
    traceback.print_exception(kind, value, tb)
    say(f"rank {w.rank} of {w.size} failed with {kind.__name__}: {value}; stopping the other ranks")
    w.guard.fail(f"{kind.__name__}: {value}", code=1)


def _at_exit(w: World) -> None:
    """A normal end: say so, then wait until every rank has ended its program too (a barrier on a
    communicator of its own, polled, so that the guard can still stop this process)."""
    w.guard.bye()
    request = w.exit_comm.Ibarrier()
    while not request.Test():
        time.sleep(0.005)
