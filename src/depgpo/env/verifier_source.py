"""The records a verifier's source text names: the absolute paths and local ports written in it.

These are the paper's extraction rules for the inspection set E when no trace of the verifier shows what it
inspected: the sandbox falls back to them when the verifier's trace yields nothing (`env.verifier`), and offline
inference takes E from the verifier's source or, lacking it, the task instruction (`depgpo.inference`). Text
matching only: nothing is opened or run.
"""

from __future__ import annotations

import posixpath
import re

from depgpo.trajectory.scope import UNTRACKED_PREFIXES, is_under

# The loopback host as URLs and server commands spell it.
LOCAL_HOST = r"(?:localhost|127\.0\.0\.1|0\.0\.0\.0|\[::1\])"

# A path token: starts with "/" that is not part of a URL, word or relative path. `{…}` (f-string fields) become
# wildcards. Trailing sentence punctuation is stripped afterwards.
_PATH_TOKEN = re.compile(r"(?<![\w.:/~$-])/[\w.@+*?\[\]{}-]+(?:/[\w.@+*?\[\]{}-]*)*")
_PORT_TOKEN = re.compile(rf"{LOCAL_HOST}:(\d{{2,5}})\b|(?<![a-z])port(?![a-z])['\"]?\s*[=:]?\s*['\"]?(\d{{2,5}})\b",
                         re.IGNORECASE)  # `localhost:8080`, `port=8080`, `server_port = 8080`, "on port 8080"


def named_port(digits: str) -> str | None:
    """The port record of a port number written in text; None when it is no TCP port."""
    return f"tcp:{digits}" if 0 < int(digits) < 65536 else None


def extract_verifier_records(text: str, workdir: str = "/app") -> list[str]:
    """Absolute paths (globs kept as globs) and local ports named in `text`, in order of appearance. Untracked
    locations (`scope.UNTRACKED_PREFIXES`: the system, pseudo-files, the harness's /tests and /logs) and the
    workdir itself are left out: they hold no record the agent makes."""
    records: dict[str, None] = {}  # an ordered set
    for match in _PATH_TOKEN.finditer(text):
        token = re.sub(r"\{[^}/]*\}", "*", match.group(0)).rstrip(".,;:)]}")
        path = posixpath.normpath(token)
        if path not in ("/", posixpath.normpath(workdir)) and not is_under(path, UNTRACKED_PREFIXES):
            records[path] = None
    for match in _PORT_TOKEN.finditer(text):
        port = named_port(match.group(1) or match.group(2))
        if port is not None:
            records[port] = None
    return list(records)
