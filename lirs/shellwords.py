"""Paths as words of a command that an error or a hint prints for the user to paste into a shell:
pasted, it must do what it says (a name with a space, a quote or a leading "-" comes through whole,
and a list of files is never cut short)."""
from __future__ import annotations

import os
import re
import shlex

LIST_MAX = 10  # files a command lists one by one; more would bury the message


def shell_word(path) -> str:
    """``path`` (str or bytes) as one shell word: quoted where it must be, and ``./NAME`` for a
    name starting with "-" (which a command would take as an option)."""
    p = os.fsdecode(path)
    return shlex.quote("./" + p if p.startswith("-") else p)


def shell_glob(d: str, pattern: str) -> str:
    """``d/PATTERN`` as shell words: the directory ``d`` quoted, the glob ``pattern`` left outside
    the quotes (quoted, its ``*`` would not expand)."""
    return shell_word(os.path.join(d, "")) + pattern


def glob_words(paths) -> str | None:
    """A shell glob ``DIR/PREFIX*`` or ``DIR/*SUFFIX`` that matches the files ``paths`` (of one
    directory) and no other file of it (TFDS shards ``mnist-train.tfrecord-*`` beside their .json
    metadata), else None."""
    paths = sorted(os.fspath(p) for p in paths)
    d = os.path.dirname(paths[0])
    if not all(os.path.dirname(p) == d for p in paths):
        return None
    names = [os.path.basename(p) for p in paths]
    try:
        there = [n for n in os.listdir(d or ".") if not n.startswith(".")]  # a glob's * skips hidden names
    except OSError:
        return None
    # the names' common start, less a number or word cut short (part-0000 of part-00000 ... part-00017)
    prefix = re.sub(r"[^\W_]+$", "", os.path.commonprefix(names))
    if prefix and {n for n in there if n.startswith(prefix)} == set(names):
        return shell_word(os.path.join(d, prefix)) + "*"
    suffix = os.path.commonprefix([n[::-1] for n in names])[::-1]
    suffix = suffix[suffix.find("."):] if "." in suffix else ""  # from a dot: *.jsonl, not *sonl
    if suffix and {n for n in there if n.endswith(suffix)} == set(names):
        return shell_glob(d, "*") + shell_word(suffix)
    return None


def listed_words(paths) -> str | None:
    """The files ``paths`` one by one as shell words, in their order; None where they are more
    than :data:`LIST_MAX`."""
    paths = list(paths)
    return " ".join(map(shell_word, paths)) if len(paths) <= LIST_MAX else None


def file_words(paths) -> str | None:
    """The files ``paths`` as shell words: a glob naming them alone (:func:`glob_words`), else each
    listed (:func:`listed_words`); None where neither does (the caller says so, never a list cut
    short, which pasted would build an index of fewer files)."""
    paths = list(paths)
    return glob_words(paths) or listed_words(paths)


def index_command(paths, out: str) -> str:
    """"`lirs index FILES -o OUT`" naming the files ``paths`` (:func:`file_words`); where they are
    too many to list and no pattern names them alone, that said plainly, never a list cut short."""
    paths = list(paths)
    words = file_words(paths)
    if words is not None:
        return f"`lirs index {words} -o {out}`"
    return (f"`lirs index` with these {len(paths)} files and `-o {out}` (too many to list here, "
            "and no one pattern names them alone)")
