"""Downloads from a server that misbehaves: every failure leaves the folder as it was and says what to do.

A real HTTP server runs on 127.0.0.1 in a thread (never the internet). It serves a small file and its
forgeries: a wrong file under the right name, a 404, a body cut before its Content-Length, a server that
stops sending, a body larger than allowed, redirects to file: and ftp:, and archives with a member named
``../``, an absolute path or a symbolic link. Each refusal is a ``DownloadError`` whose message names the
address, and the target folder is left as it was: no ``.part`` file, no folder made. The good paths end
with usable data sets: CIFAR-10 and MNIST downloaded from the loopback server with their checksums pinned
to the small archives the tests make (toynet.vision.fake_cifar, toynet.vision.mnist_fake).
"""

from __future__ import annotations

import errno
import gzip
import hashlib
import http.server
import io
import os
import socket
import tarfile
import threading
from pathlib import Path

import numpy as np
import pytest
from cifar_fixture import ARCHIVE, FOLDER, make_cifar10

from toynet.utils import download
from toynet.utils.download import ALREADY_THERE, DownloadError, all_or_nothing, check_integrity, download_url
from toynet.utils.unpack import download_and_extract_archive, extract_tar, gunzip
from toynet.vision import datasets
from toynet.vision.mnist_fake import make_mnist

GOOD = bytes(range(256)) * 40  # 10,240 bytes
GOOD_MD5 = hashlib.md5(GOOD).hexdigest()


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


# ------------------------------------------------------------------------------------ the server


class Server:
    """Serves ``routes`` (path -> (kind, payload)); anything else is a 404. Records every request path."""

    def __init__(self) -> None:
        self.routes: dict[str, tuple[str, object]] = {}
        self.requests: list[str] = []
        self.release = threading.Event()  # ends a "stall" response early, at teardown
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server.requests.append(self.path)
                kind, payload = server.routes.get(self.path, ("missing", None))
                if kind == "missing":
                    self.send_error(404, "Not Found")
                elif kind == "redirect":
                    self.send_response(302)
                    self.send_header("Location", payload)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                else:
                    self.send_response(200)
                    if kind == "file":
                        self.send_header("Content-Length", str(len(payload)))
                    elif kind in ("cut", "stall"):  # promises more than it sends
                        self.send_header("Content-Length", str(len(payload) * 2))
                    elif kind == "announce":  # a Content-Length over the cap, then nothing
                        self.send_header("Content-Length", str(payload))
                    self.end_headers()  # "endless": no Content-Length, body until the connection closes
                    try:
                        if kind in ("file", "cut"):
                            self.wfile.write(payload)
                        elif kind == "stall":
                            self.wfile.write(payload[:100])
                            self.wfile.flush()
                            server.release.wait(10)  # the client's timeout is far shorter
                        elif kind == "endless":
                            for _ in range(64):
                                self.wfile.write(payload)
                    except OSError:
                        pass  # the client hung up, as it should
                    self.close_connection = True

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        # shutdown() waits for the loop to look up: every 10 ms, not every 0.5 s, keeps the tests quick
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
        self.thread.start()

    def serve(self, path: str, kind: str, payload: object = None) -> str:
        self.routes[path] = (kind, payload)
        return self.base + path

    def close(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server(monkeypatch):
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)  # talk to the loopback server, not through a proxy
    s = Server()
    yield s
    s.close()


@pytest.fixture
def root(tmp_path):
    """A folder that does not exist yet, inside an empty ``tmp_path`` (checked by ``untouched``)."""
    return tmp_path / "data" / "sets"


def untouched(tmp_path) -> None:
    """Nothing was left behind: no file, no .part, no folder made."""
    left = [os.path.relpath(os.path.join(d, n), tmp_path) for d, dirs, files in os.walk(tmp_path)
            for n in dirs + files]
    assert left == []


def tar_bytes(*members: tarfile.TarInfo) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for info in members:
            tar.addfile(info, io.BytesIO(b"x" * info.size) if info.isreg() else None)
    return buffer.getvalue()


def member(name: str, kind: bytes = tarfile.REGTYPE, size: int = 10, target: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.size, info.linkname = kind, size if kind == tarfile.REGTYPE else 0, target
    return info


# ----------------------------------------------------------------------------- downloading a file


def test_a_good_download_is_verified_kept_and_not_fetched_twice(server, root, capfd):
    url = server.serve("/files/good.bin", "file", GOOD)
    path = download_url(url, root, md5=GOOD_MD5, max_bytes=2 * len(GOOD))
    assert path == os.path.join(root, "good.bin") and Path(path).read_bytes() == GOOD
    assert sorted(os.listdir(root)) == ["good.bin"]  # no .part left
    out, err = capfd.readouterr()
    assert f"Downloading {url}" in out
    assert "good.bin" in err and "100%" in err  # the progress bar, on stderr

    again = download_url(url, root, md5=GOOD_MD5.upper(), max_bytes=2 * len(GOOD))
    assert again == path and server.requests == ["/files/good.bin"]  # no second request
    assert capfd.readouterr().out.strip() == ALREADY_THERE
    assert check_integrity(path, md5=GOOD_MD5)
    assert check_integrity(path, sha256=hashlib.sha256(GOOD).hexdigest())
    assert not check_integrity(path, md5="0" * 32)


def test_sha256_pins_work_too(server, root):
    url = server.serve("/good.bin", "file", GOOD)
    download_url(url, root, sha256=hashlib.sha256(GOOD).hexdigest(), max_bytes=len(GOOD))
    with pytest.raises(ValueError, match="exactly one of md5= and sha256="):
        download_url(url, root, "other.bin", max_bytes=len(GOOD))


@pytest.mark.parametrize("case, message", [
    ("forged", r"has md5 [0-9a-f]{32}, but good\.bin must have " + GOOD_MD5 + ".*forged"),
    ("missing", "HTTP 404"),
    ("cut", r"closed after 10240 of the 20480 bytes"),
    ("stall", r"no answer for 0\.3 s"),
    ("announce", r"announces 10000000 bytes, more than the 20480"),
    ("endless", r"sent more than the 20480 bytes"),
])
def test_a_failed_download_keeps_nothing_and_names_the_address(server, tmp_path, root, case, message):
    payload = {"forged": GOOD[::-1], "cut": GOOD, "stall": GOOD, "announce": 10_000_000, "endless": GOOD}
    url = (server.serve("/good.bin", "file" if case == "forged" else case, payload[case]) if case != "missing"
           else server.base + "/good.bin")
    with pytest.raises(DownloadError, match=message) as info:
        # A short timeout only where the server stalls: elsewhere a busy machine must not turn into a timeout
        download_url(url, root, md5=GOOD_MD5, max_bytes=2 * len(GOOD), timeout=0.3 if case == "stall" else 10)
    text = str(info.value)
    assert text.startswith(f"Could not download {url}: ") and info.value.url == url
    assert "Check the network connection" in text and os.path.join(root, "good.bin") in text  # what to do
    untouched(tmp_path)


def test_an_existing_empty_folder_stays_empty(server, tmp_path):
    url = server.serve("/good.bin", "file", GOOD[::-1])
    with pytest.raises(DownloadError, match="forged"):
        download_url(url, tmp_path, md5=GOOD_MD5, max_bytes=2 * len(GOOD))
    assert os.listdir(tmp_path) == [] and tmp_path.is_dir()


def test_an_unreachable_server(tmp_path, root):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}/good.bin"
    with pytest.raises(DownloadError, match=r"Could not download .*: the server could not be reached"):
        download_url(url, root, md5=GOOD_MD5, max_bytes=len(GOOD), timeout=2)
    untouched(tmp_path)


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://example.org/good.bin", "data:,hello", "good.bin"])
def test_only_web_addresses_are_fetched(tmp_path, root, url):
    with pytest.raises(DownloadError, match=r"only http:// and https:// addresses") as info:
        download_url(url, root, "good.bin", md5=GOOD_MD5, max_bytes=len(GOOD))
    assert repr(url) in str(info.value)
    untouched(tmp_path)


@pytest.mark.parametrize("target", ["file:///etc/passwd", "ftp://127.0.0.1/good.bin"])
def test_redirects_go_to_web_addresses_only(server, tmp_path, root, target):
    good = server.serve("/good.bin", "file", GOOD)
    url = server.serve("/moved.bin", "redirect", target)
    with pytest.raises(DownloadError, match=f"redirected to '{target}', which is not an http or https address"):
        download_url(url, root, md5=GOOD_MD5, max_bytes=len(GOOD))
    untouched(tmp_path)
    server.routes["/moved.bin"] = ("redirect", good)  # a redirect to http is followed
    assert Path(download_url(url, root, md5=GOOD_MD5, max_bytes=len(GOOD))).read_bytes() == GOOD


def test_ctrl_c_in_the_middle_keeps_nothing(server, tmp_path, root, monkeypatch):
    class Interrupted:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def update(self, n):
            assert any(name.endswith(".part") for name in os.listdir(root))  # half-way: the .part exists
            raise KeyboardInterrupt

    monkeypatch.setattr(download, "_progress_bar", lambda total, label: Interrupted())
    url = server.serve("/good.bin", "file", GOOD)
    with pytest.raises(KeyboardInterrupt):
        download_url(url, root, md5=GOOD_MD5, max_bytes=len(GOOD))
    untouched(tmp_path)


def test_a_file_in_the_way_is_never_overwritten(server, tmp_path):
    (tmp_path / "good.bin").write_bytes(b"mine")
    url = server.serve("/good.bin", "file", GOOD)
    with pytest.raises(DownloadError, match="is in the way: .*does not overwrite it: delete it"):
        download_url(url, tmp_path, md5=GOOD_MD5, max_bytes=len(GOOD))
    assert (tmp_path / "good.bin").read_bytes() == b"mine" and os.listdir(tmp_path) == ["good.bin"]
    assert server.requests == []


def test_all_or_nothing_removes_what_the_block_made(tmp_path):
    (tmp_path / "kept").write_text("before")
    root = tmp_path / "a" / "b"
    with pytest.raises(RuntimeError, match="step two failed"), all_or_nothing(root) as undo:
        with open(undo.claim(os.path.join(root, "one")), "w") as f:
            f.write("1")
        undo.claim(str(tmp_path / "kept"))  # exists already: never removed
        raise RuntimeError("step two failed")
    assert os.listdir(tmp_path) == ["kept"] and (tmp_path / "kept").read_text() == "before"


# ------------------------------------------------------------------------------------- unpacking


@pytest.mark.parametrize("members, message", [
    ([member("cifar/ok"), member("../evil")], r"member '../evil' has '..' in its path"),
    ([member("cifar/../../evil")], r"has '..' in its path"),
    ([member("/tmp/evil")], r"member '/tmp/evil' has an absolute path"),
    ([member("cifar/link", tarfile.SYMTYPE, target="/etc/passwd")], r"'cifar/link' is a symbolic link"),
    ([member("cifar/hard", tarfile.LNKTYPE, target="/etc/passwd")], r"'cifar/hard' is a hard link"),
    ([member("cifar/dev", tarfile.CHRTYPE)], r"'cifar/dev' is a device"),
    ([member("cifar/a"), member("cifar/a")], r"'cifar/a' appears twice"),
    ([member(f"cifar/{k}") for k in range(4)], r"more than the 3 members"),
    ([member("cifar/a"), member("cifar/b", size=100)], r"add up to more than the 50 bytes"),
])
def test_unsafe_archives_are_refused_after_download_and_nothing_is_kept(server, tmp_path, root, members, message):
    data = tar_bytes(*members)
    url = server.serve("/cifar.tar.gz", "file", data)
    with pytest.raises(DownloadError, match=message) as info:
        download_and_extract_archive(url, root, md5=md5(data), max_bytes=len(data), max_extracted=50,
                                     max_members=3)
    assert str(info.value).startswith(f"{url}: refused to unpack it") and info.value.url == url
    assert "deleted too" in str(info.value)
    untouched(tmp_path)  # not the archive, not a member, not ../evil beside the folder


def test_extract_tar_refuses_a_huge_header_and_a_name_in_the_way(tmp_path):
    long_name = member("cifar/" + "n" * (2 * 2**20))  # a pax header of 2 MB
    archive = tmp_path / "src" / "a.tar"
    archive.parent.mkdir()
    with tarfile.open(archive, "w", format=tarfile.PAX_FORMAT) as tar:
        tar.addfile(long_name, io.BytesIO(b"x" * 10))
    with pytest.raises(DownloadError, match="tar header with extensions longer than 1048576 bytes"):
        extract_tar(archive, tmp_path / "out", max_bytes=100)
    assert not (tmp_path / "out").exists()

    archive.write_bytes(tar_bytes(member("cifar/a")))
    (tmp_path / "out" / "cifar").mkdir(parents=True)
    with pytest.raises(DownloadError, match=r"out/cifar is in the way"):
        extract_tar(archive, tmp_path / "out", max_bytes=100)
    assert os.listdir(tmp_path / "out") == ["cifar"] and os.listdir(tmp_path / "out" / "cifar") == []
    assert extract_tar(archive, tmp_path / "fresh", max_bytes=100) == [str(tmp_path / "fresh" / "cifar")]
    assert (tmp_path / "fresh" / "cifar" / "a").read_bytes() == b"x" * 10


def test_gunzip_caps_what_it_writes(tmp_path):
    source = tmp_path / "bomb.gz"
    source.write_bytes(gzip.compress(b"\0" * 1_000_000))  # 1 MB from about 1 KB
    with pytest.raises(DownloadError, match="decompresses to more than the 1000 bytes"):
        gunzip(source, tmp_path / "bomb", max_bytes=1000)
    assert os.listdir(tmp_path) == ["bomb.gz"]
    source.write_bytes(b"\x1f\x8b\x08 not gzip")
    with pytest.raises(DownloadError, match="could not decompress it"):
        gunzip(source, tmp_path / "bomb", max_bytes=1000)
    assert os.listdir(tmp_path) == ["bomb.gz"]


# ------------------------------------------------------------------------------------- data sets


@pytest.fixture
def cifar(server, tmp_path, monkeypatch):
    """A small CIFAR-10 archive on the server, with its checksum pinned as CIFAR10's."""
    fake = make_cifar10(tmp_path / "made", n_train=10, n_test=4)
    data = Path(fake.path).read_bytes()
    monkeypatch.setattr(datasets.CIFAR10, "archive_md5", md5(data))
    fake.url = server.serve("/datasets/cifar/" + ARCHIVE, "file", data)
    return fake


def test_cifar10_download_gives_a_usable_data_set(server, tmp_path, cifar, capsys):
    root = tmp_path / "data"
    train = datasets.CIFAR10(root, train=True, download=True, source_url=cifar.url)
    np.testing.assert_array_equal(train.data, cifar.train_images)
    assert train.targets == cifar.train_labels and len(train) == 10
    assert sorted(os.listdir(root)) == sorted([ARCHIVE, FOLDER])  # kept and unpacked, as flowvision does
    assert sorted(os.listdir(root / FOLDER)) == sorted(["batches.meta", "readme.html", "test_batch",
                                                       *(f"data_batch_{i}" for i in range(1, 6))])
    assert f"Downloading {cifar.url}" in capsys.readouterr().out

    test = datasets.CIFAR10(root, train=False, download=True, source_url=cifar.url)
    assert test.targets == cifar.test_labels
    assert capsys.readouterr().out.strip() == ALREADY_THERE
    assert server.requests == ["/datasets/cifar/" + ARCHIVE]  # once


def test_cifar10_refuses_a_forged_archive(server, tmp_path, cifar, monkeypatch):
    monkeypatch.setattr(datasets.CIFAR10, "archive_md5", "0" * 32)
    root = tmp_path / "data"
    with pytest.raises(DownloadError, match=r"must have 0{32}") as info:
        datasets.CIFAR10(root, download=True, source_url=cifar.url)
    assert cifar.url in str(info.value) and "pass source_url= the address of a mirror" in str(info.value)
    assert not root.exists()


def test_cifar10_refuses_an_unsafe_archive_even_with_its_checksum(server, tmp_path, monkeypatch):
    data = tar_bytes(member(f"{FOLDER}/batches.meta"), member("../escaped"))
    monkeypatch.setattr(datasets.CIFAR10, "archive_md5", md5(data))
    url = server.serve("/evil/" + ARCHIVE, "file", data)
    with pytest.raises(DownloadError, match=r"'../escaped' has '..' in its path") as info:
        datasets.CIFAR10(tmp_path / "data", download=True, source_url=url)
    assert url in str(info.value)
    untouched(tmp_path)


def test_cifar10_offline_says_what_to_do(tmp_path, monkeypatch):
    def offline(*args, **kwargs):
        raise OSError(errno.ENETUNREACH, "Network is unreachable")
    monkeypatch.setattr(socket, "create_connection", offline)
    root = tmp_path / "data"
    with pytest.raises(DownloadError) as info:
        datasets.CIFAR10(root, download=True)
    message = str(info.value)
    assert message.startswith(f"Could not download {datasets.CIFAR10.url}: the server could not be reached")
    assert "source_url=" in message and str(root / ARCHIVE) in message
    assert not root.exists()


def test_cifar10_with_half_a_folder_downloads_only_the_archive(server, tmp_path, cifar):
    root = tmp_path / "data"
    (root / FOLDER).mkdir(parents=True)
    (root / FOLDER / "readme.html").write_text("half-extracted")
    test = datasets.CIFAR10(root, train=False, download=True, source_url=cifar.url)
    assert test.targets == cifar.test_labels  # read from the archive
    assert sorted(os.listdir(root)) == sorted([ARCHIVE, FOLDER]) and os.listdir(root / FOLDER) == ["readme.html"]


@pytest.fixture
def mnist_files(tmp_path):
    """The four .gz files of a small MNIST: name -> bytes."""
    fake = make_mnist(tmp_path / "made", "MNIST", n_train=12, n_test=5)
    files = {path.name: path.read_bytes() for path in sorted(Path(fake.raw_folder).iterdir())}
    return fake, files


def pin(monkeypatch, cls, files):
    monkeypatch.setattr(cls, "resources", tuple((name, md5(data), len(data)) for name, data in files.items()))


@pytest.mark.parametrize("name", ["MNIST", "FashionMNIST"])
def test_mnist_download_gives_a_usable_data_set(server, tmp_path, mnist_files, monkeypatch, capsys, name):
    fake, files = mnist_files
    cls = getattr(datasets, name)
    pin(monkeypatch, cls, files)
    for file_name, data in files.items():
        server.serve(f"/mnist/{file_name}", "file", data)
    root = tmp_path / "data"
    train = cls(root, train=True, download=True, source_url=server.base + "/mnist")  # "/" is added
    np.testing.assert_array_equal(train.data, fake.train_images)
    assert train.targets == fake.train_labels.tolist()
    raw = root / name / "raw"
    assert sorted(os.listdir(raw)) == sorted([*files, *(n[:-3] for n in files)])  # .gz and decompressed
    assert len(server.requests) == 4

    capsys.readouterr()
    test = cls(root, train=False, download=True, source_url=server.base + "/mnist/")
    assert test.targets == fake.test_labels.tolist()
    assert capsys.readouterr().out.strip() == ALREADY_THERE and len(server.requests) == 4


def test_mnist_tries_the_next_mirror(server, tmp_path, mnist_files, monkeypatch, capsys):
    fake, files = mnist_files
    pin(monkeypatch, datasets.MNIST, files)
    for file_name, data in files.items():
        server.serve(f"/good/{file_name}", "file", data)
    monkeypatch.setattr(datasets.MNIST, "mirrors", (server.base + "/gone/", server.base + "/good/"))
    data = datasets.MNIST(tmp_path / "data", download=True)
    assert data.targets == fake.train_labels.tolist()
    assert "Failed to download (trying next): the server answered HTTP 404" in capsys.readouterr().out


def test_mnist_keeps_nothing_if_one_file_fails(server, tmp_path, mnist_files, monkeypatch):
    _, files = mnist_files
    pin(monkeypatch, datasets.MNIST, files)
    for file_name, data in files.items():  # the third file is forged; the first two download fine
        server.serve(f"/mnist/{file_name}", "file", data[::-1] if file_name == sorted(files)[2] else data)
    base = server.base + "/mnist/"
    with pytest.raises(DownloadError) as info:
        datasets.MNIST(tmp_path / "data", download=True, source_url=base)
    message = str(info.value)
    assert message.startswith(f"Could not download {sorted(files)[2]} for MNIST ({base}{sorted(files)[2]}: ")
    assert "forged" in message and "pass source_url=" in message
    assert len(server.requests) == 3  # two files came, then the forged one
    assert not (tmp_path / "data").exists()  # neither the two files that came, nor the folders


def test_mnist_source_url_is_a_folder(tmp_path):
    with pytest.raises(ValueError, match="names one file; give the address of the folder"):
        datasets.MNIST(tmp_path, download=True, source_url="https://example.org/mnist/train-images-idx3-ubyte.gz")
    assert os.listdir(tmp_path) == []
