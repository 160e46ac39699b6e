"""E of an offline log from its task text: the absolute paths and ports it names (`verifier_source`), and the file
names it names relative to the task's working directory ("Create a file called hello.txt", "Write the answer to
`answer.txt`", "'process_data.sh' in the current directory").

A relative name counts when it looks like a file: a name with one of the extensions below, optionally under
directories (`output/result.json`). It is resolved against the working directory, never against a directory the
sentence may name beside it ("save result.txt in /srv" still reads `/app/result.txt` at workdir /app, and `/srv`
itself is a record). Where the working directory comes from is the log format's (`docs/credit.md#offline-logs`).
"""

from __future__ import annotations

import posixpath
import re

from depgpo.env.judging.verifier_source import extract_verifier_records
from depgpo.trajectory.scope import UNTRACKED_PREFIXES, is_under

# File extensions a task names its inputs and outputs by; a word with another one ("e.g.", "os.path", "v1.2",
# "example.com") is no file name.
FILE_EXTENSIONS = frozenset("""
    txt csv tsv json jsonl ndjson yaml yml toml ini cfg conf env xml html htm css md rst tex log out err
    py pyi ipynb sh bash zsh js mjs cjs ts tsx jsx c h cc cpp hpp cxx rs go java kt scala rb pl php lua r jl swift
    sql db sqlite sqlite3 parquet feather arrow avro orc pkl pickle npy npz pt pth onnx h5 hdf5 safetensors bin dat
    png jpg jpeg gif bmp svg webp pdf zip tar gz tgz bz2 xz 7z whl patch diff lock pem key crt cert csr so o a wasm
    mp3 mp4 wav ogg asm s f f90 f95 hs ml ex exs erl clj vim el service cron conf
""".split())

# A relative file name: not part of a path, URL, e-mail, variable or longer word on the left; ends before a word
# character, `/` or `(` (a call: `main.py(` is rare, `os.getcwd()` is no file).
_RELATIVE_NAME = re.compile(
    r"(?<![\w./~$@:\\-])((?:\./)?(?:[\w-][\w.-]*/)*[\w-][\w.-]*\.([A-Za-z][A-Za-z0-9]{0,9}))(?![\w/(-])")

_NEW_TASK = re.compile(r"-{5,} NEW TASK DESCRIPTION -{5,}\s*(.*?)\s*-{5,} END OF NEW TASK DESCRIPTION", re.DOTALL)
_EXAMPLE = re.compile(r"-{5,} START OF EXAMPLE -{5,}.*?-{5,} END OF EXAMPLE -{5,}", re.DOTALL)


def relative_file_names(text: str) -> list[str]:
    """The file names `text` writes without a leading `/`, in order of appearance, each once."""
    names: dict[str, None] = {}
    for match in _RELATIVE_NAME.finditer(text):
        name, extension = match.group(1), match.group(2)
        if extension.lower() in FILE_EXTENSIONS and not name.startswith(".."):
            names[name.removeprefix("./")] = None
    return list(names)


def task_statement(instruction: str) -> str:
    """The task itself, without a prompt's worked example: OpenHands without native function calling puts one
    (with its own files and ports) before the task."""
    task = _NEW_TASK.search(instruction)
    return task.group(1) if task else _EXAMPLE.sub(" ", instruction)


def task_records(instruction: str, workdir: str) -> tuple[list[str], list[str]]:
    """(E, the relative names that went into it): the records `extract_verifier_records` finds in the task
    statement, then each relative file name resolved against `workdir`; untracked places and the workdir itself
    are left out as there."""
    instruction = task_statement(instruction)
    records = extract_verifier_records(instruction, workdir)
    relative = []
    for name in relative_file_names(instruction):
        path = posixpath.normpath(posixpath.join(workdir, name))
        if path != posixpath.normpath(workdir) and not is_under(path, UNTRACKED_PREFIXES) and path not in records:
            records.append(path)
            relative.append(name)
    return records, relative
