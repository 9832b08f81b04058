"""The previews the test workers share (tests/conftest.py `_shared`): made once per run,
whoever asks first; every other asker loads its own copy."""

from __future__ import annotations

import os

from tests import conftest


def test_what_one_worker_made_the_next_loads_without_making_it(tmp_path, monkeypatch):
    monkeypatch.setenv(conftest.SHARED_PREVIEWS, str(tmp_path))
    made = []

    def make():
        made.append(1)
        return {"stack": "dev", "resources": [1, 2, 3]}

    first = conftest._shared("dev.None", make)
    again = conftest._shared("dev.None", make)
    assert made == [1] and again == first and again is not first  # a copy of its own
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dev.None.lock", "dev.None.pickle"]


def test_without_the_runs_folder_each_process_makes_its_own(tmp_path, monkeypatch):
    monkeypatch.setenv(conftest.SHARED_PREVIEWS, str(tmp_path / "gone"))
    made = []
    for _ in range(2):
        conftest._shared("dev.None", lambda: made.append(1))
    assert made == [1, 1] and not os.path.exists(tmp_path / "gone")


def test_the_run_has_its_folder_while_it_runs():
    assert os.path.isdir(os.environ[conftest.SHARED_PREVIEWS])
