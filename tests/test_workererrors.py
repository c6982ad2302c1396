"""A DataLoader worker's error as a Failed item with its traceback in a note, on every Python lirs supports:
Python 3.10 has no ``BaseException.add_note`` (new in 3.11), and an error sent from a worker there became
``AttributeError: 'OSError' object has no attribute 'add_note'``. Needs no torch: these are the functions a
LirsDataLoader worker runs."""
from __future__ import annotations

import pickle

from lirs.errors import StaleIndexError
from lirs.workererrors import Failed, failed, failing_early


class NoAddNote(StaleIndexError):
    """An exception as Python 3.10 makes one: no ``add_note`` (at module level, so that pickle finds it)."""

    add_note = None


def test_a_worker_error_keeps_its_note_where_python_has_no_add_note():
    e = NoAddNote("/d/x.svm changed after it was indexed")
    item = failed(e, 4, worker=2)
    assert type(item) is Failed and item.batch == 4 and item.error is e
    assert len(e.__notes__) == 1 and e.__notes__[0].startswith("(raised in DataLoader worker 2: ")
    back = pickle.loads(pickle.dumps(item.error))  # as it crosses to the main process
    assert type(back) is NoAddNote and back.__notes__ == e.__notes__


def test_an_error_before_the_walk_comes_as_itself_where_python_has_no_add_note():
    def start():
        raise NoAddNote("stale at worker start")
    (item,) = list(failing_early(start, 0))
    assert type(item.error) is NoAddNote and "worker 0" in item.error.__notes__[0]


def test_add_note_appends_to_the_notes_already_there_either_way():
    from lirs.errors import add_note

    for e in (OSError(5, "bad read", "/d/x.svm"), NoAddNote("x")):
        add_note(e, "first")
        add_note(e, "second")
        assert e.__notes__ == ["first", "second"]
