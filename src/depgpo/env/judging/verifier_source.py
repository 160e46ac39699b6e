"""The records a verifier's source text names: the absolute paths and local ports written in it.

These are the paper's extraction rules for the inspection set E when no trace of the verifier shows what it
inspected: the sandbox falls back to them when the verifier's trace yields nothing (`env.verifier`), and offline
inference takes E from the verifier's source or, lacking it, the task instruction (`depgpo.inference`). Text
matching only: nothing is opened or run.
"""

from __future__ import annotations

import posixpath
import re

from depgpo.trajectory.scope import GLOB_CHARS, UNTRACKED_PREFIXES, is_under

# The loopback host as URLs and server commands spell it.
LOCAL_HOST = r"(?:localhost|127\.0\.0\.1|0\.0\.0\.0|\[::1\])"

# Where a path starts: a "/" that is not part of a URL, a word, a relative path or an expression
# (`http://h/x`, `and/or`, `a/b`, `~/x`, `$D/x`, `{BASE}/x`, `Path(d)/x`), followed by a name character.
_PATH_START = re.compile(r"(?<![\w.:/~$\\})\]-])/(?=[\w.@+*?\[{$%-])")
_NAME = re.compile(r"[\w.@+~*?-]+")  # the literal and glob characters of a file name
# What a string may hold in place of part of a name, each read as the wildcard `*`: a `%` format (`%d`, `%(n)s`,
# `%Y`), a shell variable (`$NAME`); `{…}` fields and `${…}`/`$(…)` are matched by _field_end.
_PERCENT_FORMAT = re.compile(r"%(?:\([^()\s]*\))?[-#0+]*\d*(?:\.\d+)?[A-Za-z]")
_SHELL_NAME = re.compile(r"\$\w+")
_GLOB_CLASS = re.compile(r"\[[^\[\]/\s\\]+\]")
# A path ends before one of these (or the end of the text); before anything else (`=`, `\d`, `(`), the token was a
# URL's query, a regex or code, not a path.
_PATH_END = frozenset(" \t\r\n\"'`,;:|&<>()[]{}!#")
_STRING_ESCAPE_AFTER_PATH = re.compile(r"\\[ntr\"'\n]")  # `"/app/x\n"`: the escape ends the path, it is no regex
_INSIDE_URL = re.compile(r"://[^\s'\"`]*$")  # `http://h/p?next=/login`: the rest of a URL names no file
_PORT_TOKEN = re.compile(rf"{LOCAL_HOST}:(\d{{2,5}})\b|(?<![a-z])port(?![a-z])['\"]?\s*[=:]?\s*['\"]?(\d{{2,5}})\b",
                         re.IGNORECASE)  # `localhost:8080`, `port=8080`, `server_port = 8080`, "on port 8080"


def named_port(digits: str) -> str | None:
    """The port record of a port number written in text; None when it is no TCP port."""
    return f"tcp:{digits}" if 0 < int(digits) < 65536 else None


def extract_verifier_records(text: str, workdir: str = "/app") -> list[str]:
    """Absolute paths (globs kept as globs) and local ports named in `text`, in order of appearance. Untracked
    locations (`scope.UNTRACKED_PREFIXES`: the system, pseudo-files, the harness's /tests and /logs) and the
    workdir itself are left out: they hold no record the agent makes. Only well-formed paths count: f-string and
    format fields become `*` (`f"/app/{name}.txt"` is `/app/*.txt`), while a token that a regex, a URL query or an
    unclosed field cuts short (`/test-{int`, `/app/[a-z]+\\.txt`, `/api?id=3`) is no record."""
    records: dict[str, None] = {}  # an ordered set
    for start in _PATH_START.finditer(text):
        if _INSIDE_URL.search(text, max(0, start.start() - 300), start.start()):
            continue
        path = _well_formed_path(text, start.start())
        if path is not None and path != posixpath.normpath(workdir) and not is_under(path, UNTRACKED_PREFIXES):
            records[path] = None
    for match in _PORT_TOKEN.finditer(text):
        port = named_port(match.group(1) or match.group(2))
        if port is not None:
            records[port] = None
    return list(records)


def _well_formed_path(text: str, pos: int) -> str | None:
    """The path written at text[pos] (a "/"), normalised, with fields as `*`; None when it is no path."""
    parts, end = [], len(text)
    while pos < end:
        char = text[pos]
        if char == "/":
            parts.append("/")
            pos += 1
            continue
        for pattern in (_NAME, _PERCENT_FORMAT, _SHELL_NAME, _GLOB_CLASS):
            match = pattern.match(text, pos)
            if match is not None:
                parts.append(match[0] if pattern in (_NAME, _GLOB_CLASS) else "*")
                pos = match.end()
                break
        else:
            if char == "{" or text.startswith(("${", "$("), pos):
                close = _field_end(text, pos + (char != "{"))
                if close is None:
                    return None  # an unclosed field: `/test-{int` of f"/test-{int(x)}" cut by a line end
                parts.append("*")
                pos = close
                continue
            break
    if pos < end and text[pos] not in _PATH_END and not _STRING_ESCAPE_AFTER_PATH.match(text, pos):
        return None  # followed by `=`, `\.`, `%`, `$`...: a URL query, a regex or code
    return _as_record("".join(parts))


def _field_end(text: str, pos: int) -> int | None:
    """Index after the bracket that closes the one at text[pos] (`{…}`, `(…)`), on the same line, skipping nested
    brackets and quoted strings; None when it does not close there or does not start like an expression."""
    if not (text[pos + 1:pos + 2].isalnum() or text[pos + 1:pos + 2] in "_}()["):
        return None  # `{"k": 1}`, `{ x }`: a dict or prose in braces, no f-string field
    closing = {"{": "}", "(": ")", "[": "]"}
    stack, i = [closing[text[pos]]], pos + 1
    while i < len(text) and text[i] != "\n":
        char = text[i]
        if char in "'\"":
            i = text.find(char, i + 1)
            if i < 0:
                return None
        elif char in closing:
            stack.append(closing[char])
        elif char == stack[-1]:
            stack.pop()
            if not stack:
                return i + 1
        i += 1
    return None


def _as_record(token: str) -> str | None:
    """A path token as a record: trailing sentence dots dropped, runs of `*` merged, normalised; None for `/` and
    for a path whose first directory is itself a wildcard (`/*`, `/test-*` of a URL path): it names no location."""
    path = posixpath.normpath(re.sub(r"\*+", "*", re.sub(r"(?<=[^/.])\.+$", "", token)))
    first = path.split("/")[1] if path != "/" else ""
    if not first or GLOB_CHARS.search(first) or first in (".", ".."):
        return None
    return path
