"""Non-shell tools of agent logs, read as the file reads and writes they are.

Each file tool call becomes a shell equivalent with the same file effects, which the simulator runs in place of the
call (the command text keeps the call itself, so its words still count as used):

- writes with their whole text (`create`, `Write`, `write_file`, `write`): `cat > PATH <<EOF … EOF`, content known;
- edits (`str_replace`, `insert`, `undo_edit`, `Edit`, `MultiEdit`, `replace`, `edit`, `NotebookEdit`): the file is
  read and rewritten, its new content unknown (`sed -i -e '' PATH`), so it is scored at record level;
- reads (`view`, `Read`, `read_file`, `read`) and listings (`LS`, `list_directory`, `list`): `cat PATH`, `ls PATH`;
- Codex's `apply_patch` (its `input` patch): `apply_patch <<EOF … EOF`, which the `apply_patch` handler reads.

Tools that act on no file (`finish`, `think`, `mark_task_complete`, todo lists) are counted as ignored; any other
tool (a browser, a search engine, an MCP server, an IPython cell) is counted as dropped by name, so that a reading
says what it left out.
"""

from __future__ import annotations

import json
import re
import shlex
from collections import Counter
from typing import Any

# name -> (action, argument keys holding the path). Actions: write (whole text), edit, read, list.
FILE_TOOLS: dict[str, tuple[str, tuple[str, ...]]] = {
    "Write": ("write", ("file_path",)), "Edit": ("edit", ("file_path",)), "MultiEdit": ("edit", ("file_path",)),
    "Read": ("read", ("file_path",)), "NotebookEdit": ("edit", ("notebook_path",)), "LS": ("list", ("path",)),
    "write_file": ("write", ("file_path", "path", "absolute_path")), "create_file": ("write", ("path", "file_path")),
    "replace": ("edit", ("file_path", "path")), "read_file": ("read", ("absolute_path", "file_path", "path")),
    "list_directory": ("list", ("path", "dir_path")),
    "write": ("write", ("filePath", "file_path", "path")), "edit": ("edit", ("filePath", "file_path", "path")),
    "read": ("read", ("filePath", "file_path", "path")), "list": ("list", ("path",)),
}
# OpenHands' and SWE-agent's editor: one tool, the action in `command`.
EDITOR_ACTIONS = {"create": "write", "view": "read", "str_replace": "edit", "insert": "edit", "undo_edit": "edit",
                  "edit": "edit", "write": "write"}
EDITOR_TOOLS = {"str_replace_editor", "str_replace_based_edit_tool", "edit_file", "editor"}
PATCH_TOOLS = {"apply_patch"}
# Tools that end, plan or think: no effect on the environment, so nothing is lost by not reading them.
CONTROL_TOOLS = {"finish", "think", "mark_task_complete", "task_complete", "submit", "TodoWrite", "TodoRead",
                 "todo_write", "todo_read", "todowrite", "todoread", "ExitPlanMode", "update_plan",
                 "attempt_completion", "save_memory"}
_CONTENT_KEYS = ("file_text", "content", "text")

# OpenHands without native function calling writes its calls into the message text.
_TEXT_CALL = re.compile(r"<function=([\w.-]+)>(.*?)(?:</function>|\Z)", re.DOTALL)
_TEXT_PARAMETER = re.compile(r"<parameter=([\w.-]+)>\n?(.*?)\n?</parameter>", re.DOTALL)


def file_tool_step(name: str, arguments: dict[str, Any]) -> tuple[str, str] | None:
    """(command text, shell equivalent) of a file tool call; None for other tools and for calls without a path."""
    text = f"{name} {json.dumps(arguments, ensure_ascii=False)}"
    if name in PATCH_TOOLS:
        patch = arguments.get("input", arguments.get("patch"))
        return (text, f"apply_patch <<'{_delimiter(patch)}'\n{patch.rstrip(chr(10))}\n{_delimiter(patch)}") \
            if isinstance(patch, str) else None
    if name in EDITOR_TOOLS:
        action = EDITOR_ACTIONS.get(str(arguments.get("command")))
        keys: tuple[str, ...] = ("path",)
    elif name in FILE_TOOLS:
        action, keys = FILE_TOOLS[name]
    else:
        return None
    path = next((arguments[key] for key in keys if isinstance(arguments.get(key), str) and arguments[key]), None)
    if action is None or path is None:
        return None
    quoted = shlex.quote(path)
    if action == "write":
        body = next((arguments[key] for key in _CONTENT_KEYS if isinstance(arguments.get(key), str)), None)
        if body is None:
            return text, f": > {quoted}"  # written, its text not in the log
        delimiter = _delimiter(body)
        return text, f"cat > {quoted} <<'{delimiter}'\n{body.removesuffix(chr(10))}\n{delimiter}"
    if action == "read":
        return text, f"cat {quoted}"
    if action == "list":
        return text, f"ls {quoted}"
    return text, f"sed -i -e '' {quoted}"  # reads and rewrites the file; its new content is not known here


def tool_kind(name: str) -> str:
    """"file", "control" (no effect on the environment) or "other"; shell tools are the caller's to know."""
    if name in FILE_TOOLS or name in EDITOR_TOOLS or name in PATCH_TOOLS:
        return "file"
    return "control" if name in CONTROL_TOOLS else "other"


class ToolTally:
    """What a reader did with each tool call it met: read (as shell or as a file tool), ignored or dropped."""

    def __init__(self) -> None:
        self.read: Counter[str] = Counter()
        self.ignored: Counter[str] = Counter()
        self.dropped: Counter[str] = Counter()

    def count(self, name: Any, read: bool) -> None:
        label = name if isinstance(name, str) and name else "(unnamed)"
        if read:
            self.read[label] += 1
        elif tool_kind(label) == "control":
            self.ignored[label] += 1
        else:  # an unknown tool, or a known one whose arguments were not usable
            self.dropped[label] += 1

    def as_dict(self) -> dict[str, dict[str, int]]:
        return {"read": dict(self.read), "ignored": dict(self.ignored), "dropped": dict(self.dropped)}


def text_function_calls(content: str) -> list[tuple[str, dict[str, Any]]]:
    """(name, arguments) of the calls an OpenHands message writes as `<function=NAME><parameter=K>V</parameter>`."""
    calls = []
    for match in _TEXT_CALL.finditer(content):
        arguments = {key: value for key, value in _TEXT_PARAMETER.findall(match.group(2))}
        calls.append((match.group(1), arguments))
    return calls


def _delimiter(body: Any) -> str:
    text = body if isinstance(body, str) else ""
    return next(f"DEPGPO_EOF{n}" for n in range(10**6) if f"DEPGPO_EOF{n}" not in text)
