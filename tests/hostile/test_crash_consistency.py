"""A save killed at any moment leaves the path loading the old or the new checkpoint whole (issue 10,
finding 5), for state dicts and for deployed graphs; the next save or load cleans up what it left.

Three ways to stop a save:

* **deterministically at every step**: a forked child makes its k-th file-system call (``open``,
  ``os.mkdir``, ``os.rename``, ``os.fsync``, ``os.unlink``, ``os.rmdir``...) end the process with
  ``os._exit``, for k = 1, 2, ... until a save gets through. The crash points are the file-system calls
  themselves, so they cover every step of any implementation of ``save``, not a list of named steps;
* **by an error at every step** (a full disk, an I/O error): the same calls raise ``OSError`` in-process;
  ``save`` raises, and the old checkpoint is untouched, with nothing left beside it;
* **SIGKILL at random moments**: a child saves two alternating checkpoints in a loop and is killed after
  a random delay, again and again.

Each runs with the atomic exchange of two directories that saves use on Linux, and with the two renames
other systems fall back to.

After each, ``flow.load(path)`` must give one of the two checkpoints, whole (every number of the
generation it says it is); and after the next save (or load) nothing but the checkpoint is left in the
directory. A symbolic link to a checkpoint stays a link, and the save goes into the directory it points to.
"""

from __future__ import annotations

import builtins
import os
import random
import shutil
import signal
import tempfile
import time

import numpy as np
import pytest

import toynet as flow
from toynet import nn
from toynet.serialization import recovery

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

N = 50_000  # numbers per checkpoint: enough that a save takes a while, small enough to run often
FS_CALLS = [(os, "rename"), (os, "replace"), (os, "fsync"), (os, "mkdir"), (os, "rmdir"), (os, "unlink"),
            (os, "open"), (builtins, "open")]


def state(generation):
    return {"generation": generation, "w": flow.full((N,), float(generation)),
            "b": np.full(7, generation, dtype=np.int64)}


def check_whole(path, allowed):
    """``path`` loads as one of the generations ``allowed``, every number of it; return which."""
    loaded = flow.load(path)
    generation = loaded["generation"]
    assert generation in allowed, f"loaded generation {generation}, expected one of {allowed}"
    assert np.all(loaded["w"].numpy() == generation) and loaded["w"].shape == (N,)
    assert np.all(loaded["b"] == generation) and loaded["b"].shape == (7,)
    return generation


def siblings(path):
    return sorted(os.listdir(os.path.dirname(path)))


def empty(folder):
    """Start the next crash of a loop from an empty folder (what the previous one left is gone)."""
    shutil.rmtree(folder)
    folder.mkdir()


def in_child(action, crash_at=None):
    """Run ``action`` in a forked child; if ``crash_at`` is k, the child's k-th file-system call ends it
    (os._exit(86)) before the call happens. Return (exit code, how many file-system calls it made)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 0
        try:
            os.close(read)
            calls = [0]
            real_exit, real_write = os._exit, os.write

            def wrap(module, name):
                real = getattr(module, name)

                def counted(*args, **kwargs):
                    calls[0] += 1
                    if calls[0] == crash_at:
                        real_write(write, str(calls[0]).encode())
                        real_exit(86)
                    return real(*args, **kwargs)
                setattr(module, name, counted)
            for module, name in FS_CALLS:
                wrap(module, name)
            action()
            real_write(write, str(calls[0]).encode())
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    reported = b""
    while chunk := os.read(read, 64):
        reported += chunk
    os.close(read)
    return os.waitstatus_to_exitcode(status), int(reported or 0)


class TinyNet(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.fc = nn.Linear(4, 3)
        with flow.no_grad():
            self.fc.weight.fill_(float(scale))
            self.fc.bias.fill_(float(scale))

    def forward(self, x):
        return self.fc(x).relu()


class Infer(nn.Graph):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def build(self, x):
        return self.model(x)


X = flow.ones(2, 4)
_GRAPHS = {}


def graph(scale):
    """A compiled graph whose weights are all ``scale`` (made once: compiling reads source files, and
    the tests count file-system calls of saves only)."""
    if scale not in _GRAPHS:
        _GRAPHS[scale] = Infer(TinyNet(scale))
        _GRAPHS[scale](X)
    return _GRAPHS[scale]


def check_graph_whole(path, allowed):
    """A deployed graph whose weights are all ``scale`` computes relu(4 * scale + scale) everywhere."""
    out = flow.load(path)(X).numpy()
    scale = out[0, 0] / 5
    assert scale in allowed and np.all(out == 5 * scale), out
    return scale


STATES = {g: state(g) for g in (1, 2, 3)}
#: For each kind of checkpoint: save the old one, save the new one, check the path loads one of them
#: whole (returning which), save a third. All save to PATH[0].
KINDS = {
    "state_dict": (lambda: flow.save(STATES[1], PATH[0]), lambda: flow.save(STATES[2], PATH[0]),
                   lambda path: check_whole(path, (1, 2)), lambda: flow.save(STATES[3], PATH[0])),
    "graph": (lambda: flow.save(graph(1.0), PATH[0]), lambda: flow.save(graph(2.0), PATH[0]),
              lambda path: check_graph_whole(path, (1.0, 2.0)), lambda: flow.save(graph(3.0), PATH[0])),
}
PATH = [None]


@pytest.fixture(autouse=True)
def _compiled_graphs():
    for scale in (1.0, 2.0, 3.0):
        graph(scale)


@pytest.fixture(params=["exchange", "two renames"])
def swap(request, monkeypatch):
    """Where Linux can swap two directories atomically, saves do (the path is then never missing); test
    the two-rename fallback of other systems as well."""
    if request.param == "two renames":
        monkeypatch.setattr(recovery, "_renameat2", None)
    elif not recovery.exchange(*make_pair()):
        pytest.skip("this file system cannot exchange two directories")
    return request.param


def make_pair():
    where = tempfile.mkdtemp()
    os.mkdir(os.path.join(where, "a"))
    os.mkdir(os.path.join(where, "b"))
    return os.path.join(where, "a"), os.path.join(where, "b")


@pytest.mark.parametrize("kind", KINDS)
def test_a_save_killed_at_every_step_leaves_the_old_or_the_new_checkpoint_whole(tmp_path, kind, swap):
    save_old, save_new, check, save_next = KINDS[kind]
    path = PATH[0] = str(tmp_path / "ckpt")
    save_old()
    code, total = in_child(save_new)            # count the steps of one save over an existing checkpoint
    assert code == 0 and total > 5
    seen = set()
    for k in range(1, total + 1):
        empty(tmp_path)
        save_old()
        code, reached = in_child(save_new, crash_at=k)
        assert code == 86 and reached == k, (code, reached)
        if swap == "exchange":                  # not even a moment without a checkpoint at the path
            assert os.path.isfile(os.path.join(path, "manifest.json")), f"no checkpoint after a crash at step {k}"
        seen.add(check(path))                   # the path loads, whole: old or new
        save_next()                             # the next save works and cleans up
        assert siblings(path) == ["ckpt"], f"crash at step {k} of {total} left {siblings(path)}"
    assert len(seen) == 2                       # early crashes keep the old one, late ones give the new


@pytest.mark.parametrize("kind", KINDS)
def test_a_load_after_a_killed_save_recovers_and_cleans_up(tmp_path, kind, swap):
    save_old, save_new, check, _ = KINDS[kind]
    path = PATH[0] = str(tmp_path / "ckpt")
    save_old()
    _, total = in_child(save_new)
    for k in range(1, total + 1):
        empty(tmp_path)
        save_old()
        in_child(save_new, crash_at=k)
        check(path)
        assert siblings(path) == ["ckpt"], f"a load after a crash at step {k} left {siblings(path)}"


def test_a_first_save_killed_at_every_step_leaves_nothing_or_the_checkpoint(tmp_path):
    path = PATH[0] = str(tmp_path / "ckpt")
    _, total = in_child(lambda: flow.save(state(1), path))
    for k in range(1, total + 1):
        empty(tmp_path)
        in_child(lambda: flow.save(state(1), path), crash_at=k)
        try:
            check_whole(path, (1,))
        except FileNotFoundError:
            pass
        flow.save(state(2), path)
        assert siblings(path) == ["ckpt"] and check_whole(path, (2,)) == 2


@pytest.mark.parametrize("kind", KINDS)
def test_an_error_at_every_step_keeps_the_old_checkpoint_and_leaves_nothing_behind(tmp_path, monkeypatch, kind):
    save_old, save_new, check, _ = KINDS[kind]
    path = PATH[0] = str(tmp_path / "ckpt")
    save_old()
    _, total = in_child(save_new)
    for k in range(1, total + 1):
        empty(tmp_path)
        save_old()
        calls = [0]

        def failing(real):
            def call(*args, **kwargs):
                calls[0] += 1
                if calls[0] == k:
                    raise OSError(5, f"injected I/O error at step {k}")
                return real(*args, **kwargs)
            return call
        for module, name in FS_CALLS:
            monkeypatch.setattr(module, name, failing(getattr(module, name)))
        try:
            save_new()
            failed = False
        except OSError:
            failed = True
        monkeypatch.undo()
        loaded = check(path)
        if failed:
            assert loaded in (1, 1.0), f"an error at step {k} lost the old checkpoint"
        assert siblings(path) == ["ckpt"], f"an error at step {k} left {siblings(path)}"


@pytest.mark.parametrize("kind", KINDS)
def test_sigkill_at_random_moments_never_leaves_a_broken_checkpoint(tmp_path, kind, swap):
    rng = random.Random(0)
    path = PATH[0] = str(tmp_path / "ckpt")
    if kind == "state_dict":
        flow.save(STATES[1], path)
        states = [STATES[1], STATES[2]]

        def loop():
            for i in range(10_000):
                flow.save(states[i % 2], path)
        check = KINDS[kind][2]
    else:
        flow.save(graph(1.0), path)
        graphs = [graph(1.0), graph(2.0)]

        def loop():
            for i in range(10_000):
                flow.save(graphs[i % 2], path)
        check = KINDS[kind][2]
    for _ in range(15):
        pid = os.fork()
        if pid == 0:
            try:
                loop()
            finally:
                os._exit(0)
        time.sleep(rng.uniform(0.0, 0.15))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        check(path)
    flow.load(path)
    assert siblings(path) == ["ckpt"]


def test_saving_through_a_symlink_replaces_the_directory_it_points_to_and_keeps_the_link(tmp_path):
    real = tmp_path / "runs" / "ckpt-0001"
    flow.save(state(1), real)
    link = tmp_path / "latest"
    link.symlink_to(real, target_is_directory=True)
    flow.save(state(2), link)
    assert link.is_symlink() and os.path.realpath(link) == str(real)
    assert check_whole(link, (2,)) == 2 and check_whole(real, (2,)) == 2
    assert sorted(os.listdir(tmp_path)) == ["latest", "runs"] and os.listdir(tmp_path / "runs") == ["ckpt-0001"]
    # A link to nowhere yet: the save creates the directory it names.
    dangling = tmp_path / "next"
    dangling.symlink_to(tmp_path / "runs" / "ckpt-0002", target_is_directory=True)
    flow.save(state(3), dangling)
    assert dangling.is_symlink() and check_whole(tmp_path / "runs" / "ckpt-0002", (3,)) == 3
    # Killed between its renames, a save through the link is recovered through the link too.
    PATH[0] = str(link)
    _, total = in_child(lambda: flow.save(state(4), link))
    for k in range(1, total + 1):
        in_child(lambda: flow.save(state(4), link), crash_at=k)
        check_whole(link, (2, 4))
        assert link.is_symlink()
    flow.save(state(5), link)
    assert sorted(os.listdir(tmp_path / "runs")) == ["ckpt-0001", "ckpt-0002"] and check_whole(real, (5,)) == 5


def test_concurrent_saves_and_loads_never_mix_two_checkpoints(tmp_path):
    """Two processes save to one path while this one loads it: every load is one save's, whole."""
    path = str(tmp_path / "ckpt")
    flow.save(STATES[1], path)
    writers = []
    for generation in (1, 2):
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                for _ in range(30):
                    flow.save(STATES[generation], path)
            except BaseException:
                code = 1
            finally:
                os._exit(code)
        writers.append(pid)
    codes = {}
    loads = 0
    while len(codes) < len(writers):
        check_whole(path, (1, 2))
        loads += 1
        for pid in writers:
            if pid not in codes:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    codes[pid] = os.waitstatus_to_exitcode(status)
    assert list(codes.values()) == [0, 0] and loads > 0
    assert siblings(path) == ["ckpt"]
