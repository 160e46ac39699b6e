"""A SOURCE as the commands a replay runs, the log's own outcome, and what the log holds that a replay cannot redo.

Accepted: our own `trajectory.json` (one or a list), a JSON list of command strings (as `run-episode --commands`
takes), and every agent log `depgpo.inference.load_trajectories` reads (chat tool calls, OpenHands, Terminus-2,
mini-swe-agent, Harbor trial or job directories, ATIF files, Terminal-Bench 1 trials). The command list is the
inference adapters' own; this module only adds what they drop, from the raw log, because a replay that silently
lost a step would check the credit of a different trajectory:

    kind          what                                                         in the replay
    keystrokes    tmux keys (C-c, Escape), or a batch typed without Enter      left out
    interactive   a program that reads the terminal (python3, vim, less), and  left out
                  the keystrokes typed into it until it is left
    wait          a keystroke batch that only waits (Terminus-2 `duration`)    left out (commands run to the end)
    tool_call     a tool call that is not a shell command (mark_task_complete,  left out
                  a browser, a search)
    editor_edit   a file editor's str_replace / insert / undo_edit              left out (its result is not in the log)

A file editor's `create` and `view` are replayed as their shell equivalents (inference.agent_logs.editor_step),
which have the same file effects.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from depgpo.inference import load_trajectories
from depgpo.inference.agent_logs import EDITOR_TOOL_NAMES, editor_step, is_tb1_trial, tool_calls_of
from depgpo.inference.formats import BASH_TOOL_NAMES
from depgpo.inference.harbor_logs import SHELL_TOOLS, harbor_trial_dirs, is_atif, keystrokes_command
from depgpo.inference.tool_calls import tool_kind

# Programs that, started without a script or command, read the terminal: what is typed next goes to them.
INTERACTIVE = {"python", "python3", "ipython", "node", "irb", "sqlite3", "mysql", "psql", "redis-cli", "vim", "vi",
               "nano", "emacs", "less", "more", "top", "htop", "man", "ftp", "telnet", "bc"}
_TAKES_FILE = {"vim", "vi", "nano", "emacs", "less", "more", "man"}  # interactive even with a file operand
_LEAVE = re.compile(r"^\s*(?:C-c|C-d|C-\\|q|:q!?|:wq!?|:x|ZZ|exit(?:\(\))?|quit(?:\(\))?|\\q|\.exit|\.quit)\s*$")
NATIVE = object()  # marks our own record among the raw items: it is replayed as it is, with no scan
_DEFAULT_ID = re.compile(r"#\d+$")  # formats.from_conversation's id for a conversation that names no task


class SourceError(ValueError):
    """A SOURCE that cannot be replayed; the message names the file, what is wrong and the fix."""


@dataclass
class ReplaySource:
    name: str                     # the file (and position in it), as the reports name it
    format: str                   # trajectory | commands | chat | terminus2 | fenced_actions | tb1_trial | harbor
    task_id: str | None           # the task the log says it ran (None: it names none)
    steps: list[dict]             # {text, turn, observation, exit_code, logged_index}: the commands to replay
    reward: float | None          # the logged reward (None: unlabelled)
    num_turns: int
    unreplayable: list[dict] = field(default_factory=list)  # {turn, kind, detail}
    # The logged observations are terminal panes after a turn (Terminus-2 keystrokes, also in Harbor's ATIF): they
    # show prompts and typed commands too, and only a turn's last command has one. A Terminal-Bench 1 trial's
    # <output> block and a tool result are the command's own output.
    pane: bool = False


def read_sources(path: Path) -> list[ReplaySource]:
    """Every trajectory in `path`, ready to replay. Raises SourceError (a ValueError) naming the file."""
    path = Path(path)
    if not path.exists():
        raise SourceError(f"{path}: no such file or directory; give a trajectory.json, a JSON list of commands, or "
                          "an agent log")
    if path.is_file() and (commands := _command_list(path)) is not None:
        steps = [{"text": c, "turn": t, "observation": None, "exit_code": None, "logged_index": t}
                 for t, c in enumerate(commands)]
        return [ReplaySource(str(path), "commands", None, steps, None, len(commands))]
    try:
        trajectories = load_trajectories(path)
    except ValueError as error:
        raise SourceError(str(error)) from error
    if not trajectories:
        raise SourceError(f"{path}: holds no trajectory (an empty list); give a trajectory.json, a JSON list of "
                          "commands, or an agent log")
    raws = _raw_items(path, len(trajectories))
    many = len(trajectories) > 1
    sources = []
    for k, (trajectory, raw) in enumerate(zip(trajectories, raws)):
        name = f"{path}[{k}]" if many else str(path)
        _check_commands(name, trajectory)
        sources.append(_source(name, trajectory, raw))
    return sources


def _check_commands(name: str, trajectory: dict) -> None:
    """A hand-edited trajectory.json is read as it is: each command must at least be an object with its text."""
    commands = trajectory.get("commands")
    if not isinstance(commands, list):
        raise SourceError(f"{name}: field 'commands' is {type(commands).__name__}, not a list; write the commands "
                          "as a list of objects with a 'text' (docs/trajectory-schema.md)")
    for k, command in enumerate(commands):
        if not isinstance(command, dict) or not isinstance(command.get("text"), str):
            raise SourceError(f"{name}: commands[{k}].text: missing or not a string; each command needs its shell "
                              "text, e.g. {\"text\": \"ls\", \"turn\": 0}")
        turn = command.get("turn")
        if turn is not None and (isinstance(turn, bool) or not isinstance(turn, int)):
            raise SourceError(f"{name}: commands[{k}].turn: expected an integer, got {turn!r}; number the model "
                              "turns from 0")
    carried = trajectory.get("replay", {}).get("unreplayable", []) if isinstance(trajectory.get("replay"), dict) \
        else []
    for k, item in enumerate(carried if isinstance(carried, list) else [None]):
        if not (isinstance(item, dict) and isinstance(item.get("kind"), str) and isinstance(item.get("detail"), str)
                and (item.get("turn") is None or type(item.get("turn")) is int)):
            raise SourceError(f"{name}: replay.unreplayable[{k}]: expected {{\"turn\": int or null, \"kind\": str, "
                              "\"detail\": str}; fix or remove the replay section")


def _command_list(path: Path) -> list[str] | None:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return None  # not this shape: the inference adapters say what is wrong with it
    if isinstance(document, list) and document and all(isinstance(item, str) for item in document):
        return document
    return None


def _source(name: str, trajectory: dict, raw: Any) -> ReplaySource:
    native = raw is NATIVE
    fmt = "trajectory" if native else str((trajectory.get("task") or {}).get("format") or "chat")
    task_id = (trajectory.get("task") or {}).get("id")
    if not native and isinstance(task_id, str) and _DEFAULT_ID.search(task_id):
        task_id = None
    verifier = trajectory.get("verifier") or {}
    reward = verifier.get("reward")
    unreplayable = list((trajectory.get("replay") or {}).get("unreplayable", [])) if native else _scan(raw)
    # The adapters kept these keystrokes as commands; leave out as many as were named (a multiset: the same text
    # may also be typed to the shell in the same turn).
    skipped = Counter((item["turn"], item["text"]) for item in unreplayable if item.get("text") is not None)
    steps = []
    for command in trajectory.get("commands", []):
        text = command.get("text") or ""
        if skipped[(command.get("turn"), text)] > 0:
            skipped[(command.get("turn"), text)] -= 1
            continue
        if not native and _other_file_tool(text):  # the raw-log scan lists it as a tool call no shell can run
            continue
        replayed, extra = _editor_equivalent(text, command.get("turn"))
        if extra is not None:
            unreplayable.append(extra)
            continue
        # An editor's answer ("File created") is the tool's, not the shell's: nothing to hold the replay against.
        shell = replayed == text
        steps.append({"text": replayed, "turn": command.get("turn", command.get("index")),
                      "observation": command.get("observation") if shell else None,
                      "exit_code": command.get("exit_code") if shell else None,
                      "logged_index": command.get("index")})
    for item in unreplayable:
        item.pop("text", None)
    num_turns = trajectory.get("num_turns")
    if not isinstance(num_turns, int):
        num_turns = max((s["turn"] for s in steps if isinstance(s["turn"], int)), default=-1) + 1
    return ReplaySource(name, fmt, task_id if isinstance(task_id, str) else None, steps,
                        reward if isinstance(reward, (int, float)) and not isinstance(reward, bool) else None,
                        num_turns, sorted(unreplayable, key=lambda item: (item["turn"] is None, item["turn"] or 0)),
                        pane=fmt == "terminus2" or (fmt == "harbor" and '"keystrokes"' in json.dumps(raw)))


def _other_file_tool(text: str) -> bool:
    """A file tool call other than the editor (`Write {…}`, `apply_patch {…}`), which offline inference reads as
    its file effects (inference.tool_calls) but a replay cannot run."""
    name, _, arguments = text.partition(" ")
    return tool_kind(name) == "file" and name not in EDITOR_TOOL_NAMES and arguments.startswith("{")


def _editor_equivalent(text: str, turn: Any) -> tuple[str, dict | None]:
    """(what to run, None), or (text, the unreplayable item) for an editor call whose result the log lacks."""
    name, _, arguments = text.partition(" ")
    if name not in EDITOR_TOOL_NAMES or not arguments.startswith("{"):
        return text, None
    try:
        parsed = json.loads(arguments)
    except (ValueError, RecursionError):
        return text, None
    step = editor_step({"function": {"name": name, "arguments": parsed}})
    if step is not None and parsed.get("command") in ("create", "view"):
        return step[1], None
    return text, {"turn": turn, "kind": "editor_edit",
                  "detail": f"{name} {parsed.get('command')} of {parsed.get('path')}: its result is not in the log"}


# ---- the raw log, for what the adapters drop ---------------------------------------------------------------------

def _raw_items(path: Path, count: int) -> list[Any]:
    """The raw conversation or ATIF document behind each trajectory, in load_trajectories' order: NATIVE for our own
    record, None where the log holds nothing a replay could miss (a Terminal-Bench 1 pane log)."""
    if path.is_dir():
        if is_tb1_trial(path):
            return [None]
        return [_read_json(trial / "agent" / "trajectory.json") for trial in harbor_trial_dirs(path)]
    if path.name == "trajectory.json" and path.parent.name == "agent" and harbor_trial_dirs(path.parent.parent):
        return [_read_json(path)]
    text = path.read_text(encoding="utf-8")
    try:
        documents = [json.loads(text)]
    except ValueError:
        documents = [json.loads(line) for line in text.splitlines() if line.strip()]
    items: list[Any] = []
    for document in documents:
        if is_atif(document):
            items.append(document)
        elif isinstance(document, dict) and ("schema_version" in document or "messages" in document):
            items.append(NATIVE if "schema_version" in document else document)
        elif isinstance(document, list) and document and all(isinstance(d, (dict, list)) for d in document) \
                and not any(isinstance(d, dict) and isinstance(d.get("role"), str) for d in document):
            items += [NATIVE if isinstance(d, dict) and "schema_version" in d else d for d in document]
        else:
            items.append(document)  # one conversation as a list of messages
    return items if len(items) == count else [None] * count


def _read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _scan(raw: Any) -> list[dict]:
    if raw is None or raw is NATIVE:
        return []
    if is_atif(raw):
        return _scan_atif(raw)
    conversation = raw if isinstance(raw, dict) else {"messages": raw}
    # As formats.from_conversation reads it: OpenHands' tool-call history when it has one, so the turns agree.
    messages = conversation.get("fncall_messages")
    messages = messages if isinstance(messages, list) and messages else conversation.get("messages")
    messages = messages if isinstance(messages, list) else []
    return _scan_messages([m for m in messages if isinstance(m, dict) and isinstance(m.get("role"), str)])


def _scan_messages(messages: list[dict]) -> list[dict]:
    found: list[dict] = []
    typing_into: str | None = None
    turn = -1
    for message in messages:
        if message["role"] != "assistant":
            continue
        turn += 1
        for call in tool_calls_of(message):
            function = call.get("function") if isinstance(call, dict) and isinstance(call.get("function"), dict) \
                else call
            name = function.get("name") if isinstance(function, dict) else None
            name = name if isinstance(name, str) else repr(name)[:40]  # a log's odd value names no tool we know
            if name not in BASH_TOOL_NAMES and name not in EDITOR_TOOL_NAMES:
                found.append({"turn": turn, "kind": "tool_call", "detail": f"{name}: not a shell command"})
        reply = _terminus_reply(message.get("content"))
        for item in reply.get("commands", []) if reply else []:
            if isinstance(item, dict):
                typing_into = _keystroke_item(item.get("keystrokes"), item.get("duration"), turn, typing_into, found)
    return found


def _scan_atif(document: dict) -> list[dict]:
    found: list[dict] = []
    typing_into: str | None = None
    turn = -1
    steps = document.get("steps")
    for step in steps if isinstance(steps, list) else []:
        if not isinstance(step, dict) or step.get("is_copied_context") is True or step.get("source") != "agent":
            continue
        turn += 1
        calls = step.get("tool_calls")
        for call in calls if isinstance(calls, list) else []:
            if not isinstance(call, dict):
                continue
            name = call.get("function_name")
            name = name if isinstance(name, str) else repr(name)[:40]
            arguments = call.get("arguments")
            if isinstance(arguments, str):
                try:
                    arguments = json.loads(arguments)
                except (ValueError, RecursionError):
                    arguments = None
            if name not in SHELL_TOOLS:
                found.append({"turn": turn, "kind": "tool_call", "detail": f"{name}: not a shell command"})
            elif isinstance(arguments, dict) and "keystrokes" in arguments:
                typing_into = _keystroke_item(arguments["keystrokes"], arguments.get("duration"), turn, typing_into,
                                              found)
    return found


def _keystroke_item(keystrokes: Any, duration: Any, turn: int, typing_into: str | None, found: list) -> str | None:
    """Name one keystroke batch when a replay cannot redo it; returns the interactive program still running."""
    if not isinstance(keystrokes, str):
        return typing_into
    command = keystrokes_command(keystrokes)
    if typing_into is not None:  # the program reads these keys, not the shell
        found.append({"turn": turn, "kind": "interactive", "text": command,
                      "detail": f"{keystrokes!r} typed into {typing_into}"})
        return None if _LEAVE.match(keystrokes.strip() or "-") else typing_into
    if command is None:
        if keystrokes.strip():
            found.append({"turn": turn, "kind": "keystrokes", "detail": f"{keystrokes.strip()!r}: terminal keys"})
        elif duration:
            found.append({"turn": turn, "kind": "wait", "detail": f"waited {duration} s"})
        return None
    if not keystrokes.endswith("\n"):
        found.append({"turn": turn, "kind": "keystrokes", "text": command,
                      "detail": f"{command[:60]!r} typed without Enter"})
        return None
    words = command.split()
    program = words[0].rsplit("/", 1)[-1] if words else ""
    if program in INTERACTIVE and (len(words) == 1 or program in _TAKES_FILE):
        found.append({"turn": turn, "kind": "interactive", "text": command,
                      "detail": f"{command[:60]!r} reads the terminal"})
        return program
    return None


def _terminus_reply(content: Any) -> dict | None:
    if not isinstance(content, str):
        return None
    start, end = content.find("{"), content.rfind("}")
    try:
        reply = json.loads(content[start:end + 1]) if 0 <= start < end else None
    except (ValueError, RecursionError):
        return None
    return reply if isinstance(reply, dict) and isinstance(reply.get("commands"), list) else None
