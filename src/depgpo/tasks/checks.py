"""What a generated task's verifier checks, written once and rendered as a shell `test.sh` or as pytest.

Three kinds cover every family: a file holds exactly these lines, a path is absent, a page is served on a port.
The shell rendering is the default: its checks need no interpreter start (a pytest start under the tracer took
~0.45 s of a tiny episode's ~0.65 s; bench/episode_cost.py measures both side by side). The pytest rendering is
Harbor's standard layout (`tests/test.sh` running `tests/test_outputs.py`), kept for that comparison and for the
tests of pytest verifiers. Both read the same files, so the records E that the trace shows are the same.

Both renderings accept a file whose bytes are the lines, each ending in a newline, the last newline optional; any
other byte (a CR, a NUL, an empty line more) fails. Every value is a plain token (letters, digits, - _ = . /), so
the shell needs no quoting beyond '...'.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

from depgpo.tasks.task import ISOLATED_PYTEST


@dataclass(frozen=True)
class FileLines:
    path: str
    lines: tuple[str, ...]


@dataclass(frozen=True)
class Absent:
    path: str


@dataclass(frozen=True)
class Served:
    port: int
    page: str
    token: str


Check = FileLines | Absent | Served
VERIFIERS = ("shell", "pytest")

# The shell verifier: fixed PATH and C locale (a character is a byte), no job control, nothing sourced; each check is
# a function whose status decides the reward. The file checks are bash builtins: under the tracer every process the
# verifier starts costs milliseconds. `read -d ''` stops at a NUL (status 0) or at EOF (status 1); `-n` caps it one
# byte past the longest file that can match, so a longer file also stops it with status 0.
_SHELL_HEAD = textwrap.dedent(r"""    #!/bin/bash
    # Generated checks in the shell: no interpreter start (depgpo.tasks.checks). Reward 1 if every check passes.
    export PATH=/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C
    [ -d /logs/verifier ] || mkdir -p /logs/verifier
    cd /
    failed=0
    file_lines() {  # PATH LINE...: the file holds exactly these lines (the last newline optional)
        local path=$1 expected='' content; shift
        [ -f "$path" ] || { echo "FAIL: $path is missing"; return 1; }
        (($#)) && printf -v expected '%s\n' "$@"
        if IFS= read -r -d '' -n $((${#expected} + 1)) content < "$path"; then
            echo "FAIL: $path differs"; return 1  # a NUL, or longer than expected
        fi
        [[ $content == "$expected" || $content == "${expected%$'\n'}" ]] || { echo "FAIL: $path differs"; return 1; }
    }
    absent() {  # PATH: nothing is there
        [ ! -e "$1" ] && [ ! -L "$1" ] || { echo "FAIL: $1 exists"; return 1; }
    }
    served() {  # PORT PAGE TOKEN: a GET of PAGE on 127.0.0.1:PORT answers 200 with TOKEN (waits up to 2 s to connect)
        local tries=0 response
        until exec 3<>"/dev/tcp/127.0.0.1/$1"; do
            tries=$((tries + 1)); [ "$tries" -lt 20 ] || { echo "FAIL: nothing listens on $1"; return 1; }
            sleep 0.1
        done 2>/dev/null
        printf 'GET /%s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' "$2" >&3
        response=$(timeout 5 cat <&3); exec 3<&-
        [[ $response == "HTTP/1."[01]" 200"* ]] || { echo "FAIL: GET /$2: ${response%%$'\r'*}"; return 1; }
        [[ ${response#*$'\r\n\r\n'} =~ ^[[:space:]]*"$3"[[:space:]]*$ ]] || { echo "FAIL: /$2 differs"; return 1; }
    }
    """)
_SHELL_TAIL = 'echo $((failed == 0)) > /logs/verifier/reward.txt\n'

# Harbor's standard test.sh without its downloads: pytest from the sandbox, run so that nothing in /app or / can
# change the runner (task.ISOLATED_PYTEST).
_PYTEST_SH = textwrap.dedent(f"""\
    #!/bin/bash
    # Offline variant of Harbor's standard test.sh: pytest from the sandbox, reward.txt 1 if all tests pass.
    mkdir -p /logs/verifier
    cd /app
    {ISOLATED_PYTEST} -rA /tests/test_outputs.py
    if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
    """)


def shell_test(checks: list[Check]) -> str:
    """tests/test.sh of the shell verifier."""
    lines = []
    for check in checks:
        if isinstance(check, FileLines):
            call = f"file_lines {check.path} " + " ".join(f"'{line}'" for line in check.lines)
        elif isinstance(check, Absent):
            call = f"absent {check.path}"
        else:
            call = f"served {check.port} {check.page} {check.token}"
        lines.append(f"{call} || failed=1\n")
    return _SHELL_HEAD + "".join(lines) + _SHELL_TAIL


def pytest_files(checks: list[Check]) -> dict[str, str]:
    """tests/test.sh and tests/test_outputs.py of the pytest verifier: one test function per check."""
    body = [textwrap.dedent("""\
        import time
        import urllib.error
        import urllib.request
        from pathlib import Path


        def get(url, wait_s=2.0):
            deadline = time.monotonic() + wait_s
            while True:
                try:
                    return urllib.request.urlopen(url, timeout=5).read()
                except urllib.error.HTTPError:
                    raise  # the server answered
                except OSError:  # nothing listens yet
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)
        """)]
    for number, check in enumerate(checks):
        if isinstance(check, FileLines):
            expected = "".join(line + "\n" for line in check.lines)
            test = (f'    target = Path("{check.path}")\n    assert target.is_file(), "{check.path} is missing"\n'
                    f"    assert target.read_bytes() in {(expected.encode(), expected[:-1].encode())!r}\n")
        elif isinstance(check, Absent):
            test = f'    assert not Path("{check.path}").exists()\n'
        else:
            test = (f'    page = get("http://127.0.0.1:{check.port}/{check.page}")\n'
                    f'    assert page.decode().strip() == "{check.token}"\n')
        body.append(f"\n\ndef test_check_{number}():\n{test}")
    return {"test.sh": _PYTEST_SH, "test_outputs.py": "".join(body)}


def verifier_files(checks: list[Check], verifier: str) -> dict[str, str]:
    """The files under tests/ for `verifier` (one of VERIFIERS)."""
    if verifier == "shell":
        return {"test.sh": shell_test(checks)}
    if verifier == "pytest":
        return pytest_files(checks)
    raise ValueError(f"unknown verifier {verifier!r}; known: {', '.join(VERIFIERS)}")
