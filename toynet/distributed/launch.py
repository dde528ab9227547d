"""``python -m toynet.distributed.launch --nproc_per_node 2 train.py --lr 0.1``: start a run's processes.

As OneFlow's ``oneflow.distributed.launch``: it starts ``--nproc_per_node`` copies of the script on this
machine, each with the environment variables a process started by hand would have been given:

=============== ============================================================================
``MASTER_ADDR``  where rank 0 waits for the others (``--master_addr``, 127.0.0.1)
``MASTER_PORT``  its port (``--master_port``; a free one when there is one machine)
``WORLD_SIZE``   the number of processes of the run, ``--nnodes`` x ``--nproc_per_node``
``RANK``         this process's number in the run
``LOCAL_RANK``   its number on this machine
=============== ============================================================================

So the processes meet exactly as processes started by hand do (:mod:`toynet.distributed.world`). What the
launcher adds is watching: when a process ends with an error (an exception, a signal, a non-zero exit), it
names that rank and its exit code, stops the ranks still running, and exits with that code. It never waits
forever for a run that has failed. (The ranks stop each other too, through their control channel; a rank
stopped that way exits with code 70, so the launcher can tell which rank failed first.)

With several machines, run the launcher on each, with the same ``--nnodes``, ``--master_addr`` and
``--master_port`` and its own ``--node_rank``.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time

from .guard import STOPPED_BY_ANOTHER_RANK

#: Environment variables of a process manager (mpiexec) the children must not inherit: they are not its.
_NOT_INHERITED = ("PMI_", "PMIX_", "HYDRA_", "HYDI_", "MPI_LOCALRANKID", "MPI_LOCALNRANKS")


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m toynet.distributed.launch", description=__doc__.split("\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nproc_per_node", type=int, default=1, help="processes to start on this machine")
    parser.add_argument("--nnodes", type=int, default=1, help="machines in the run")
    parser.add_argument("--node_rank", type=int, default=0, help="this machine's number, 0..nnodes-1")
    parser.add_argument("--master_addr", default="127.0.0.1", help="the address of rank 0's machine")
    parser.add_argument("--master_port", type=int, default=0,
                        help="the port rank 0 listens on (default: a free one; give one with several machines)")
    parser.add_argument("script", help="the Python script each process runs")
    parser.add_argument("script_args", nargs=argparse.REMAINDER, help="arguments for the script")
    args = parser.parse_args(argv)
    if args.nproc_per_node < 1 or args.nnodes < 1 or not 0 <= args.node_rank < args.nnodes:
        parser.error("need --nproc_per_node >= 1, --nnodes >= 1 and 0 <= --node_rank < --nnodes")
    if args.nnodes > 1 and not args.master_port:
        parser.error("with several machines, give the same --master_port to every launcher")
    return args


def environments(args: argparse.Namespace) -> list[dict[str, str]]:
    """The environment of each process this launcher starts."""
    port = args.master_port or _free_port(args.master_addr)
    base = {k: v for k, v in os.environ.items() if not k.startswith(_NOT_INHERITED)}
    world = args.nnodes * args.nproc_per_node
    return [{**base, "MASTER_ADDR": args.master_addr, "MASTER_PORT": str(port), "WORLD_SIZE": str(world),
             "RANK": str(args.node_rank * args.nproc_per_node + local), "LOCAL_RANK": str(local),
             "PYTHONUNBUFFERED": "1"}
            for local in range(args.nproc_per_node)]


def _free_port(addr: str) -> int:
    with socket.socket() as s:
        s.bind((addr, 0))
        return s.getsockname()[1]


def watch(procs: dict[int, subprocess.Popen], poll: float = 0.05) -> int:
    """Wait for the ranks; at the first that fails, stop the rest. Returns the exit code of the run."""
    failed: list[int] = []   # ranks in the order their failure was seen

    def look() -> None:
        failed.extend(r for r, p in procs.items() if p.poll() not in (None, 0) and r not in failed)

    while not failed:
        if all(p.poll() == 0 for p in procs.values()):
            return 0
        time.sleep(poll)
        look()
    deadline = time.monotonic() + 2    # the others are usually stopping already: let them say why
    while time.monotonic() < deadline and any(p.poll() is None for p in procs.values()):
        time.sleep(poll)
        look()
    codes = {rank: p.poll() for rank, p in procs.items()}
    # The first to fail, unless it only stopped because another rank had failed (the guard's exit code).
    culprit = next((r for r in failed if codes[r] != STOPPED_BY_ANOTHER_RANK), failed[0])
    running = [rank for rank, code in codes.items() if code is None]
    print(f"toynet.distributed.launch: rank {culprit} failed ({_describe(codes[culprit])})"
          + (f"; stopping ranks {running}" if running else ""), file=sys.stderr, flush=True)
    _stop([procs[r] for r in running])
    code = codes[culprit]
    return code if code > 0 else 128 - code   # killed by signal N: 128 + N, as a shell reports it


def _describe(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    if code == STOPPED_BY_ANOTHER_RANK:
        return f"exit code {code}: it stopped because another rank failed"
    return f"exit code {code}"


def _stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        p.terminate()
    deadline = time.monotonic() + 3
    for p in procs:
        try:
            p.wait(max(deadline - time.monotonic(), 0.01))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    envs = environments(args)
    procs = {int(env["RANK"]): subprocess.Popen([sys.executable, args.script, *args.script_args], env=env)
             for env in envs}
    try:
        return watch(procs)
    except KeyboardInterrupt:
        print("toynet.distributed.launch: interrupted; stopping every rank", file=sys.stderr, flush=True)
        _stop([p for p in procs.values() if p.poll() is None])
        return 130


if __name__ == "__main__":
    sys.exit(main())
