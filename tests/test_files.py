"""tools/files.py: output files are replaced whole or not at all (the grader's gradebook, the student edition)."""

import csv
from pathlib import Path

import pytest

from tools import files, grade


def test_a_write_replaces_the_file_whole_and_leaves_no_temporary_file(tmp_path):
    path = tmp_path / "deeper" / "grades.csv"
    files.write_atomic(path, "student,score\nana,3\n")
    files.write_atomic(path, b"student,score\nana,2\n")
    assert path.read_text() == "student,score\nana,2\n"
    assert [p.name for p in path.parent.iterdir()] == ["grades.csv"]


def test_a_write_that_fails_keeps_the_old_file_and_removes_its_temporary_file(tmp_path, monkeypatch):
    path = tmp_path / "results.jsonl"
    path.write_text("last week\n")

    def full_disk(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files.os, "replace", full_disk)
    with pytest.raises(OSError, match="No space"):
        files.write_atomic(path, "this week\n" * 1000)
    assert path.read_text() == "last week\n"
    assert [p.name for p in tmp_path.iterdir()] == ["results.jsonl"]


def test_a_gradebook_row_that_cannot_be_written_leaves_last_weeks_gradebook_whole(tmp_path):
    """Before: the file was opened for writing (emptied) first, so an error in a later row left it cut short."""
    path = tmp_path / "grades.csv"
    grade._write_csv(path, ["student", "score"], [{"student": "ana", "score": "3"}])
    before = path.read_text()

    class Unprintable:
        def __str__(self):
            raise RuntimeError("cannot be shown")

    rows = [{"student": "ben", "score": "2"}, {"student": Unprintable(), "score": "1"}]
    with pytest.raises(RuntimeError):
        grade._write_csv(path, ["student", "score"], rows)
    assert path.read_text() == before
    with open(path, newline="") as f:
        assert list(csv.DictReader(f)) == [{"student": "ana", "score": "3"}]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["grades.csv"]


def test_a_notebook_is_stored_as_nbformat_stores_it(tmp_path):
    import nbformat

    nb = nbformat.read(Path(__file__).resolve().parent.parent / "notebooks" / "01_tensors.ipynb", as_version=4)
    nbformat.write(nb, tmp_path / "by_nbformat.ipynb")
    files.write_notebook(tmp_path / "ours.ipynb", nb)
    assert (tmp_path / "ours.ipynb").read_bytes() == (tmp_path / "by_nbformat.ipynb").read_bytes()
