"""The commands `lirs index`, `order`, `epoch` and `info`: what they check, and how they say it
(the option as typed, exit 2 for usage, before any work)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from lirs.cli import main


def _write(path, text: str) -> str:
    with open(path, "w") as f:
        f.write(text)
    return str(path)


@pytest.fixture
def shards(tmp_path):
    """Three LIBSVM files and ab.lirs, the index of the first two."""
    a = _write(tmp_path / "a.svm", "1 1:1\n1 2:1\n")
    b = _write(tmp_path / "b.svm", "1 3:1\n")
    c = _write(tmp_path / "c.svm", "-1 4:1\n-1 5:1\n")
    ab = str(tmp_path / "ab.lirs")
    assert main(["index", "--quiet", a, b, "-o", ab]) == 0
    return a, b, c, ab


def test_check_compares_the_paths_given_with_the_files_indexed(shards, capsys):
    a, b, c, ab = shards
    capsys.readouterr()
    assert main(["index", "--check", a, b, "-o", ab]) == 0
    assert "still matches 2" in capsys.readouterr().out
    assert main(["index", "--check", a, b, c, "-o", ab]) == 1  # a shard added: its records would be left out
    err = capsys.readouterr().err
    assert "c.svm not indexed by it" in err and "also indexes" not in err
    assert main(["index", "--check", c, "-o", ab]) == 1
    err = capsys.readouterr().err
    assert "c.svm not indexed" in err and "also indexes" in err and "b.svm" in err


def test_check_leaves_sidecars_out_of_the_paths_and_compares_their_order(shards, tmp_path, capsys):
    """`lirs index --check D.lirs -o D.lirs` exited 1 advising `lirs index D.lirs -o D.lirs` (itself
    refused): a sidecar among the PATHs was compared as a data file. And PATHs given in another order
    than indexed passed, though global record IDs follow the files' order."""
    a, b, c, ab = shards
    capsys.readouterr()
    assert main(["index", "--check", ab, "-o", ab]) == 0, capsys.readouterr().err
    assert main(["index", "--check", a, ab, b, "-o", ab]) == 0, capsys.readouterr().err
    d = tmp_path / "D"
    d.mkdir()
    for i in (1, 2):
        _write(d / f"p{i}.svm", "1 1:1\n0 2:1\n")
    assert main(["index", "--quiet", str(d)]) == 0
    assert main(["index", "--check", f"{d}.lirs", "-o", f"{d}.lirs"]) == 0, capsys.readouterr().err
    capsys.readouterr()
    assert main(["index", "--check", b, a, "-o", ab]) == 1
    err = capsys.readouterr().err
    assert "another order" in err and "record IDs" in err and f"lirs index {b} {a} -o {ab}" in err
    assert ".lirs -o" not in err.replace(f"-o {ab}", "")


@pytest.fixture
def svm(tmp_path):
    """A small LIBSVM file, not indexed."""
    return _write(tmp_path / "d.svm", "".join(f"{1 if i % 2 else -1} {i % 7 + 1}:1\n" for i in range(100)))


@pytest.mark.parametrize("opts", [["--batch-size", "0"], ["--world-size", "0"], ["--rank", "5"], ["--seed", "-1"],
                                  ["--epoch", "-1"], ["--group-bytes", "1"], ["--window", "abc"]])
def test_order_refuses_a_bad_option_before_it_indexes_the_data(svm, opts, capsys):
    assert main(["order", svm, *opts]) == 2
    assert opts[0] in capsys.readouterr().err
    assert not os.path.exists(svm + ".lirs")  # no scan of the whole dataset for an option that cannot work


@pytest.mark.parametrize("cmd,opts", [
    ("epoch", ["--batch-size", "0"]), ("epoch", ["--prefetch", "0"]), ("epoch", ["--depth", "0"]),
    ("epoch", ["--depth", "5000"]), ("epoch", ["--seed", "-1"]), ("epoch", ["--epoch", "-1"]),
    ("epoch", ["--group-bytes", "1"]), ("epoch", ["--group-bytes", "-1"]), ("epoch", ["--window", "0"]),
    ("order", ["--batch-size", "0"]), ("order", ["--world-size", "0"]), ("order", ["--rank", "-1"]),
    ("order", ["--seed", "-1"]), ("order", ["--group-bytes", "1"]), ("order", ["--group-bytes", "-1"]),
    ("order", ["--window", "abc"]), ("order", ["--drop-last", "--batch-size", "1000"])])
def test_an_option_error_names_the_option_as_typed(svm, cmd, opts, capsys):
    assert main([cmd, svm, *opts]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert opts[0] in err, err
    # not the library's parameter names, which the command line never took
    assert not any(p in err for p in ("batch_size", "world_size", "group_bytes", "drop_last=", "window must",
                                      "depth must", "prefetch must", "seed must", "epoch must", "rank -1")), err


def test_check_prints_json_under_json(shards, capsys):
    a, b, c, ab = shards
    capsys.readouterr()
    assert main(["index", "--check", a, b, "-o", ab, "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["matches"] is True and got["records"] == 3 and len(got["files"]) == 2 and got["sidecar"] == ab


@pytest.mark.parametrize("opts", [["--full"], ["--format", "lines"], ["--record-size", "3"], ["--header-size", "0"],
                                  ["--chunk", "1M"]])
def test_check_refuses_the_options_of_a_scan(shards, opts, capsys):
    a, b, c, ab = shards
    capsys.readouterr()
    assert main(["index", "--check", a, b, "-o", ab, *opts]) == 2  # taken silently, they seemed to apply
    err = capsys.readouterr().err
    assert f"--check does not take {opts[0]}" in err


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("extra", [[], ["--json"]])
def test_check_on_a_full_stdout_says_standard_output(shards, extra):
    """It said "No space left on device (... use -o to write elsewhere)": -o names the sidecar checked."""
    a, b, c, ab = shards
    with open("/dev/full", "w") as full:
        r = subprocess.run([sys.executable, "-m", "lirs", "index", "--check", a, b, "-o", ab, *extra], stdout=full,
                           stderr=subprocess.PIPE, text=True, timeout=300)
    assert r.returncode == 1 and r.stderr == "lirs index: error: standard output: No space left on device " \
                                             "(no space left on the device)\n", r.stderr


def test_index_refuses_a_sidecar_given_as_data(svm, capsys):
    assert main(["index", "--quiet", svm]) == 0
    capsys.readouterr()
    # read as data it was "NUL byte in what should be text; ... use --format fixed", which indexed the index
    for opts in ([], ["--format", "fixed", "--record-size", "1"]):
        assert main(["index", "--quiet", svm + ".lirs", *opts]) == 2
        assert "that is an index (a .lirs sidecar); run lirs index on its data files" in capsys.readouterr().err
    assert not os.path.exists(svm + ".lirs.lirs")


@pytest.mark.parametrize("cmd", [["info", ""], ["order", ""], ["epoch", ""], ["index", ""], ["index", "{svm}", ""],
                                 ["shuffle", "", "-o", "{svm}.o.svm"], ["shuffle", "{svm}", "", "-o", "{svm}.o.svm"],
                                 ["quality", ""], ["bench", ""]])
def test_an_empty_path_is_a_usage_error_naming_it(svm, cmd, capsys):
    """It was "no such file: [Errno 2] No such file or directory: ''", exit 1 (shuffle's IN, named
    `inputs`, was still one: every command's positionals are checked)."""
    assert main([c.format(svm=svm) for c in cmd]) == 2
    err = capsys.readouterr().err
    assert "PATH is empty" in err and "Errno" not in err, err


@pytest.mark.parametrize("cmd", [["gen", "--profile", "kdd", "--records", "10", "-o", ""], ["index", "{svm}", "-o", ""],
                                 ["order", "{svm}", "-o", ""], ["shuffle", "{svm}", "-o", "{svm}.o.svm", "--tmpdir", ""],
                                 ["quality", "--records", "100", "--json", ""], ["bench", "{svm}", "--plot", ""],
                                 ["demo", "--out", ""]])
def test_an_empty_output_option_is_a_usage_error_naming_it(svm, cmd, capsys, tmp_path, monkeypatch):
    """`lirs gen -o ''` said "-o /cwd is a directory" (the empty name taken for the current folder);
    `shuffle --tmpdir ''` put the piles there. Refused before any work, naming the option."""
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    assert main([c.format(svm=svm) for c in cmd]) == 2
    err = capsys.readouterr().err
    flag = cmd[cmd.index("") - 1]
    assert f"{flag} is empty (''; an unset shell variable?)" in err, err
    assert os.listdir(tmp_path / "cwd") == []


@pytest.mark.parametrize("memory", ["abc", "4K,8K", "sweep"])
def test_order_memory_says_the_forms_one_budget_takes(svm, memory, capsys):
    """It offered "a comma-separated list of them, or 'sweep'", forms of `lirs quality`'s list that
    `lirs order --strategy` refuses with the same message."""
    assert main(["order", svm, "--strategy", "shuffle_buffer", "--memory", memory]) == 2
    err = capsys.readouterr().err
    assert "expected a size like 64M or a share like 5%" in err and "sweep" not in err.split("expected")[1], err


def test_info_label_range_leaves_nan_labels_out_and_counts_them(tmp_path, capsys):
    """Past 65535 distinct labels info says their range: one NaN label made min and max "nan"."""
    p = _write(tmp_path / "reg.svm", "nan 1:1\n" + "".join(f"{i + 0.5} 1:1\n" for i in range(70000)))
    assert main(["index", "--quiet", p]) == 0
    capsys.readouterr()
    assert main(["info", "--json", p]) == 0
    assert json.loads(capsys.readouterr().out)["labels"] == {"distinct": "> 65535", "min": 0.5, "max": 69999.5,
                                                             "nan": 1}
    assert main(["info", p]) == 0
    assert "min: 0.5, max: 69999.5, nan: 1" in capsys.readouterr().out
