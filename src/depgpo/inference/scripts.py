"""The file effects a program's text shows, for programs the agent wrote in the log and then ran.

A Python script whose text the simulation knows (a heredoc, an editor's `create`, `python3 -c CODE`, `python3 - <<EOF`)
is parsed, and each call whose path is a string literal counts: `open(P)` / `open(P, "w" | "a" | "x" | "r+")`,
`Path(P).read_text()` / `.write_text()` (and `_bytes`), `pandas.read_*(P)` / `.to_*(P)`, `json.load(open(P))`,
`os.remove(P)`, `shutil.copy(A, B)` / `move`. What the script writes is not known, so each write is scored at
record level. Not followed: paths built at run time (`os.path.join(d, name)`, f-strings, variables), code the
script imports or runs, and a script that does not parse as Python 3.

A Codex patch (`apply_patch`) names its files: `*** Add File:` writes the `+` lines, `*** Update File:` edits (read
and rewritten, content unknown), `*** Delete File:` deletes, `*** Move to:` moves the updated file.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

_READ_CALLS = {"read_csv", "read_json", "read_parquet", "read_excel", "read_table", "read_feather", "read_pickle",
               "loadtxt", "genfromtxt", "load"}
_WRITE_METHODS = {"to_csv", "to_json", "to_parquet", "to_excel", "to_feather", "to_pickle", "to_html", "savetxt",
                  "save", "savefig", "write_text", "write_bytes"}
_PATH_READ_METHODS = {"read_text", "read_bytes"}
_MAX_SCRIPT_CHARS = 1_000_000  # a larger "script" is data, not code an agent wrote


def python_file_effects(code: str) -> list[tuple[str, str]]:
    """("read" | "write" | "append" | "delete", literal path) of the calls in `code`, in text order; [] when it
    does not parse."""
    if len(code) > _MAX_SCRIPT_CHARS:
        return []
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    effects: list[tuple[int, int, str, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            effects += [(node.lineno, node.col_offset, action, path) for action, path in _call_effects(node)]
    return [(action, path) for _, _, action, path in sorted(effects)]


def _call_effects(call: ast.Call) -> Iterator[tuple[str, str]]:
    name = _callee(call.func)
    first = _literal(call.args[0]) if call.args else None
    if name == "open" and first is not None:
        mode = _literal(call.args[1]) if len(call.args) > 1 else _keyword(call, "mode")
        yield from _open_effects(first, mode or "r")
    elif name in _READ_CALLS and first is not None:
        yield "read", first
    elif name in ("remove", "unlink", "rmtree") and first is not None and isinstance(call.func, ast.Attribute):
        yield "delete", first
    elif name in ("copy", "copyfile", "copy2", "move") and len(call.args) > 1:
        source, target = first, _literal(call.args[1])
        if source is not None:
            yield "read", source
        if target is not None:
            yield "write", target
        if name == "move" and source is not None:
            yield "delete", source
    elif isinstance(call.func, ast.Attribute):
        owner = _path_literal(call.func.value)  # Path("x").write_text(…)
        if owner is not None and name in _PATH_READ_METHODS:
            yield "read", owner
        elif owner is not None and name in ("write_text", "write_bytes", "touch"):
            yield "write", owner
        elif owner is not None and name == "open":
            yield from _open_effects(owner, first or _keyword(call, "mode") or "r")
        elif owner is not None and name == "unlink":
            yield "delete", owner
        elif name in _WRITE_METHODS and name not in ("write_text", "write_bytes") and first is not None:
            yield "write", first  # df.to_csv("out.csv"), np.save("a.npy", x), plt.savefig("p.png")


def _open_effects(path: str, mode: str) -> Iterator[tuple[str, str]]:
    if "+" in mode and "r" in mode:
        yield "read", path
    if "w" in mode or "x" in mode:
        yield "write", path
    elif "a" in mode:
        yield "append", path
    elif "+" in mode and "r" in mode:
        yield "write", path
    else:
        yield "read", path


def _callee(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    return func.attr if isinstance(func, ast.Attribute) else None


def _literal(node: ast.expr) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value else None


def _keyword(call: ast.Call, name: str) -> str | None:
    return next((_literal(k.value) for k in call.keywords if k.arg == name), None)


def _path_literal(node: ast.expr) -> str | None:
    """The path of `Path("x")` / `pathlib.Path("x")` / `PosixPath("x")`."""
    if isinstance(node, ast.Call) and _callee(node.func) in ("Path", "PosixPath", "PurePath") and node.args:
        return _literal(node.args[0])
    return None


def patch_effects(patch: str) -> list[tuple[str, str, str | None]]:
    """(action, path, content) of a Codex `*** Begin Patch` text: ("write", p, text), ("edit", p, None),
    ("delete", p, None), ("move", new path, None) after the edit of the file it moves."""
    effects: list[tuple[str, str, str | None]] = []
    added: list[str] | None = None
    for line in patch.splitlines():
        if line.startswith("*** ") and added is not None:
            effects[-1] = (effects[-1][0], effects[-1][1], "".join(f"{text}\n" for text in added))
            added = None
        for marker, action in (("*** Add File: ", "write"), ("*** Update File: ", "edit"),
                               ("*** Delete File: ", "delete"), ("*** Move to: ", "move")):
            if line.startswith(marker) and line[len(marker):].strip():
                effects.append((action, line[len(marker):].strip(), None))
                added = [] if action == "write" else None
                break
        else:
            if added is not None and line.startswith("+"):
                added.append(line[1:])
    if added is not None and effects:
        effects[-1] = (effects[-1][0], effects[-1][1], "".join(f"{text}\n" for text in added))
    return effects
