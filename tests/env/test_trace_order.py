"""The order of a command's own reads and whole replacements (depgpo.env.tracing.trace_order): which records it read
only after it had replaced them itself (`reads_after_write`, docs/credit-decisions.md#d-order), on real strace
output of a traced bash and on hand-written logs of what strace prints when processes run side by side."""

from __future__ import annotations

import pytest

from depgpo.env.tracing.trace_parser import TraceParser
from tests.env.test_trace_parser import needs_strace, port, shell  # noqa: F401 - fixtures

MARK = '100  1.0000{:02d} newfstatat(AT_FDCWD</w>, "/.depgpo_mark/{}/0", 0x1, 0) = -1 ENOENT (No such file)\n'


@needs_strace
@pytest.mark.sandbox
def test_a_file_written_whole_then_printed_back_is_read_after_the_write(shell):
    (shell.workdir / "x").write_text("old\n")
    effects = shell.run("cat > x <<'EOF'\nnew\nEOF\ncat x")
    assert effects.reads == effects.truncated == {shell.path("x")}  # the sets alone cannot tell the order
    assert effects.reads_after_write == {shell.path("x")}
    script = shell.run("cat > run.py <<'EOF'\nprint(42)\nEOF\npython3 run.py && test -s run.py")
    assert script.reads_after_write == {shell.path("run.py")}  # read by a child of the shell that wrote it


@needs_strace
@pytest.mark.sandbox
@pytest.mark.parametrize("command", ["cat x; echo new > x", "sed -i 's/old/new/' x", "[ -s x ] && echo new > x",
                                     "echo more >> x; cat x", "cp x y; cat > x <<'EOF'\nnew\nEOF\ncat x"])
def test_a_read_before_the_write_or_after_an_append_is_of_the_earlier_version(shell, command):
    (shell.workdir / "x").write_text("old\n")
    effects = shell.run(command)
    assert shell.path("x") in effects.reads | effects.stats
    assert effects.reads_after_write == set()


@needs_strace
@pytest.mark.sandbox
def test_a_rename_onto_and_a_deletion_replace_too(shell):
    for name in ("x", "y", "gone"):
        (shell.workdir / name).write_text("old\n")
    effects = shell.run("python3 -c \"import os; open('x.tmp', 'w').write('new'); os.replace('x.tmp', 'x'); "
                        "os.remove('gone')\" && cat x; test -e gone")  # unlink("gone"): a padded line
    assert effects.reads_after_write == {shell.path("x"), shell.path("gone")}
    moved_in = shell.run("echo new > ../y.tmp && python3 -c \"import os; os.replace('../y.tmp', 'y')\" && cat y")
    assert moved_in.reads_after_write == {shell.path("y")}  # from outside the tracked roots
    looked_first = shell.run("echo new > y.tmp && mv y.tmp y && cat y")  # mv stats y before it renames onto it
    assert shell.path("y") in looked_first.stats and looked_first.reads_after_write == {shell.path("y.tmp")}


@needs_strace
@pytest.mark.sandbox
def test_a_connect_after_the_commands_own_bind(shell, port):
    wait = ("python3 -c \"import time\nwhile ':%04X 00000000:0000 0A' % {0} not in open('/proc/net/tcp').read(): "
            "time.sleep(0.02)\"").format(port)
    effects = shell.run(f"python3 -m http.server {port} --bind 127.0.0.1 >/dev/null 2>&1 & {wait}; "
                        f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port})).close()\"; "
                        "kill %1; wait")
    assert effects.ports_bound == effects.ports_connected == {f"tcp:{port}"}
    assert effects.reads_after_write == {f"tcp:{port}"}


def _log(*calls: str) -> str:
    """A segment 0 of pid 100's shell: the calls between marks -1 and 0."""
    return MARK.format(1, -1) + "".join(calls) + MARK.format(99, 0)


CLONES = ("100  1.000002 clone(child_stack=NULL, flags=SIGCHLD, child_tidptr=0x7f) = 101\n"
          "100  1.000003 clone(child_stack=NULL, flags=SIGCHLD, child_tidptr=0x7f) = 102\n")
TRUNCATE = '102  1.0000{:02d} openat(AT_FDCWD</w>, "/w/f", O_WRONLY|O_CREAT|O_TRUNC, 0666) = 3</w/f>\n'


def test_side_by_side_a_read_counts_as_after_only_when_it_began_after_the_replacement_ended():
    after = TraceParser()
    after.feed(_log(CLONES, TRUNCATE.format(10), '101  1.000011 openat(AT_FDCWD</w>, "/w/f", O_RDONLY) = 3</w/f>\n'))
    assert after.summary(0).reads_after_write == {"/w/f"}
    overlapping = TraceParser()  # the read began before the truncation ended: it may have seen the old content
    overlapping.feed(_log(CLONES, '101  1.000010 openat(AT_FDCWD</w>, "/w/f", O_RDONLY <unfinished ...>\n',
                          TRUNCATE.format(11), "101  1.000012 <... openat resumed>) = 3</w/f>\n"))
    assert overlapping.summary(0).reads == {"/w/f"} and overlapping.summary(0).reads_after_write == set()
    unfinished_write = TraceParser()
    unfinished_write.feed(_log(CLONES,
                               '102  1.000010 openat(AT_FDCWD</w>, "/w/f", O_WRONLY|O_TRUNC <unfinished ...>\n',
                               '101  1.000011 openat(AT_FDCWD</w>, "/w/f", O_RDONLY) = 3</w/f>\n',
                               "102  1.000012 <... openat resumed>) = 3</w/f>\n"))
    assert unfinished_write.summary(0).reads_after_write == set()


def test_a_read_held_back_for_its_clone_keeps_the_position_it_was_printed_at(monkeypatch):
    """Child 103's lines wait for the clone that names it. Its read came after its sibling's truncation (not at the
    clone's start), and, read as is past the bound of held-back lines, one before it (not at the line that
    overflowed the bound)."""
    clone = "100  1.000004 clone(child_stack=NULL, flags=SIGCHLD <unfinished ...>\n"
    read = '103  1.0000{:02d} openat(AT_FDCWD</w>, "/w/f", O_RDONLY) = 3</w/f>\n'
    named = TraceParser()
    named.feed(_log(CLONES, clone, TRUNCATE.format(5), read.format(6),
                    "100  1.000007 <... clone resumed>, child_tidptr=0x7f) = 103\n"))
    assert named.summary(0).reads_after_write == {"/w/f"}
    monkeypatch.setattr("depgpo.env.tracing.trace_parser.MAX_ORPHAN_LINES", 1)
    adopted = TraceParser()
    adopted.feed(_log(CLONES, clone, read.format(5), TRUNCATE.format(6),
                      '102  1.000007 newfstatat(AT_FDCWD</w>, "/w/h", 0x1, 0) = -1 ENOENT (No such file)\n',
                      '103  1.000008 newfstatat(AT_FDCWD</w>, "/w/g", 0x1, 0) = -1 ENOENT (No such file)\n'))
    assert adopted.summary(0).reads == {"/w/f"} and adopted.summary(0).reads_after_write == set()


def test_a_short_call_padded_to_the_result_column_is_read():
    """strace pads a call shorter than its 40th column with spaces before ` = `: `unlink("gone")  = 0` was
    read as a call without a result, a failure, so a program's short relative unlink, rename, mkdir or chdir was
    lost."""
    parser = TraceParser()
    parser.feed(_log('100  1.000010 chdir("/w")              = 0\n', '100  1.000011 unlink("gone")           = 0\n',
                     '100  1.000012 mkdir("d", 0777)         = 0\n', '100  1.000013 rename("a", "b")         = 0\n',
                     '100  1.000014 unlink("no")             = -1 ENOENT (No such file or directory)\n'))
    effects = parser.summary(0)
    assert effects.deleted == {"/w/gone"} and effects.dirs_created == {"/w/d"}
    assert effects.renamed == [("/w/a", "/w/b")] and effects.missing == {"/w/no"}
