"""What sluice prints while it runs: a progress bar only when asked (tqdm's or a plain line),
and skips on the ``sluice`` logger instead of ``warnings``."""

import io
import logging
import sys
import tarfile
import warnings

import pytest

import sluice


class Terminal:
    """stderr as a terminal: pytest's capture (set up when the test body starts) answers
    ``isatty()`` with True, and ``text()`` returns what was written since the last call."""

    def __init__(self, capsys, monkeypatch):
        self._capsys = capsys
        monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
        assert sys.stderr.isatty()

    def text(self):
        return self._capsys.readouterr().err


@pytest.fixture
def tty(capsys, monkeypatch):
    # Made in the test body, where the capture that replaces sys.stderr is active.
    return lambda: Terminal(capsys, monkeypatch)


@pytest.fixture
def no_tqdm(monkeypatch):
    # A None entry makes `import tqdm...` raise ImportError, as when it is not installed.
    for name in ("tqdm", "tqdm.auto"):
        monkeypatch.setitem(sys.modules, name, None)


def test_progress_is_off_by_default_even_on_a_terminal(tty):
    term = tty()
    assert len(list(sluice.range(50).batch(4))) == 13
    with sluice.range(5).iter() as it:
        assert [s["id"] for s in it] == [0, 1, 2, 3, 4]
    assert term.text() == ""
    # The same loop with progress=True does write (so the check above can fail).
    assert len(list(sluice.range(5).iter(progress=True))) == 5
    assert "5" in term.text()


def test_progress_line_without_tqdm(tty, no_tqdm):
    term = tty()
    assert len(list(sluice.range(10).batch(3).iter(progress=True))) == 4
    out = term.text()
    assert out.endswith("\n") and "sluice: 4/4 outputs" in out.splitlines()[-1]
    # Unknown length: counts without a total; an early close ends the line too.
    it = sluice.range(10).filter(lambda s: True).iter(progress=True)
    next(it), next(it)
    it.close()
    out = term.text()
    last = out.splitlines()[-1]
    assert "sluice: 2 outputs" in last and "/" not in last.split("outputs")[0]
    assert out.count("\n") == 1
    it.close()  # closing twice writes nothing more
    assert term.text() == ""


def test_progress_bar_with_tqdm(tty):
    pytest.importorskip("tqdm")
    term = tty()
    assert len(list(sluice.range(10).batch(3).iter(progress=True))) == 4
    out = term.text()
    assert "sluice" in out and "4/4" in out
    assert len(list(sluice.range(10).filter(lambda s: True).iter(progress=True))) == 10
    assert "10it" in term.text()


def _symlink_shard(path):
    with tarfile.open(path, "w") as tf:
        for name, body in [("0.txt", b"zero"), ("2.txt", b"two")]:
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tf.addfile(info, io.BytesIO(body))
        link = tarfile.TarInfo("1.txt")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tf.addfile(link)


def test_skips_are_logged_on_the_sluice_logger_not_warned(tmp_path, caplog):
    (tmp_path / "t.txt").write_bytes(b"a\n\xff\nb\n")
    (tmp_path / "j.jsonl").write_text('{"a": 1}\nnope\n')
    (tmp_path / "c.csv").write_text("a,b\n1,2\n3\n")
    _symlink_shard(tmp_path / "s.tar")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with caplog.at_level(logging.WARNING, logger="sluice"):
            assert len(list(sluice.read_text(str(tmp_path / "t.txt"), on_error="skip"))) == 2
            assert len(list(sluice.read_jsonl(str(tmp_path / "j.jsonl"), on_error="skip"))) == 1
            assert len(list(sluice.read_csv(str(tmp_path / "c.csv"), on_error="skip"))) == 1
            # A stream counts while it reads: logged when the iteration ends.
            assert len(list(sluice.read_webdataset(str(tmp_path / "s.tar"), on_error="skip"))) == 2
    got = [(r.name, r.levelno, r.getMessage()) for r in caplog.records]
    assert [m for _, _, m in got] == [
        "read_text skipped 1 line(s) that are not UTF-8",
        "read_jsonl skipped 1 invalid line(s)",
        "read_csv skipped 1 record(s) that did not parse",
        'read_webdataset left out 1 record(s) it could not read (on_error="skip"); '
        "stats() counts them as the source's skips",
    ]
    assert {(n, lvl) for n, lvl, _ in got} == {("sluice", logging.WARNING)}


def test_nothing_is_logged_without_skips_and_the_logger_can_be_silenced(tmp_path, caplog):
    (tmp_path / "t.txt").write_bytes(b"a\n\xff\n")
    with caplog.at_level(logging.WARNING, logger="sluice"):
        sluice.read_text(str(tmp_path / "t.txt"), errors="replace", on_error="skip")
        list(sluice.range(3).batch(2))
        assert caplog.records == []
        logging.getLogger("sluice").setLevel(logging.ERROR)
        sluice.read_text(str(tmp_path / "t.txt"), on_error="skip")
        assert caplog.records == []


def test_samples_a_map_skips_are_logged_when_the_iteration_ends(caplog):
    def odd_only(s):
        if s["id"] % 2 == 0:
            raise ValueError("even")
        return s

    ds = sluice.range(10).map(odd_only, on_error="skip")
    with caplog.at_level(logging.WARNING, logger="sluice"):
        it = ds.iter()
        assert [s["id"] for s in it] == [1, 3, 5, 7, 9]
    (msg,) = [r.getMessage() for r in caplog.records if r.name == "sluice"]
    assert "skipped 5 sample(s) an op failed on" in msg and "odd_only" in msg
    assert sum(st["skipped"] for st in it.stats().stages) == 5
