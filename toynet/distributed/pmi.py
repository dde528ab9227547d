"""A one-process PMI server: what ``mpiexec`` gives each MPI process, for a process started by hand.

An MPI library learns who it is from its *process manager* through PMI, a small text protocol on a socket
(``cmd=get_my_kvsname`` -> ``cmd=my_kvsname rc=0 kvsname=kvs_4242_0``). ``mpiexec`` is such a manager: it
starts the processes of a job, tells each its rank, the size of the job and the job's name (the *kvsname*),
and keeps a key-value store they use to swap addresses.

A process started by hand (``RANK=1 WORLD_SIZE=2 ... python train.py``) has no manager: MPICH then runs it as
a *singleton*, a job of one process named ``"singinit"``. Every such singleton has that same name, and MPICH
5.0 tells processes apart by (job name, rank): two singletons look like the same process to it, so
``MPI_Comm_accept``/``MPI_Comm_connect`` between them fail ("local and remote groups ... must not overlap";
MPICH issue 7805). toynet's wiring (:mod:`toynet.distributed.world`) therefore starts this tiny server for
each process started by hand, before MPI starts: a job of one process with a name of its own. The processes
are then joined into one world with ``Open_port``/``Accept``/``Connect``/``Merge``, all in MPI.

The server only answers what MPICH asks a one-process job (``init``, ``get_maxes``, ``get_appnum``,
``get_my_kvsname``, ``get``/``put``, ``barrier_in``, ``finalize``): read it with ``PMI_DEBUG=1`` set, which
makes MPICH print each line it sends. It imports only the standard library and runs as a script::

    python pmi.py KVSNAME      # stdin: the socket shared with the MPI process (PMI_FD on that side)
"""

from __future__ import annotations

import socket
import sys

#: What MPICH asks the size of: a job name, a key and a value of the key-value store.
MAXES = "kvsname_max=256 keylen_max=64 vallen_max=1024"


def answer(line: str, kvsname: str, store: dict[str, str]) -> str | None:
    """The reply to one PMI command line (``None``: no reply, stop serving)."""
    fields = dict(part.split("=", 1) for part in line.split() if "=" in part)
    cmd = fields.get("cmd", "")
    if cmd == "init":
        return "cmd=response_to_init rc=0 pmi_version=1 pmi_subversion=1"
    if cmd == "get_maxes":
        return f"cmd=maxes rc=0 {MAXES}"
    if cmd == "get_appnum":
        return "cmd=appnum rc=0 appnum=0"
    if cmd == "get_my_kvsname":
        return f"cmd=my_kvsname rc=0 kvsname={kvsname}"
    if cmd == "get_universe_size":
        return "cmd=universe_size rc=0 size=1"
    if cmd == "put":
        store[fields.get("key", "")] = fields.get("value", "")
        return "cmd=put_result rc=0"
    if cmd == "get":
        key = fields.get("key", "")
        if key == "PMI_process_mapping":      # one node, one process on it
            return "cmd=get_result rc=0 value=(vector,(0,1,1))"
        return f"cmd=get_result rc=0 value={store[key]}" if key in store else "cmd=get_result rc=1"
    if cmd == "barrier_in":                    # a barrier of one process: everybody is here
        return "cmd=barrier_out"
    if cmd == "finalize":
        return "cmd=finalize_ack rc=0"
    if cmd == "abort":
        return None
    print(f"toynet.distributed.pmi: unexpected PMI command {line.strip()!r}", file=sys.stderr)
    return f"cmd={cmd} rc=1"


def serve(sock: socket.socket, kvsname: str) -> None:
    """Answer the MPI process on ``sock`` until it finalizes, aborts or exits."""
    store: dict[str, str] = {}
    with sock.makefile("rwb", buffering=0) as stream:
        for raw in stream:
            reply = answer(raw.decode(errors="replace"), kvsname, store)
            if reply is None:
                return
            stream.write(reply.encode() + b"\n")
            if reply.startswith("cmd=finalize_ack"):
                return


if __name__ == "__main__":
    serve(socket.socket(fileno=0), sys.argv[1])
