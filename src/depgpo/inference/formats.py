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
import os
import re
from pathlib import Path
from typing import Any

from depgpo.inference.agent_logs import (
    call_arguments, call_name, editor_step, fenced_action, fenced_steps, is_tb1_trial, message_calls, shell_command,
    tb1_trial_conversation, tool_calls_of,
)
from depgpo.inference.harbor_logs import TERMINUS_TASK as _TERMINUS_TASK
from depgpo.inference.harbor_logs import (
    atif_agent, atif_steps, atif_workdir, harbor_trial, harbor_trial_dirs, is_atif, keystrokes_command,
    terminus_reply, trial_messages, trial_result,
)
from depgpo.inference.other_logs import (
    gemini_messages, is_gemini_session, is_openhands_events, openhands_event_conversation,
)
from depgpo.inference.infer import infer_trajectory
from depgpo.inference.simulator import DEFAULT_WORKDIR
from depgpo.inference.tool_calls import ToolTally
from depgpo.trajectory.load import TrajectoryError, check_header
from depgpo.trajectory.schema import unverified

BASH_TOOL_NAMES = {"bash", "shell", "execute_bash", "run_shell_command", "terminal"}

# Exit codes as harnesses print them: mini-SWE-agent's `<returncode>`, or an "exit code: N" line.
_EXIT_CODE_PATTERNS = [re.compile(r"<returncode>\s*(-?\d{1,9})\s*</returncode>"),  # (a longer number is no code)
                       re.compile(r"(?im)^\W*exit(?:[ _]?code|[ _]status)\W*(-?\d{1,9})\W*$")]

_EXPECTED = ("a trajectory.json object (with an integer schema_version) or a JSON list of them; chat messages (a "
             "JSON list of {role, content} messages, {\"messages\": [...]}, a list of such conversations, or JSONL "
             "with one per line), which covers Terminus-2 logs, mini-swe-agent .traj.json, OpenHands completion "
             "logs and Gemini CLI sessions; an OpenHands event stream (a JSON list of {action | observation} "
             "events); or an ATIF trajectory (schema_version \"ATIF-v1.x\")")
# What a reading calls each format.
_FORMAT_NAMES = {"chat": "chat messages", "terminus2": "Terminus-2 messages", "fenced_actions": "mini-swe-agent "
                 "(fenced actions)", "tb1_trial": "Terminal-Bench 1 trial", "harbor_chat": "Harbor trial (chat "
                 "messages)", "openhands_events": "OpenHands event stream", "gemini_cli": "Gemini CLI session"}


def load_trajectories(path: str | Path, static: bool = False) -> list[dict]:
    """All trajectories in `path`, as trajectory.json dicts.

    Our own trajectories are returned as they are, unless `static` is set: then their commands' records are
    inferred from the command texts again (their verifier section is kept), for comparing static with traced.
    Raises ValueError naming the file when it cannot be read or holds none of the accepted shapes.
    """
    path = Path(path)
    if path.is_dir():
        if is_tb1_trial(path):
            return [from_conversation(tb1_trial_conversation(path) | {"format": "tb1_trial"}, path.name)]
        if trials := harbor_trial_dirs(path):
            return [_harbor_trial(trial) for trial in trials]
        raise ValueError(f"{path}: a directory, but not a trial directory; expected a file, a Terminal-Bench 1 "
                         "trial (results.json and sessions/agent.log), or a Harbor trial or job directory "
                         "(agent/trajectory.json)")
    if path.name == "trajectory.json" and path.parent.name == "agent" and harbor_trial_dirs(path.parent.parent):
        return [_harbor_trial(path.parent.parent)]  # with the trial's reward and task name
    trajectories = []
    for document in _json_documents(path):
        if is_atif(document):
            tally = ToolTally()
            instruction, steps, turns = atif_steps(document, where=str(path), tally=tally)
            workdir, workdir_from = atif_workdir(document)
            trajectories.append(_from_harbor({"instruction": instruction, "steps": steps, "num_turns": turns,
                                              "task_id": path.stem, "reward": None, "tools": tally.as_dict(),
                                              "workdir": workdir, "workdir_from": workdir_from,
                                              "format": f"ATIF ({atif_agent(document)})"}))
            continue
        if is_openhands_events(document):
            events = openhands_event_conversation(document) | {"format": "openhands_events"}
            trajectories.append(from_conversation(events, path.stem))
            continue
        items = _split_document(document, path)
        for position, item in enumerate(items):
            if _is_native(item):
                try:
                    check_header(item)  # before --static re-infers it and drops the version
                except TrajectoryError as error:
                    raise ValueError(f"{path}{f'[{position}]' if len(items) > 1 else ''}: {error}") from error
                trajectories.append(_named(path, items, position, _reinfer, item) if static else item)
            else:
                trajectories.append(_named(path, items, position, from_conversation, item,
                                           f"{path.stem}#{len(trajectories)}"))
    return trajectories


def trajectory_sources(root: str | Path) -> list[Path]:
    """What `load_trajectories` takes under `root`, sorted: `root` itself when it is a file or a trial directory;
    else every trial directory (Terminal-Bench 1 or Harbor, taken whole) and every other *.json / *.jsonl file."""
    root = Path(root)
    if not root.is_dir() or is_tb1_trial(root) or (root / "agent" / "trajectory.json").is_file():
        return [root]
    found: list[Path] = []
    for directory, subdirectories, files in os.walk(root):
        here = Path(directory)
        if here != root and (is_tb1_trial(here) or (here / "agent" / "trajectory.json").is_file()):
            found.append(here)
            subdirectories.clear()  # its JSON files (results.json, config.json) are part of the trial
            continue
        found += [here / name for name in files if name.endswith((".json", ".jsonl"))]
    return sorted(found)


def _named(path: Path, items: list, position: int, build, *args) -> dict:
    """build(*args), its ValueError prefixed with the file and the item's position."""
    try:
        return build(*args)
    except ValueError as error:
        raise ValueError(f"{path}{f'[{position}]' if len(items) > 1 else ''}: {error}") from error


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
    except RecursionError as error:
        raise ValueError(f"{path}: nested too deeply to read ({error}); expected {_EXPECTED}") from error
    except ValueError as whole_file_error:  # JSONDecodeError, or an integer of over 4,300 digits
        documents = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                documents.append(json.loads(line))
            except (ValueError, RecursionError) as error:
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

def _field(mapping: dict, key: str, kind: type | tuple[type, ...], default: Any = None) -> Any:
    """mapping[key] when of `kind`, `default` when absent or null; ValueError naming the field otherwise."""
    value = mapping.get(key)
    if value is None:
        return default
    if not isinstance(value, kind):
        names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise ValueError(f"field '{key}': expected {names}, got {type(value).__name__}")
    return value


def _reinfer(trajectory: dict) -> dict:
    commands = [command for command in trajectory["commands"] if isinstance(command, dict)]
    for key, kind in (("instruction", str), ("workdir", str), ("verifier", dict), ("tracked_roots", list),
                      ("task", dict)):
        _field(trajectory, key, kind)
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
        return "".join(_text(part.get("text")) if isinstance(part, dict) else part if isinstance(part, str) else ""
                       for part in content)
    return ""  # a number, an object: no text


_PROMPT_TAG = re.compile(r"</?[a-z_]+>")
# mini-swe-agent's templates around a task or an issue (the TMax runs, its own tests): the instruction proper, without
# the template's example files (newfile.py, filename.py).
_MINI_SWE_TASK = re.compile(
    r"\APlease solve this (?:task|issue):\s*(.*?)\s*You can execute bash commands and edit files", re.DOTALL)
_UPLOADED = re.compile(r"<uploaded_files>\s*(/\S+)\s*</uploaded_files>")
_FIRST_CD = re.compile(r"(?:^|&&|;|\n)\s*cd\s+(/[\w./-]+)")
_DIFF_FILE = re.compile(r"^diff --git a/(\S+) b/", re.MULTILINE)


def _working_directory(conversation: dict, instruction: str, steps: list[dict]) -> tuple[str, str]:
    """(where a log without a recorded workdir worked, where that came from): mini-swe-agent's
    `info.config.environment.cwd`, OpenHands' <uploaded_files>, else the first absolute `cd` of its first commands,
    else /app. The tracked scope starts from it (docs/credit.md#tracked-scope), and relative names resolve at it."""
    info = conversation.get("info")
    config = info.get("config") if isinstance(info, dict) else None
    environment = config.get("environment") if isinstance(config, dict) else None
    if isinstance(environment, dict) and isinstance(environment.get("cwd"), str) and environment["cwd"].startswith("/"):
        return environment["cwd"], "mini-swe-agent's info.config.environment.cwd"
    uploaded = _UPLOADED.search(instruction)
    if uploaded:
        return uploaded.group(1).rstrip("/"), "the task's <uploaded_files>"
    for step in steps[:5]:
        found = _FIRST_CD.search(str(step.get("text") or ""))
        if found:
            return found.group(1).rstrip("/") or "/", "the log's first absolute `cd`"
    return DEFAULT_WORKDIR, "assumed: the log records no working directory; /app, as Terminal-Bench tasks use"


def _patch_verifier(conversation: dict, workdir: str) -> dict | None:
    """E of a SWE-bench style log: the files of the patch it submitted (mini-swe-agent's `info.submission`), which
    is all of the agent's work the evaluation applies and tests; None (E from the instruction) without one."""
    info = conversation.get("info")
    patch = info.get("submission") if isinstance(info, dict) else None
    files = list(dict.fromkeys(_DIFF_FILE.findall(patch))) if isinstance(patch, str) else []
    return unverified([f"{workdir}/{name}" for name in files]) if files else None


def _harbor_trial(directory: Path) -> dict:
    """A Harbor trial directory: ATIF, or chat messages (mini-swe-agent's tool calls) with result.json's task name
    and reward."""
    messages = trial_messages(directory)
    if messages is None:
        return _from_harbor(harbor_trial(directory))
    task_id, reward = trial_result(directory)
    return from_conversation({"messages": messages, "task_id": task_id, "reward": reward, "format": "harbor_chat"},
                             task_id)


def _from_harbor(trial: dict) -> dict:
    reading = {"format": trial.get("format", "ATIF"), "workdir_from": trial.get("workdir_from"),
               "tools": trial.get("tools")}
    trajectory = infer_trajectory(trial["steps"], instruction=trial["instruction"], num_turns=trial["num_turns"],
                                  workdir=trial.get("workdir") or DEFAULT_WORKDIR, reading=reading,
                                  task={"id": trial["task_id"], "path": None, "format": "harbor"})
    if trial["reward"] is not None:
        trajectory["verifier"].update(reward=trial["reward"], reward_source="offline")
    return trajectory


def from_conversation(conversation: dict, default_id: str) -> dict:
    # OpenHands logs keep the prompt-style history in `messages` and the tool-call one in `fncall_messages`.
    source = conversation.get("fncall_messages")
    source = source if isinstance(source, list) and source else conversation["messages"]
    if is_gemini_session(conversation):
        source, conversation = gemini_messages(source), conversation | {"format": "gemini_cli"}
    messages = [message for message in source if _is_message(message)]
    assistants = [message for message in messages if message["role"] == "assistant"]
    kind = "chat"
    if not any(tool_calls_of(message) for message in assistants):
        contents = [_text(message.get("content")) for message in assistants]
        if any(terminus_reply(content) is not None for content in contents):
            kind = "terminus2"
        elif any(fenced_action(content) is not None for content in contents):
            kind = "fenced_actions"
    tally = ToolTally()
    steps = {"terminus2": _terminus_steps, "fenced_actions": lambda m: fenced_steps(m, _text)}.get(
        kind, lambda m: _tool_call_steps(m, tally))(messages)
    is_terminus = kind == "terminus2"
    instruction = next((_text(m.get("content")) for m in messages if m["role"] == "user"), "")
    embedded = (_TERMINUS_TASK if is_terminus else _MINI_SWE_TASK).search(instruction)
    instruction = embedded.group(1) if embedded else instruction
    task_id = next((conversation[key] for key in ("task_id", "instance_id", "id")
                    if isinstance(conversation.get(key), str)), default_id)
    given_workdir = _field(conversation, "workdir", str)
    workdir, workdir_from = (given_workdir, str(conversation.get("workdir_from") or "the log's `workdir` field")) \
        if given_workdir else _working_directory(conversation, instruction, steps)
    # Agent prompts wrap the task in tags (<uploaded_files>, </pr_description>), which would read as paths.
    instruction = _PROMPT_TAG.sub(" ", instruction)
    fmt = str(conversation.get("format", kind))
    reading = {"format": _FORMAT_NAMES.get(fmt, fmt), "workdir_from": workdir_from, "tools": tally.as_dict(),
               "target_from": "the submitted patch (info.submission)",
               "why_no_commands": conversation.get("why_no_commands")}
    if not messages:
        reading["why_no_commands"] = ("its messages have no `role` (user, assistant, tool), so no turn is read; "
                                      f"expected {_EXPECTED}")
    trajectory = infer_trajectory(
        steps, instruction=instruction, workdir=workdir, verifier=_patch_verifier(conversation, workdir),
        verifier_source=_field(conversation, "verifier_source", str), num_turns=len(assistants),
        task={"id": task_id, "path": None, "format": fmt}, reading=reading)
    reward = conversation.get("reward")
    if isinstance(reward, (int, float)) and not isinstance(reward, bool) and 0 <= reward <= 1:
        trajectory["verifier"].update(reward=float(reward), reward_source="offline")
    return trajectory


def _tool_call_steps(messages: list[dict], tally: ToolTally | None = None) -> list[dict]:
    steps: list[dict] = []
    awaiting: list[tuple[Any, dict]] = []  # (tool call id, step) of commands whose output has not come yet
    turn = -1
    tally = tally if tally is not None else ToolTally()
    for message in messages:
        if message["role"] == "assistant":
            turn += 1
            for call in message_calls(message, _text):
                command, edit = _bash_command(call), editor_step(call)
                tally.count(call_name(call), read=command is not None or edit is not None)
                if command is None and edit is None:
                    continue
                step = {"turn": turn, "text": command, "observation": "", "exit_code": None}
                if edit is not None:
                    step["text"], step["shell_equivalent"] = edit
                steps.append(step)
                awaiting.append((call.get("id") if isinstance(call, dict) else None, step))
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
    if not isinstance(function.get("name"), str) or function["name"] not in BASH_TOOL_NAMES:
        return None
    arguments = call_arguments(function.get("arguments"))
    return shell_command(arguments) if arguments is not None else None


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


def _terminus_steps(messages: list[dict]) -> list[dict]:
    steps: list[dict] = []
    turn = -1
    turn_steps: list[dict] = []
    for message in messages:
        if message["role"] == "assistant":
            turn += 1
            turn_steps = []
            reply = terminus_reply(_text(message.get("content"))) or {"commands": []}
            for item in reply["commands"]:
                text = keystrokes_command(item.get("keystrokes") if isinstance(item, dict) else None)
                if text is None:
                    continue
                turn_steps.append({"turn": turn, "text": text, "observation": "", "exit_code": None})
            steps += turn_steps
        elif message["role"] == "user" and turn_steps:
            # The pane output after a turn shows all its commands; it is what the agent saw after the last one.
            turn_steps[-1]["observation"] = _text(message.get("content"))
            turn_steps = []
    return steps
