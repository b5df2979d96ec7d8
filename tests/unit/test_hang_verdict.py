"""A hang's verdict from flight-recorder traces (as torch 2.13's gloo writes them) and Python stacks."""

import dataclasses

from mgpu_tui.engine.run.nccl.flight_records import call, hang_verdict, parse_entry, read_trace, where

NOW = 100 * 10**9


def entry(seq, op="gloo:all_reduce", sizes=((4,),), dtypes=("Float",), created_s=88):
    return parse_entry(raw(seq, op, sizes, dtypes, created_s))


def raw(seq, op="gloo:all_reduce", sizes=((4,),), dtypes=("Float",), created_s=88):
    return {
        "collective_seq_id": seq,
        "profiling_name": op,
        "process_group": ["0", "default_pg"],
        "input_sizes": [list(s) for s in sizes],
        "input_dtypes": list(dtypes),
        "state": "scheduled",
        "time_created_ns": created_s * 10**9,
    }


STACKS = """Thread 0x00007f (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 320 in wait
Current thread 0x00007e (most recent call first):
  File "/venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py", line 700 in __next__
  File "/home/me/train.py", line 44 in load_batch
  File "/home/me/train.py", line 80 in main
"""


def test_the_rank_that_never_entered_the_collective_is_named_with_where_it_is():
    traces = {0: [entry(4), entry(5)], 1: [entry(3), entry(4)], 2: [entry(4), entry(5)]}
    text, culprit = hang_verdict(traces, {1: STACKS}, NOW)
    assert culprit == 1
    assert text == (
        "rank 1 never entered all_reduce(float32[4]) #5 (default group); ranks 0, 2 have waited "
        "in it for 12 s; rank 1 is in load_batch at train.py:44"
    )


def test_ranks_at_one_collective_that_called_different_things_is_a_mismatch():
    traces = {0: [entry(5)], 1: [entry(5, op="gloo:broadcast", sizes=((8,),))]}
    assert hang_verdict(traces, {}, NOW) == (
        "at collective #5 rank 0 called all_reduce(float32[4]) and rank 1 broadcast(float32[8])",
        1,
    )


def test_no_verdict_when_every_rank_is_in_the_same_collective_or_traces_are_missing():
    assert hang_verdict({0: [entry(5)], 1: [entry(5)]}, {}, NOW) is None  # stuck inside it: a link, a peer
    assert hang_verdict({0: [entry(5)]}, {}, NOW) is None
    assert hang_verdict({0: [entry(5)], 1: []}, {}, NOW) is None


def test_a_ranks_trace_file_is_read_as_untrusted(tmp_path):
    path = tmp_path / "rank0.json"
    path.write_text(
        '{"entries": [{"collective_seq_id": true}, {"collective_seq_id": "7"}, 5, '
        '{"collective_seq_id": 3, "profiling_name": "gloo:all_reduce"}]}'
    )
    assert [e.seq for e in read_trace(path)] == [3]
    path.write_text("not json")
    assert read_trace(path) == [] and read_trace(tmp_path / "missing.json") == []
    odd = {
        "collective_seq_id": 1,
        "profiling_name": "x" * 500,
        "input_sizes": [[1, "a"], "b"],
        "input_dtypes": ["\x1b[31m" * 10],
    }
    assert len(call(parse_entry(odd))) < 120


def test_where_reads_the_latest_dump_and_prefers_the_programs_own_frame():
    assert where(STACKS) == "load_batch at train.py:44"
    assert where("") is None and where("no frames here") is None


def test_the_rank_that_enters_each_collective_last_is_a_straggler_and_p2p_is_left_out():
    from mgpu_tui.engine.run.nccl.flight_records import late_arrivals

    traces = {0: [], 1: []}
    for seq in range(1, 21):
        traces[0].append(entry(seq, created_s=seq))
        late = raw(seq, created_s=seq)
        late["time_created_ns"] += 30_000_000  # 30 ms after rank 0, every time
        traces[1].append(parse_entry(late))
    (straggler,) = late_arrivals(traces)
    assert (straggler.rank, straggler.steps, straggler.of_steps) == (1, 20, 20)
    assert straggler.counted == "collectives"
    assert abs(straggler.late_s - 0.03) < 1e-6 and "from the flight recorder" in straggler.describe()
    pipeline = {r: [dataclasses.replace(e, name="gloo:send") for e in t] for r, t in traces.items()}
    assert late_arrivals(pipeline) == ()
