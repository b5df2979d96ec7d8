"""The tailer on real files that grow while it reads them."""

from mgpu_tui.engine.protocol.file_tail import FileTail


def test_file_that_appears_late(tmp_path):
    tail = FileTail(tmp_path / "late.log")
    assert tail.read_lines() == []
    (tmp_path / "late.log").write_bytes(b"one\ntwo\n")
    assert tail.read_lines() == [b"one", b"two"]
    assert tail.read_lines() == []


def test_partial_last_line_waits_for_its_newline(tmp_path):
    path = tmp_path / "f"
    tail = FileTail(path)
    with open(path, "ab") as f:
        f.write(b"first\nsec")
        f.flush()
        assert tail.read_lines() == [b"first"]
        assert tail.pending == b"sec"
        f.write(b"ond\nthird")
        f.flush()
        assert tail.read_lines() == [b"second"]
        f.write(b"\n")
        f.flush()
        assert tail.read_lines() == [b"third"]


def test_a_size_seen_before_its_bytes_is_read_once_the_bytes_are_there(tmp_path):
    """A shared filesystem (NFS) may show another host's file grown before its new bytes: zeros at
    the end. They are not taken for the record; the record is read once it is there (issue #29)."""
    import os

    path = tmp_path / "rank1.jsonl"
    path.write_bytes(b'{"a": 1}\n')
    tail = FileTail(path)
    record = b'{"b": 2}\n'
    os.truncate(path, 9 + len(record))  # the new size, its bytes not yet there: a hole of zeros
    assert tail.read_lines() == [b'{"a": 1}'] and tail.offset == 9 and not tail.behind
    assert tail.read_lines() == []
    fd = os.open(path, os.O_WRONLY)
    os.pwrite(fd, record, 9)  # the bytes arrive
    os.close(fd)
    assert tail.read_lines() == [b'{"b": 2}']
    with open(path, "ab") as f:  # zeros that a line follows are what was written: read as such
        f.write(b"x\0y\n")
    assert tail.read_lines() == [b"x\0y"]


def test_reads_incrementally_never_from_the_start(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"a\n")
    tail = FileTail(path)
    tail.read_lines()
    assert tail.offset == 2
    with open(path, "ab") as f:
        f.write(b"b\n")
    assert tail.read_lines() == [b"b"]
    assert tail.offset == 4


def test_over_long_line_is_dropped_and_counted(tmp_path):
    path = tmp_path / "f"
    tail = FileTail(path, max_line=10)
    with open(path, "ab") as f:
        f.write(b"ok\n" + b"x" * 25)
        f.flush()
        assert tail.read_lines() == [b"ok"]
        assert tail.pending == b""  # not held in memory
        f.write(b"y" * 25 + b"\nafter\n" + b"z" * 11 + b"\nlast\n")
    assert tail.read_lines() == [b"after", b"last"]
    assert tail.dropped_long_lines == 2


def test_big_growth_is_read_in_bounded_chunks(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"".join(b"line %d\n" % i for i in range(10_000)))
    tail = FileTail(path)
    got = []
    while chunk := tail.read_lines(max_bytes=4096):
        got += chunk
    assert got == [b"line %d" % i for i in range(10_000)]


def test_truncated_file_is_read_again(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"old line\n")
    tail = FileTail(path)
    assert tail.read_lines() == [b"old line"]
    path.write_bytes(b"new\n")
    assert tail.read_lines() == [b"new"]


def test_a_run_directory_is_readable_by_its_owner_only(tmp_path):
    from mgpu_tui.engine.protocol.rundir import RunDir

    run = RunDir.create(tmp_path / "runs", "ddp")
    assert run.path.stat().st_mode & 0o777 == 0o700
    shared = RunDir.create(tmp_path / "runs", "ddp", node=1, shared="job")
    assert shared.path.stat().st_mode & 0o777 == 0o700 and shared.spec_path.name == "spec-node1.json"


def test_a_deleted_file_is_followed_by_its_descriptor_and_a_replaced_one_is_switched_to(tmp_path):
    path = tmp_path / "events.jsonl"
    writer = open(path, "ab", buffering=0)
    writer.write(b"one\n")
    tail = FileTail(path)
    assert tail.read_lines() == [b"one"]
    path.unlink()  # the writer goes on writing to the unlinked file
    writer.write(b"two\n")
    assert tail.read_lines() == [b"two"]
    path.write_bytes(b"new\n")  # a new file at the path: followed once the old one is read out
    assert tail.read_lines() == [b"new"]
    writer.close()
    tail.close()
