"""lesson_tools.saved_runs: lesson 08's training comparison runs once per version of the student's pieces."""

import torch

from lesson_tools import saved_runs


def test_a_result_is_computed_once_per_fingerprint_and_read_back_equal(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    calls = []

    def compute():
        calls.append(1)
        return {"2017 block": {"losses": [4.4, 3.1], "validation": 2.5, "seconds": 24.1}}

    key = saved_runs.fingerprint("config", torch.arange(6.0))
    first = saved_runs.remembered("runs", key, compute)
    again = saved_runs.remembered("runs", key, compute)
    assert again == first and len(calls) == 1
    other = saved_runs.fingerprint("config", torch.arange(6.0) + 1e-6)  # a piece that computes another value
    assert other != key
    saved_runs.remembered("runs", other, compute)
    assert len(calls) == 2


def test_the_fingerprint_reads_dtype_shape_and_values():
    base = saved_runs.fingerprint(torch.ones(2, 3))
    assert base == saved_runs.fingerprint(torch.ones(2, 3))
    assert base != saved_runs.fingerprint(torch.ones(3, 2))
    assert base != saved_runs.fingerprint(torch.ones(2, 3, dtype=torch.float64))
    assert base != saved_runs.fingerprint(torch.ones(2, 3).t().contiguous().t().clone().fill_(2.0))
    assert saved_runs.fingerprint(torch.tensor(1.0)) != saved_runs.fingerprint(torch.tensor(2.0))


def test_a_folder_that_cannot_be_written_costs_only_the_saving(tmp_path, monkeypatch):
    blocked = tmp_path / "a file, not a folder"
    blocked.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    calls = []
    for _ in range(2):
        assert saved_runs.remembered("runs", "key", lambda: calls.append(1) or [1.0, 2.0]) == [1.0, 2.0]
    assert len(calls) == 2
