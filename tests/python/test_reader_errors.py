"""Bad input to the readers: one ``on_error`` policy for every reader that has it, tar members
that are not regular files or are too large, text from files escaped in messages, and paths
that are not regular files.

Everything here is a real file (tar shards written with ``tarfile``, one header crafted by
hand); the size-limit checks run in a child process under an address-space limit, so an
allocation of a member's declared size would kill the child instead of passing.
"""

from __future__ import annotations

import io
import os
import shutil
import tarfile
import tempfile

import pytest

import sluice
from procs import run_py

# One policy ---------------------------------------------------------------------------------


def _records(tmp_path):
    """A CSV, a JSONL and a text file, each with 3 good records and 1 of each kind of bad one
    (line numbers in comments)."""
    csv = tmp_path / "r.csv"
    csv.write_bytes(
        b"id,v\n"
        b"1,a\n"  # 2
        b"2,\xff\xfe\n"  # 3: not UTF-8
        b"3\n"  # 4: one field short
        b"x,b\n"  # 5: id is not an int
        b"5,c\n"  # 6
        b"6,d\n"  # 7
    )
    jsonl = tmp_path / "r.jsonl"
    jsonl.write_bytes(
        b'{"id": 1}\n'
        b'{"id": 2, "v": "\xff"}\n'  # 2: not UTF-8
        b"[3]\n"  # 3: not an object
        b'{"id": "x"}\n'  # 4: not an int
        b'{"id": 5}\n'
        b'{"id": 6}\n'
    )
    text = tmp_path / "r.txt"
    text.write_bytes(b"1\n2 \xff\n5\n6\n")
    return csv, jsonl, text


def test_on_error_skip_counts_every_per_record_error_in_csv_jsonl_and_text(tmp_path, sluice_log):
    csv, jsonl, text = _records(tmp_path)
    cases = [
        (lambda **kw: sluice.read_csv(csv, schema={"id": "int"}, **kw), 3, "read_csv skipped 3"),
        (lambda **kw: sluice.read_jsonl(jsonl, schema={"id": "int"}, **kw), 3, "read_jsonl skipped 3"),
        (lambda **kw: sluice.read_text(text, **kw), 1, "read_text skipped 1"),
    ]
    for read, bad, warning in cases:
        with sluice_log(warning):
            ds = read(on_error="skip")
        rows = list(ds)
        assert len(rows) == 3, rows
        assert ds.stats().stages[0]["skipped"] == bad
        # Kept records only, with random access over them.
        assert len(list(ds.shuffle(seed=1))) == len(rows)
    assert [r["id"] for r in cases[0][0](on_error="skip")] == [1, 5, 6]


@pytest.mark.filterwarnings("error")  # raising warns about nothing
def test_on_error_raise_names_file_and_line_for_every_per_record_error(tmp_path):
    csv, jsonl, text = _records(tmp_path)
    # A wrong field count is found when the files are opened ...
    with pytest.raises(sluice.SluiceError, match=r"r\.csv:4: expected 2 fields, got 1"):
        sluice.read_csv(csv, schema={"id": "int"})
    csv.write_bytes(b"id,v\n1,a\n2,\xff\xfe\nx,b\n")
    ds = sluice.read_csv(csv, schema={"id": "int"})
    # ... the others when the record is read, naming it.
    with pytest.raises(sluice.SluiceError, match=r"r\.csv:3: invalid UTF-8"):
        ds.take(2)
    with pytest.raises(sluice.SluiceError, match=r"r\.csv:4: column 'id': cannot parse 'x' as int"):
        list(ds.shard(0, 2, equal=False))  # records 0 and 2: lines 2 and 4
    ds = sluice.read_jsonl(jsonl, schema={"id": "int"})
    with pytest.raises(sluice.SluiceError, match=r"r\.jsonl:2: invalid UTF-8"):
        ds.take(2)
    with pytest.raises(sluice.SluiceError, match=r"r\.txt:2: invalid UTF-8"):
        sluice.read_text(text).take(2)
    for read in (sluice.read_csv, sluice.read_jsonl, sluice.read_text):
        with pytest.raises(ValueError, match="on_error must be 'raise' or 'skip'"):
            read(csv, on_error="ignore")


def test_values_in_messages_are_escaped(tmp_path):
    p = tmp_path / "ctl.csv"
    p.write_bytes(b"id\n1\n\x1b[2J\x07\n")
    with pytest.raises(sluice.SluiceError) as e:
        list(sluice.read_csv(p, schema={"id": "int"}))
    msg = str(e.value)
    assert r"cannot parse '\x1b[2J\x07' as int" in msg
    assert not any(ord(c) < 32 for c in msg), repr(msg)


# Tar members --------------------------------------------------------------------------------


def _member(name, data=b"", kind=tarfile.REGTYPE, **attrs):
    info = tarfile.TarInfo(name)
    info.type = kind
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    for k, v in attrs.items():
        setattr(info, k, v)
    return info, io.BytesIO(data) if kind == tarfile.REGTYPE else None


def _special_shard(path):
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tf:
        for info, body in [
            _member("0.txt", b"zero"),
            _member("dir/", kind=tarfile.DIRTYPE),  # no data, not counted
            _member("1.txt", kind=tarfile.SYMTYPE, linkname="/etc/passwd"),
            _member("2.txt", kind=tarfile.LNKTYPE, linkname="0.txt"),
            _member("3.txt", kind=tarfile.FIFOTYPE),
            _member("4.txt", kind=tarfile.CHRTYPE, devmajor=1, devminor=3),
            _member("5.txt", kind=tarfile.BLKTYPE, devmajor=8, devminor=0),
            _member("6.txt", b"six"),
        ]:
            tf.addfile(info, body)


def test_tar_links_fifos_and_devices_raise_or_are_skipped_counted_and_reported(tmp_path, sluice_log):
    shard = tmp_path / "special.tar"
    _special_shard(shard)
    with pytest.raises(sluice.SluiceError, match=r"special\.tar: member '1\.txt' is a symbolic link"):
        list(sluice.read_webdataset(shard))
    ds = sluice.read_webdataset(shard, on_error="skip")
    with sluice_log(r"read_webdataset left out 5 record\(s\)"):
        rows = list(ds)
    assert [(r["__key__"], r["txt"]) for r in rows] == [("0", b"zero"), ("6", b"six")]
    assert ds.stats().stages[0]["skipped"] == 5
    # Each iteration counts its own skips.
    it = ds.shuffle_buffer(4, seed=1).iter()
    with sluice_log("left out 5"):
        assert len(list(it)) == 2
    assert it.stats().stages[0]["skipped"] == 5


def test_tar_member_over_the_size_limit_raises_or_is_skipped(tmp_path, sluice_log):
    shard = tmp_path / "big.tar"
    with tarfile.open(shard, "w") as tf:
        for name, data in [("0.txt", b"a"), ("1.bin", b"x" * 5000), ("2.txt", b"c")]:
            tf.addfile(*_member(name, data))
    with pytest.raises(sluice.SluiceError, match=r"big\.tar: member '1\.bin' declares 5000 bytes, over max_member_size \(4096\)"):
        list(sluice.read_webdataset(shard, max_member_size=4096))
    ds = sluice.read_webdataset(shard, max_member_size=4096, on_error="skip")
    with sluice_log("left out 1"):
        assert [r["__key__"] for r in ds] == ["0", "2"]
    assert len(list(sluice.read_webdataset(shard, max_member_size=5000))) == 3
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="max_member_size"):
            sluice.read_webdataset(shard, max_member_size=bad)


def test_tar_member_declaring_8_gib_is_never_allocated(tmp_path):
    """A hand-made header declaring 8 GiB, followed by 1 KiB: read in a child limited to 4 GiB
    of address space, where allocating the declared size fails (and aborts the process)."""
    shard = tmp_path / "huge.tar"
    info = tarfile.TarInfo("000.bin")
    info.size = 8 << 30
    shard.write_bytes(info.tobuf(tarfile.GNU_FORMAT) + b"\x01" * 1024)
    code = f"""
        import resource, sluice
        limit = 4 << 30
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        for kw in ({{}}, {{"on_error": "skip"}}, {{"max_member_size": 16 << 30}}):
            try:
                list(sluice.read_webdataset({str(shard)!r}, **kw))
                print("no error", kw)
            except sluice.SluiceError as e:
                print(e)
    """
    out = run_py(code, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    default, skip, generous = out.stdout.splitlines()
    assert "huge.tar: member '000.bin' declares 8589934592 bytes, over max_member_size (1073741824)" in default
    # Skipped, its bytes are read past — and the shard ends inside them.
    assert "huge.tar: not a readable tar shard" in skip
    # Allowed, it is read as far as the shard goes: cut short, never allocated up front.
    assert "member '000.bin' is cut short (1024 of 8589934592 bytes)" in generous


def test_tar_of_random_bytes_gives_a_printable_error(tmp_path):
    shard = tmp_path / "noise.tar"
    # Random header bytes with control characters where the parser quotes fields from.
    block = bytearray(os.urandom(512))
    block[148:156] = b"\n\x1b[2J\x07\r\x00"
    shard.write_bytes(bytes(block) + os.urandom(1024))
    with pytest.raises(sluice.SluiceError) as e:
        list(sluice.read_webdataset(shard))
    msg = str(e.value)
    assert "noise.tar: not a readable tar shard" in msg
    assert not any(ord(c) < 32 or 0x7F <= ord(c) < 0xA0 for c in msg), repr(msg)


# Paths that are not regular files -----------------------------------------------------------


def test_read_files_names_what_a_path_is(tmp_path):
    with pytest.raises(OSError, match=r"/dev/null: not a regular file \(a character device\)") as e:
        sluice.read_files("/dev/null")
    assert not isinstance(e.value, FileNotFoundError)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match=r"pipe: not a regular file \(a FIFO\)"):
        sluice.read_files(fifo)
    # Inside a directory a FIFO is passed over: reading it would block forever.
    (tmp_path / "a.bin").write_bytes(b"x")
    assert [os.path.basename(s["path"]) for s in sluice.read_files(tmp_path)] == ["a.bin"]
    with pytest.raises(FileNotFoundError, match="no such file or directory"):
        sluice.read_files(tmp_path / "missing")
    (tmp_path / "dangling").symlink_to(tmp_path / "gone")
    with pytest.raises(FileNotFoundError, match="symbolic link to a missing file"):
        sluice.read_files(tmp_path / "dangling")


def test_read_files_reports_permission_denied():
    # Under /tmp (not pytest's private tmp dir) so an unprivileged child can reach the files.
    d = tempfile.mkdtemp(prefix="sluice-perm-", dir="/tmp")
    os.chmod(d, 0o755)
    secret = os.path.join(d, "secret.bin")
    locked = os.path.join(d, "locked")
    try:
        with open(secret, "wb") as f:
            f.write(b"x")
        os.chmod(secret, 0)
        os.mkdir(locked)
        with open(os.path.join(locked, "f.bin"), "wb") as f:
            f.write(b"y")
        os.chmod(locked, 0)
        # Root reads everything: the child drops to nobody first.
        code = f"""
            import os, sluice
            if os.geteuid() == 0:
                os.setgid(65534); os.setuid(65534)
            for p in ({secret!r}, {locked!r}):
                try:
                    sluice.read_files(p)
                    print("read", p)
                except OSError as e:
                    print(type(e).__name__, e)
        """
        out = run_py(code, timeout=60)
    finally:
        os.chmod(locked, 0o700)
        shutil.rmtree(d)
    assert out.returncode == 0, out.stderr[-2000:]
    file_line, dir_line = out.stdout.splitlines()
    assert file_line.startswith("OSError") and "secret.bin: Permission denied" in file_line, file_line
    assert dir_line.startswith("OSError") and "locked: Permission denied" in dir_line, dir_line
