"""What torchrun's parser said of a line is kept (mgpu_tui/commands/launchers/torchrun_cache.py):
the same line under the same torch, Python and PET_* variables is not parsed again (a second import
of torch, ~2 s of the drop-in's start); anything else the answer depends on is a new key; a cache
that is damaged, planted as a link, or turned off is no cache."""

import json
import os

import pytest

from mgpu_tui.commands.launchers import torchrun_cache

OURS = [["--json", 0, ""]]
ANSWER = {"torchrun": {"program": "train.py"}, "ours": [], "passthrough": [], "ignored": []}


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MGPU_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(torchrun_cache.OFF, raising=False)


def test_an_answer_kept_is_recalled_for_the_same_line_only():
    key = torchrun_cache.key("/usr/bin/python3", OURS, ["--nproc-per-node", "2", "train.py"], {})
    assert torchrun_cache.recall(key) is None
    torchrun_cache.keep(key, ANSWER)
    assert torchrun_cache.recall(key) == ANSWER
    others = [
        torchrun_cache.key("/usr/bin/python3", OURS, ["--nproc-per-node", "4", "train.py"], {}),
        torchrun_cache.key("/other/python", OURS, ["--nproc-per-node", "2", "train.py"], {}),
        torchrun_cache.key("/usr/bin/python3", [], ["--nproc-per-node", "2", "train.py"], {}),
        torchrun_cache.key(
            "/usr/bin/python3", OURS, ["--nproc-per-node", "2", "train.py"], {"PET_NNODES": "2"}
        ),
        torchrun_cache.key(
            "/usr/bin/python3",
            OURS,
            ["--nproc-per-node", "2", "train.py"],
            {"TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "9"},
        ),
    ]
    assert key not in others and len(set(others)) == len(others)
    # Variables the parser never reads are no part of the key.
    assert key == torchrun_cache.key(
        "/usr/bin/python3", OURS, ["--nproc-per-node", "2", "train.py"], {"HOME": "/x"}
    )


def test_a_changed_parser_file_is_a_new_key(tmp_path, monkeypatch):
    reader = tmp_path / "run.py"
    reader.write_text("parser v1\n")
    monkeypatch.setattr(torchrun_cache, "_sources", lambda: [None, str(reader), None, None])
    before = torchrun_cache.key("python", OURS, ["train.py"], {})
    reader.write_text("parser v2, longer\n")  # torch upgraded, or the file edited
    assert torchrun_cache.key("python", OURS, ["train.py"], {}) != before
    monkeypatch.setattr(torchrun_cache, "_sources", lambda: [None, None, None, None])
    assert torchrun_cache.key("python", OURS, ["train.py"], {}) is None  # no torch: nothing kept


def test_damaged_planted_or_turned_off_is_no_cache(tmp_path, monkeypatch):
    key = torchrun_cache.key("python", OURS, ["train.py"], {})
    folder = torchrun_cache.folder()
    folder.mkdir(parents=True)
    (folder / f"{key}.json").write_text("{not json")
    assert torchrun_cache.recall(key) is None
    (folder / f"{key}.json").write_text(json.dumps(["a list"]))
    assert torchrun_cache.recall(key) is None
    (folder / f"{key}.json").unlink()
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps(ANSWER))
    os.symlink(elsewhere, folder / f"{key}.json")  # a link planted in the cache is never followed
    assert torchrun_cache.recall(key) is None
    (folder / f"{key}.json").unlink()
    os.mkfifo(folder / f"{key}.json")  # nor a FIFO read (it would block)
    assert torchrun_cache.recall(key) is None
    (folder / f"{key}.json").unlink()
    monkeypatch.setenv(torchrun_cache.OFF, "0")
    torchrun_cache.keep(key, ANSWER)
    assert not (folder / f"{key}.json").exists() and torchrun_cache.recall(key) is None


def test_the_cache_keeps_the_latest_lines_only(monkeypatch):
    monkeypatch.setattr(torchrun_cache, "MAX_ENTRIES", 3)
    keys = [torchrun_cache.key("python", OURS, [f"train{i}.py"], {}) for i in range(5)]
    for i, key in enumerate(keys):
        torchrun_cache.keep(key, ANSWER)
        os.utime(torchrun_cache.folder() / f"{key}.json", ns=(i * 10**9, i * 10**9))
    torchrun_cache.keep(keys[-1], ANSWER)  # pruned as it writes
    kept = sorted(p.stem for p in torchrun_cache.folder().glob("*.json"))
    assert kept == sorted(keys[-3:])


def test_an_unwritable_cache_is_no_cache_and_no_error(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("MGPU_CACHE_DIR", str(blocker))  # a file where the folder would be
    key = torchrun_cache.key("python", OURS, ["train.py"], {})
    torchrun_cache.keep(key, ANSWER)
    assert torchrun_cache.recall(key) is None
