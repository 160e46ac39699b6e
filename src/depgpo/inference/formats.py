"""Loading trajectories from files: our own `trajectory.json`, or offline agent logs in common chat shapes.

Accepted inputs (detected from the content, not the file name):

- `trajectory.json` dicts (docs/trajectory-schema.md), one or a JSON list of them;
- OpenAI-style chat messages, one conversation as a JSON list or `{"messages": [...]}`, several as a JSON list of
  those or as JSONL (one conversation per line). Each assistant `tool_calls` entry to a `bash` tool (arguments
  `{"command": …}` or `{"cmd": …}`) is one command; the `tool` message answering it is its observation, with an
  exit code when the log has one;
- Terminus-2 conversations: the assistant's content is the JSON reply `{"analysis", "plan", "commands":
  [{"keystrokes", "duration"}], "task_complete"}`; each keystroke batch is one command, and the next user message
  (the terminal output) is the observation of the turn's last command.

Every assistant message is one turn, even one that issues no command. Logs carry no traces, so their records are
always inferred from the command texts (`inference.infer`).
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

from depgpo.inference.infer import infer_trajectory
from depgpo.inference.simulator import DEFAULT_WORKDIR
from depgpo.trajectory.load import TrajectoryError, check_header

BASH_TOOL_NAMES = {"bash", "shell", "execute_bash", "run_shell_command", "terminal"}

# tmux key names that Terminus-2 sends to interrupt or navigate rather than to run a command.
_CONTROL_KEYS = re.compile(
    r"(?:[CMS]-\S+|Escape|Enter|Tab|BSpace|BTab|Up|Down|Left|Right|Home|End|PageUp|PageDown|PPage|NPage|F\d{1,2}|DC|IC)"
    r"(?:\s+(?:[CMS]-\S+|Escape|Enter|Tab))*")
# Exit codes as harnesses print them: mini-SWE-agent's `<returncode>`, or an "exit code: N" line.
_EXIT_CODE_PATTERNS = [re.compile(r"<returncode>\s*(-?\d+)\s*</returncode>"),
                       re.compile(r"(?im)^\W*exit(?:[ _]?code|[ _]status)\W*(-?\d+)\W*$")]
# Terminus-2 embeds the task in a prompt template; this is the instruction proper.
_TERMINUS_TASK = re.compile(r"Task Description:\s*(.*?)\s*(?:Current [Tt]erminal [Ss]tate:|$)", re.DOTALL)

_EXPECTED = ("a trajectory.json object (with an integer schema_version), a JSON list of them, or chat messages "
             "(a JSON list of messages, {\"messages\": [...]}, a list of such conversations, or JSONL with one "
             "conversation per line)")


def load_trajectories(path: str | Path, static: bool = False) -> list[dict]:
    """All trajectories in `path`, as trajectory.json dicts.

    Our own trajectories are returned as they are, unless `static` is set: then their commands' records are
    inferred from the command texts again (their verifier section is kept), for comparing static with traced.
    Raises ValueError naming the file when it cannot be read or holds none of the accepted shapes.
    """
    path = Path(path)
    trajectories = []
    for document in _json_documents(path):
        items = _split_document(document, path)
        for position, item in enumerate(items):
            if _is_native(item):
                try:
                    check_header(item)  # before --static re-infers it and drops the version
                except TrajectoryError as error:
                    raise ValueError(f"{path}{f'[{position}]' if len(items) > 1 else ''}: {error}") from error
                trajectories.append(_reinfer(item) if static else item)
            else:
                trajectories.append(from_conversation(item, f"{path.stem}#{len(trajectories)}"))
    return trajectories


def num_turns(trajectory: dict) -> int:
    """Model turns of a trajectory: its `num_turns` when recorded, else one past the last command's turn."""
    recorded = trajectory.get("num_turns")
    if isinstance(recorded, int) and not isinstance(recorded, bool):
        return recorded
    return max((command["turn"] for command in trajectory.get("commands", [])), default=-1) + 1


# ---- reading the file -----------------------------------------------------------------------------------------

def _json_documents(path: Path) -> list[Any]:
    """The file as one JSON document, or as JSONL (one document per non-blank line)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: cannot read the file ({error}); expected {_EXPECTED}") from error
    try:
        return [json.loads(text)]
    except json.JSONDecodeError as whole_file_error:
        documents = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                documents.append(json.loads(line))
            except json.JSONDecodeError as error:
                where = f"line {number} is not JSON ({error})" if documents else f"not JSON ({whole_file_error})"
                raise ValueError(f"{path}: {where}; expected {_EXPECTED}") from error
        if not documents:
            raise ValueError(f"{path}: the file is empty; expected {_EXPECTED}") from whole_file_error
        return documents


def _is_native(item: Any) -> bool:
    """Our own record: a schema_version (checked by `check_header`, so that an unknown one is said as such)
    and a list of commands."""
    return isinstance(item, dict) and "schema_version" in item and isinstance(item.get("commands"), list)


def _is_message(item: Any) -> bool:
    return isinstance(item, dict) and isinstance(item.get("role"), str)


def _is_conversation(item: Any) -> bool:
    """`{"messages": [...]}`, or a list of messages (stray non-message entries are skipped later)."""
    if isinstance(item, dict):
        return isinstance(item.get("messages"), list)
    return (isinstance(item, list) and any(_is_message(entry) for entry in item)
            and not any(_is_native(entry) or _is_conversation(entry) for entry in item))


def _split_document(document: Any, path: Path) -> list[Any]:
    """A document's trajectories: native dicts, and conversations as {"messages": [...], …metadata}."""
    if _is_native(document):
        return [document]
    if _is_conversation(document):
        return [document if isinstance(document, dict) else {"messages": document}]
    if isinstance(document, list) and all(_is_native(item) or _is_conversation(item) for item in document):
        return [item if _is_native(item) or isinstance(item, dict) else {"messages": item} for item in document]
    shape = type(document).__name__ if not isinstance(document, dict) else f"an object with keys {sorted(document)[:8]}"
    raise ValueError(f"{path}: unknown shape ({shape}); expected {_EXPECTED}")


# ---- our own format, re-inferred ------------------------------------------------------------------------------

def _reinfer(trajectory: dict) -> dict:
    commands = [command for command in trajectory["commands"] if isinstance(command, dict)]
    static = infer_trajectory(
        commands, instruction=trajectory.get("instruction", ""),
        workdir=trajectory.get("workdir") or DEFAULT_WORKDIR, tracked_roots=trajectory.get("tracked_roots"),
        verifier=trajectory.get("verifier"), task=trajectory.get("task"), num_turns=trajectory.get("num_turns"))
    static["errors"] = list(trajectory.get("errors", [])) + static["errors"]
    return static


# ---- conversations --------------------------------------------------------------------------------------------

def _text(content: Any) -> str:
    """Message content as text: a string, or the text parts of a list of content parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") if isinstance(part, dict) else str(part) for part in content)
    return "" if content is None else str(content)


def from_conversation(conversation: dict, default_id: str) -> dict:
    messages = [message for message in conversation["messages"] if _is_message(message)]
    assistants = [message for message in messages if message["role"] == "assistant"]
    is_terminus = not any(message.get("tool_calls") for message in assistants) and any(
        _terminus_reply(_text(message.get("content"))) is not None for message in assistants)
    steps = _terminus_steps(messages) if is_terminus else _tool_call_steps(messages)
    instruction = next((_text(m.get("content")) for m in messages if m["role"] == "user"), "")
    if is_terminus:
        embedded = _TERMINUS_TASK.search(instruction)
        instruction = embedded.group(1) if embedded else instruction
    task_id = next((conversation[key] for key in ("task_id", "instance_id", "id")
                    if isinstance(conversation.get(key), str)), default_id)
    trajectory = infer_trajectory(
        steps, instruction=instruction, workdir=conversation.get("workdir") or DEFAULT_WORKDIR,
        verifier_source=conversation.get("verifier_source"), num_turns=len(assistants),
        task={"id": task_id, "path": None, "format": "terminus2" if is_terminus else "chat"})
    reward = conversation.get("reward")
    if isinstance(reward, (int, float)) and not isinstance(reward, bool):
        trajectory["verifier"].update(reward=float(reward), reward_source="offline")
    return trajectory


def _tool_call_steps(messages: list[dict]) -> list[dict]:
    steps: list[dict] = []
    awaiting: list[tuple[Any, dict]] = []  # (tool call id, step) of commands whose output has not come yet
    turn = -1
    for message in messages:
        if message["role"] == "assistant":
            turn += 1
            calls = message.get("tool_calls")
            for call in calls if isinstance(calls, list) else []:
                command = _bash_command(call)
                if command is not None:
                    step = {"turn": turn, "text": command, "observation": "", "exit_code": None}
                    steps.append(step)
                    awaiting.append((call.get("id"), step))
        elif message["role"] in ("tool", "function") and awaiting:
            # Matched by tool_call_id; a log without ids answers the calls in order. An id of another tool's
            # call (an editor, say) answers none of ours.
            call_id = message.get("tool_call_id")
            position = next((i for i, (pending_id, _) in enumerate(awaiting) if pending_id == call_id),
                            0 if call_id is None else None)
            if position is not None:
                _, step = awaiting.pop(position)
                step["observation"], step["exit_code"] = _tool_output(message)
    return steps


def _bash_command(call: Any) -> str | None:
    """The command of a bash tool call; None for other tools and for arguments that are not valid JSON."""
    if not isinstance(call, dict):
        return None
    function = call.get("function") if isinstance(call.get("function"), dict) else call
    if function.get("name") not in BASH_TOOL_NAMES:
        return None
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return None
    if not isinstance(arguments, dict):
        return None
    command = arguments.get("command", arguments.get("cmd"))
    if isinstance(command, list) and all(isinstance(word, str) for word in command):
        return shlex.join(command)  # exec-style argv, e.g. ["bash", "-lc", "ls"]
    return command if isinstance(command, str) else None


def _tool_output(message: dict) -> tuple[str, int | None]:
    """Observation text and exit code of a tool message (a field, a JSON result object, or a printed line)."""
    content = _text(message.get("content"))
    exit_code = message.get("exit_code")
    try:
        result = json.loads(content)
    except (json.JSONDecodeError, RecursionError):
        result = None
    if isinstance(result, dict) and any(key in result for key in ("output", "stdout", "stderr")):
        content = _text(result.get("output")) or _text(result.get("stdout")) + _text(result.get("stderr"))
        exit_code = next((result[key] for key in ("exit_code", "returncode", "exitCode") if key in result), exit_code)
    if not isinstance(exit_code, int) or isinstance(exit_code, bool):
        found = next((match for pattern in _EXIT_CODE_PATTERNS if (match := pattern.search(content))), None)
        exit_code = int(found.group(1)) if found else None
    return content, exit_code


def _terminus_reply(content: str) -> dict | None:
    """The JSON object of a Terminus-2 reply, also when the model wrapped it in prose or a code fence."""
    start, end = content.find("{"), content.rfind("}")
    if start < 0 or end < start:
        return None
    try:
        reply = json.loads(content[start:end + 1])
    except (json.JSONDecodeError, RecursionError):
        return None
    return reply if isinstance(reply, dict) and isinstance(reply.get("commands"), list) else None


def _terminus_steps(messages: list[dict]) -> list[dict]:
    steps: list[dict] = []
    turn = -1
    turn_steps: list[dict] = []
    for message in messages:
        if message["role"] == "assistant":
            turn += 1
            turn_steps = []
            reply = _terminus_reply(_text(message.get("content"))) or {"commands": []}
            for item in reply["commands"]:
                keystrokes = item.get("keystrokes") if isinstance(item, dict) else None
                if not isinstance(keystrokes, str):
                    continue
                text = keystrokes.rstrip("\n")
                if not text.strip() or _CONTROL_KEYS.fullmatch(text.strip()):
                    continue
                turn_steps.append({"turn": turn, "text": text, "observation": "", "exit_code": None})
            steps += turn_steps
        elif message["role"] == "user" and turn_steps:
            # The pane output after a turn shows all its commands; it is what the agent saw after the last one.
            turn_steps[-1]["observation"] = _text(message.get("content"))
            turn_steps = []
    return steps
