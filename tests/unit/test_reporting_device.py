"""A demo's memory is counted on the device it trains on (demos/reporting.py): the one given, or the
first its hello names. The single demo gave none, so on a GPU its peak was the process's resident set
(5.5 GiB for gpt-1.3b, whose allocator peaked at 50 GiB: docs/gpu-validation.md)."""

import argparse

import torch

from mgpu_tui.demos.reporting import Reporting


def test_memory_is_counted_where_hello_says_the_rank_trains():
    args = argparse.Namespace(steps=1, fail_at_step=None, fail_rank=0, fail_kind="exception")
    report = Reporting(args)
    assert report.device == torch.device("cpu")  # before hello: nothing named yet
    report.hello("single", torch.device("meta"))  # a device that is not the CPU, as cuda:0 is not
    assert report.device == torch.device("meta")


def test_a_device_given_is_kept():
    args = argparse.Namespace(steps=1)
    report = Reporting(args, 0, torch.device("cpu"))
    assert report.device == torch.device("cpu")
