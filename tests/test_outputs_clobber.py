"""Outputs never clobber what is already there (issue 38, item 2).

Method: each output flag of the CLI is aimed at something that is not a regular file — a FIFO
(`os.mkfifo`), device nodes made with `mknod` inside the test's temporary folder (a copy of
/dev/full, major 1 minor 7, and of /dev/null, 1 3; never the real /dev), a symlink, a dangling
symlink — and at the same file twice. A refusal must be one line, exit 2, before any launch, and
the node must still be what it was (`stat`: a rename over it would have made it a regular file).
The copy of /dev/null is written through instead, and stays a device; a symlink's target gets
the content while the link stays a link."""
import os
import stat

import pytest

from mgpukit.cli import main
from mgpukit.files import check_distinct, write_text
from mgpukit.runtime import launcher


@pytest.fixture
def no_launch(monkeypatch):
    def tripwire(*a, **k):
        raise AssertionError("a launch started: the output path was not checked first")
    monkeypatch.setattr(launcher, "_run", tripwire)


def _exit_code(argv) -> int:
    try:
        return main(argv)
    except SystemExit as e:
        return e.code


def _refused(capsys, argv) -> str:
    code = _exit_code(argv)
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("mgpukit: error: "), err
    return lines[0]


def _can_mknod() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


@pytest.fixture
def nodes(tmp_path):
    """A FIFO, and where we may (root), copies of /dev/full and /dev/null — in tmp_path only."""
    made = {"fifo": tmp_path / "fifo"}
    os.mkfifo(made["fifo"])
    if _can_mknod():
        made["full"] = tmp_path / "full"
        os.mknod(made["full"], 0o666 | stat.S_IFCHR, os.makedev(1, 7))
        made["null"] = tmp_path / "null"
        os.mknod(made["null"], 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    return made


OUTPUT_FLAGS = [["run", "ddp", "--steps", "1", "--json"], ["run", "ddp", "--steps", "1", "--trace"],
                ["run", "ddp", "--steps", "1", "--save-weights"], ["plan", "--json"],
                ["bench", "launch", "--json"], ["calibrate", "--out"], ["export", "ddp", "--out"],
                ["export", "ddp", "--force", "--out"]]


@pytest.mark.parametrize("kind", ["fifo", "full"])
@pytest.mark.parametrize("flag", OUTPUT_FLAGS, ids=[" ".join(f) for f in OUTPUT_FLAGS])
def test_an_output_that_is_a_fifo_or_a_device_is_refused_and_left_alone(flag, kind, nodes, capsys, no_launch):
    if kind not in nodes:
        pytest.skip("mknod needs root")
    node = nodes[kind]
    mode = os.lstat(node).st_mode
    line = _refused(capsys, flag + [str(node)])
    assert "not a regular file" in line and str(node) in line
    assert os.lstat(node).st_mode == mode  # still the FIFO / the device


@pytest.mark.skipif(not _can_mknod(), reason="mknod needs root")
def test_a_copy_of_dev_null_is_written_through_never_renamed_over(nodes, capsys):
    null = nodes["null"]
    assert _exit_code(["plan", "--json", str(null)]) == 0, capsys.readouterr().err
    st = os.lstat(null)
    assert stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(1, 3)
    assert sorted(p.name for p in null.parent.iterdir()) == sorted(n.name for n in nodes.values())


def test_a_symlinked_output_writes_its_target_and_keeps_the_link(tmp_path, capsys):
    target, link = tmp_path / "real.json", tmp_path / "link.json"
    target.write_text("old\n")
    link.symlink_to(target)
    assert _exit_code(["plan", "--json", str(link)]) == 0, capsys.readouterr().err
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert '"predicted"' in target.read_text()
    write_text(link, "again\n")  # the library call too
    assert link.is_symlink() and target.read_text() == "again\n"


def test_a_dangling_symlink_is_refused(tmp_path, capsys, no_launch):
    link = tmp_path / "link.json"
    link.symlink_to(tmp_path / "nowhere" / "x.json")
    line = _refused(capsys, ["run", "ddp", "--json", str(link)])
    assert "symlink" in line and "does not exist" in line
    assert link.is_symlink() and not (tmp_path / "nowhere").exists()


@pytest.mark.parametrize("second", ["--trace", "--save-weights"])
def test_two_outputs_naming_the_same_file_are_refused_before_launch(second, tmp_path, capsys, no_launch):
    (tmp_path / "sub").mkdir()
    (tmp_path / "out.json").write_text("mine\n")
    (tmp_path / "alias.json").symlink_to(tmp_path / "out.json")
    for other in (tmp_path / "out.json", tmp_path / "sub" / ".." / "out.json", tmp_path / "alias.json"):
        line = _refused(capsys, ["run", "ddp", "--json", str(tmp_path / "out.json"), second, str(other)])
        assert "the same file" in line
    assert (tmp_path / "out.json").read_text() == "mine\n"


def test_hard_links_are_the_same_file_and_the_null_device_may_repeat(tmp_path):
    (tmp_path / "a").write_text("x")
    os.link(tmp_path / "a", tmp_path / "b")
    with pytest.raises(ValueError, match="the same file"):
        check_distinct([("record", tmp_path / "a"), ("trace", tmp_path / "b")])
    check_distinct([("record", os.devnull), ("trace", os.devnull), ("weights", None)])


@pytest.mark.parametrize("flag", OUTPUT_FLAGS[:5], ids=[" ".join(f) for f in OUTPUT_FLAGS[:5]])
def test_a_name_whose_temporary_name_is_too_long_is_refused_up_front(flag, tmp_path, capsys, no_launch):
    name = "r" * 250  # fits NAME_MAX (255); `.<name>.XXXXXXXX.tmp` does not
    line = _refused(capsys, flag + [str(tmp_path / name)])
    assert "temporary name" in line
    assert list(tmp_path.iterdir()) == []
