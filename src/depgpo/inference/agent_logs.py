"""Agent logs beyond tool calls and Terminus-2 (formats.py dispatches here), in the shapes public runs have:

- **Fenced actions** (mini-swe-agent `*.traj.json`, SWE-agent's thought-action style): each assistant message holds
  one ```` ```bash ```` block, the command; the next user message answers it as
  `<returncode>N</returncode><output>…</output>`.
- **Terminal-Bench 1 trial directories** of such an agent (`TASK.1-of-1.RUN/sessions/agent.log`, `results.json`):
  the pane log holds the same steps as text (`mini-swe-agent (step N, $C):`, the block, `<returncode>`); the task
  and the verdict come from `results.json` (`instruction`, `is_resolved`). The pane wraps long lines at its width,
  so a long command may read with line breaks it did not have.
- **File tool calls** (OpenHands' `str_replace_editor`, Claude Code's `Write` / `Edit` / `Read`, Gemini CLI's
  `write_file`, Codex's `apply_patch`, …): not shell, but they write and read files, so each gets a shell
  equivalent with the same file effects for the simulator (inference.tool_calls). The command text keeps the call
  itself, so its arguments' words still count as used.
"""

from __future__ import annotations

import ast
import json
import re
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

from depgpo.inference.tool_calls import file_tool_step, text_function_calls

_MAX_WRITTEN_CALLS = 256_000  # characters
EDITOR_TOOL_NAMES = {"str_replace_editor", "str_replace_based_edit_tool", "edit_file", "editor"}

# A tagged block only, as mini-swe-agent's own action regex: an untagged pattern would pair a closing fence with the
# next opening one and read the prose between them as a command (seen on the public corpus).
_FENCE = re.compile(r"```(?:bash|sh|shell|mswea_bash_command)[ \t]*\n(.*?)\n?```", re.DOTALL)
_OBSERVATION = re.compile(r"<returncode>\s*(-?\d+)\s*</returncode>\s*(?:<output>\n?(.*?)</output>)?", re.DOTALL)
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\r")  # CSI; OSC ends in BEL or ST
_PANE_PROMPT = re.compile(r"^\S+@[\w.-]+:(/[^\s#$]*)[#$] ", re.MULTILINE)  # `root@f3db06c2f6c1:/app# `
_PANE_STEP = re.compile(r"^mini-swe-agent \(step \d+(?:, \$[\d.]+)?\):", re.MULTILINE)


# ---- fenced actions --------------------------------------------------------------------------------------------

def fenced_action(content: str) -> str | None:
    """The command of a thought-action reply: its one bash block (None when it has none or several)."""
    blocks = _FENCE.findall(content)
    return blocks[0] if len(blocks) == 1 else None


def fenced_steps(messages: list[dict], text_of) -> list[dict]:
    steps: list[dict] = []
    pending: dict | None = None
    turn = -1
    for message in messages:
        if message["role"] == "assistant":
            turn += 1
            command = fenced_action(text_of(message.get("content")))
            pending = None
            if command is not None and command.strip():
                pending = {"turn": turn, "text": command, "observation": "", "exit_code": None}
                steps.append(pending)
        elif message["role"] in ("user", "tool") and pending is not None:
            content = text_of(message.get("content"))
            found = _OBSERVATION.search(content)
            if found:
                pending["exit_code"] = int(found.group(1))
                pending["observation"] = found.group(2) if found.group(2) is not None else content[found.end():]
            else:  # a format warning or a truncated output: what the agent saw
                pending["observation"] = content
            pending = None
    return steps


# ---- Terminal-Bench 1 trial directories -------------------------------------------------------------------------

def is_tb1_trial(directory: Path) -> bool:
    return (directory / "sessions" / "agent.log").is_file() and (directory / "results.json").is_file()


def tb1_trial_conversation(directory: Path) -> dict:
    """The trial as a fenced-action conversation with its task id, instruction and reward (1.0 resolved, 0.0 not,
    None unlabelled). Raises ValueError naming the file when it cannot be read."""
    results_path, log_path = directory / "results.json", directory / "sessions" / "agent.log"
    try:
        results = json.loads(results_path.read_text(encoding="utf-8"))
        log = log_path.read_text(encoding="utf-8", errors="replace")
    except (OSError, ValueError, RecursionError) as error:  # JSONDecodeError and a >4300-digit int are ValueErrors
        raise ValueError(f"{directory}: not a readable Terminal-Bench trial ({error}); expected results.json "
                         "(JSON) and sessions/agent.log") from error
    if not isinstance(results, dict):
        raise ValueError(f"{results_path}: expected a JSON object with task_id, instruction and is_resolved")
    resolved = results.get("is_resolved")
    messages = [{"role": "user", "content": str(results.get("instruction") or "")}]
    for block in _PANE_STEP.split(_ANSI.sub("", log))[1:]:
        reply, _, answer = block.partition("\nUser:\n")
        messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": answer}]
    prompt = _PANE_PROMPT.search(_ANSI.sub("", log))
    conversation = {"messages": messages, "task_id": str(results.get("task_id") or directory.name),
                    "reward": None if resolved is None else float(bool(resolved)),
                    "workdir": prompt.group(1).rstrip("/") or "/" if prompt else "/app",
                    "workdir_from": "the pane's shell prompt" if prompt
                    else "assumed: no shell prompt in the pane; Terminal-Bench 1 tasks run in /app"}
    if len(messages) == 1:
        conversation["why_no_commands"] = (
            "sessions/agent.log shows no `mini-swe-agent (step N)` block, the only agent steps this reader finds in a "
            "pane log; the agent did not run, or it kept its actions out of the terminal (an installed agent such as "
            "OpenHands logs them elsewhere)")
    return conversation


# ---- editor tool calls ------------------------------------------------------------------------------------------

def tool_calls_of(message: dict) -> list:
    """A message's tool calls: a list, or a list written as a JSON or Python-literal string (OpenHands logs)."""
    calls = message.get("tool_calls")
    # A written list only, and not a huge one: literal_eval builds what it reads (10 MB took 5 GB).
    if isinstance(calls, str) and len(calls) <= _MAX_WRITTEN_CALLS and calls.lstrip().startswith("["):
        for parse in (json.loads, ast.literal_eval):
            try:
                calls = parse(calls)
                break
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                continue
    return calls if isinstance(calls, list) else []


def call_arguments(arguments: Any) -> dict | None:
    """A tool call's arguments: an object, or one written as a JSON string (OpenAI's shape); None otherwise."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except (ValueError, RecursionError):
            return None
    return arguments if isinstance(arguments, dict) else None


def shell_command(arguments: dict) -> str | None:
    """The command of a shell tool's arguments: `command` or `cmd`, a string or an exec-style argv."""
    command = arguments.get("command", arguments.get("cmd"))
    if isinstance(command, list) and command and all(isinstance(word, str) for word in command):
        return shlex.join(command)  # e.g. ["bash", "-lc", "ls"]
    return command if isinstance(command, str) else None


def editor_step(call: Any) -> tuple[str, str] | None:
    """(command text, shell equivalent) of a file tool call (inference.tool_calls: editors, write, edit and read
    tools, patches); None for other tools or malformed ones."""
    function = call.get("function") if isinstance(call, dict) and isinstance(call.get("function"), dict) else call
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        return None
    arguments = call_arguments(function.get("arguments"))
    return file_tool_step(function["name"], arguments) if arguments is not None else None


def call_name(call: Any) -> Any:
    """The tool name of a chat tool call (`{"function": {"name"}}` or `{"name"}`), for the tally."""
    function = call.get("function") if isinstance(call, dict) and isinstance(call.get("function"), dict) else call
    return function.get("name") if isinstance(function, dict) else None


def message_calls(message: dict, text_of: Callable[[Any], str]) -> list:
    """A message's tool calls; without any, those OpenHands writes into the text (`<function=execute_bash>`)."""
    calls = tool_calls_of(message)
    if calls or message.get("role") != "assistant":
        return calls
    return [{"function": {"name": name, "arguments": arguments}}
            for name, arguments in text_function_calls(text_of(message.get("content")))]
