"""Harbor trial directories and ATIF trajectories (the logs Terminal-Bench 2.0 runs leave), as command steps.

A trial directory holds `result.json` (TrialResult: `task_name`, `verifier_result.rewards.reward`), `config.json`,
`agent/trajectory.json` (ATIF: `schema_version` "ATIF-v1.x", `steps[]` of `{source: system|user|agent, message,
tool_calls[{tool_call_id, function_name, arguments}], observation.results[{source_call_id, content}]}`),
`agent/episode-N/` (Terminus-2's raw prompts) and `verifier/reward.txt`; a job directory holds one per attempt.
Terminus-2 records each keystroke batch as a `bash_command` call `{"keystrokes", "duration"}`, with one result and
no `source_call_id` for the whole step; tool-calling agents send `{"command"}` (string or argv) or `{"cmd"}` and
answer by `source_call_id`. Nothing here imports `formats`, so that `formats` can import this module.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from depgpo.inference.agent_logs import call_arguments, shell_command
from depgpo.inference.tool_calls import ToolTally, file_tool_step, text_function_calls

# Shell tools as Harbor's agents name them in ATIF: Terminus-2 and mini-swe-agent `bash_command`, Claude Code
# `Bash`, Codex `shell`/`exec_command`, OpenHands `execute_bash`/`terminal`, OpenCode `bash`.
SHELL_TOOLS = {"bash_command", "bash", "Bash", "shell", "exec_command", "local_shell", "execute_bash", "terminal",
               "run_shell_command"}
# tmux key names that Terminus-2 sends to interrupt or navigate rather than to run a command.
CONTROL_KEYS = re.compile(
    r"(?:[CMS]-\S+|Escape|Enter|Tab|BSpace|BTab|Up|Down|Left|Right|Home|End|PageUp|PageDown|PPage|NPage|F\d{1,2}|DC|IC)"
    r"(?:\s+(?:[CMS]-\S+|Escape|Enter|Tab))*")
# Terminus-2's first user step is its prompt template around the task; this is the instruction proper.
TERMINUS_TASK = re.compile(r"Task Description:\s*(.*?)\s*(?:Current [Tt]erminal [Ss]tate:|$)", re.DOTALL)

_ATIF = 'an ATIF trajectory (an object with schema_version "ATIF-v1.x" and a steps list)'
_RESULT = "Harbor's TrialResult (task_name, verifier_result.rewards.reward), or no result.json: then the dir name"


def keystrokes_command(keystrokes: Any) -> str | None:
    """The shell command a Terminus-2 keystroke batch types; None for tmux keys (C-c, Enter) and blank batches."""
    if not isinstance(keystrokes, str):
        return None
    text = keystrokes.rstrip("\n")
    return None if not text.strip() or CONTROL_KEYS.fullmatch(text.strip()) else text


def is_atif(document: Any) -> bool:
    version = document.get("schema_version") if isinstance(document, dict) else None
    return isinstance(version, str) and version.startswith("ATIF")


def atif_steps(document: Any, *, keystrokes_to_command: Callable[[Any], str | None] = keystrokes_command,
               exit_code_of: Callable[[str], int | None] | None = None,
               where: str = "trajectory", tally: ToolTally | None = None) -> tuple[str, list[dict], int]:
    """(instruction, steps, num_turns) of an ATIF trajectory: one step `{text, turn, observation, exit_code}` per
    shell command or file tool call (with its `shell_equivalent`), in order; every agent step is a turn, with or
    without a command. A step without tool calls may write them in its message (OpenHands without native function
    calling). Each call is counted in `tally`. Odd entries are skipped (a log must not stop the batch); only a
    document that is not ATIF at all raises ValueError, naming `where`."""
    tally = tally if tally is not None else ToolTally()
    if not is_atif(document):
        raise ValueError(f"{where}: not ATIF (no schema_version starting with 'ATIF'); expected {_ATIF}")
    if not isinstance(document.get("steps"), list):
        raise ValueError(f"{where}: field 'steps' is {type(document.get('steps')).__name__}, not a list; "
                         f"expected {_ATIF}")
    # Continuation files repeat earlier turns as copied context; they are not new turns.
    entries = [s for s in document["steps"] if isinstance(s, dict) and s.get("is_copied_context") is not True]
    prompt = next((_text(s.get("message")) for s in entries if s.get("source") == "user"), "")
    embedded = TERMINUS_TASK.search(prompt)
    instruction = embedded.group(1) if embedded else prompt
    steps: list[dict] = []
    turn = -1
    # Where calls are recorded, a step without any ran nothing (Terminus-2 rejects a reply that misses a field).
    records_calls = any(isinstance(s.get("tool_calls"), list) and s["tool_calls"] for s in entries)
    for entry in entries:
        if entry.get("source") != "agent":
            continue
        turn += 1
        by_id: dict[Any, dict] = {}
        turn_steps: list[dict] = []
        calls = entry.get("tool_calls")
        calls = calls if isinstance(calls, list) else []
        if not records_calls:  # a step's message is read only in a log that records no call at all
            calls = _calls_in_message(_text(entry.get("message")))
        for call in calls:
            text = _shell_command(call, keystrokes_to_command)
            arguments = call_arguments(call.get("arguments")) if isinstance(call, dict) else None
            name = call.get("function_name") if isinstance(call, dict) else None
            edit = file_tool_step(name, arguments) if isinstance(name, str) and arguments is not None else None
            tally.count(name, read=text is not None or edit is not None)
            if text is not None or edit is not None:
                step = {"text": text, "turn": turn, "observation": "", "exit_code": None}
                if edit is not None:
                    step["text"], step["shell_equivalent"] = edit
                turn_steps.append(step)
                by_id.setdefault(_hashable(call.get("tool_call_id")), step)
        observation = entry.get("observation")
        results = observation.get("results") if isinstance(observation, dict) else None
        for result in [r for r in results if isinstance(r, dict)] if isinstance(results, list) and turn_steps else []:
            call_id = _hashable(result.get("source_call_id"))
            # No source_call_id: the result is the step's whole output (Terminus-2), what the last command saw.
            step = turn_steps[-1] if call_id is None else by_id.get(call_id)
            if step is not None:
                step["observation"] = _text(result.get("content"))
                step["exit_code"] = _exit_code(result, step["observation"], exit_code_of)
        steps += turn_steps
    return instruction, steps, turn + 1


def atif_workdir(document: dict) -> tuple[str, str]:
    """(working directory, where it came from): the agent's recorded `agent.extra.cwds` (Claude Code writes it),
    else /app, where Harbor's Terminal-Bench tasks run (their Dockerfiles' WORKDIR), which the log does not say."""
    agent = document.get("agent") if isinstance(document.get("agent"), dict) else {}
    extra = agent.get("extra") if isinstance(agent.get("extra"), dict) else {}
    cwds = extra.get("cwds")
    if isinstance(cwds, list) and cwds and isinstance(cwds[0], str) and cwds[0].startswith("/"):
        return cwds[0].rstrip("/") or "/", "the ATIF agent.extra.cwds"
    return "/app", "assumed: ATIF records no working directory; /app, the WORKDIR of Harbor's Terminal-Bench tasks"


def atif_agent(document: dict) -> str:
    agent = document.get("agent") if isinstance(document.get("agent"), dict) else {}
    return str(agent.get("name") or "unnamed agent")


def harbor_trial(directory: str | Path) -> dict | None:
    """`{instruction, steps, num_turns, task_id, reward}` of a Harbor trial directory; None if `directory` has no
    `agent/trajectory.json`. Raises ValueError naming the file when one of its files is not what Harbor writes."""
    directory = Path(directory)
    trajectory_path = directory / "agent" / "trajectory.json"
    if not trajectory_path.is_file():
        return None
    document, tally = _read_json(trajectory_path, _ATIF), ToolTally()
    instruction, steps, num_turns = atif_steps(document, where=str(trajectory_path), tally=tally)
    task_id, reward = trial_result(directory)
    workdir, workdir_from = atif_workdir(document)
    return {"instruction": instruction, "steps": steps, "num_turns": num_turns, "task_id": task_id, "reward": reward,
            "tools": tally.as_dict(), "workdir": workdir, "workdir_from": workdir_from,
            "format": f"Harbor trial, ATIF ({atif_agent(document)})"}


def trial_messages(directory: str | Path) -> list | None:
    """The chat messages of a Harbor trial whose agent wrote `agent/trajectory.json` as a plain list of OpenAI-style
    messages rather than ATIF (mini-swe-agent's tool-calling runs, as in the TMax evaluation assets); None when the
    file is ATIF or not a list of messages."""
    path = Path(directory) / "agent" / "trajectory.json"
    document = _read_json(path, _ATIF)
    if isinstance(document, list) and document and all(isinstance(m, dict) and "role" in m for m in document):
        return document
    return None


def trial_result(directory: str | Path) -> tuple[str, float | None]:
    """(task name, reward) of a Harbor trial directory: from result.json, else the directory's name and
    verifier/reward.txt. Raises ValueError naming result.json when it is not Harbor's TrialResult."""
    directory = Path(directory)
    result_path = directory / "result.json"
    result = _read_json(result_path, _RESULT) if result_path.is_file() else {}
    if not isinstance(result, dict):
        raise ValueError(f"{result_path}: a JSON {type(result).__name__}, not an object; expected {_RESULT}")
    # Harbor names a trial "<task_name[:32]>__<7 random chars>"; result.json has the full task name.
    name = result.get("task_name")
    verifier = result.get("verifier_result")
    rewards = verifier.get("rewards") if isinstance(verifier, dict) else None
    reward = _number(rewards.get("reward")) if isinstance(rewards, dict) else None
    return (name if isinstance(name, str) else directory.resolve().name.split("__")[0],
            reward if reward is not None else _reward_file(directory / "verifier"))


def harbor_trial_dirs(directory: str | Path) -> list[Path]:
    """The trial directories at `directory`: itself if it is one, else its subdirectories that are (a job)."""
    directory = Path(directory)
    if (directory / "agent" / "trajectory.json").is_file() or not directory.is_dir():
        return [directory] if directory.is_dir() else []
    return sorted(child for child in directory.iterdir() if (child / "agent" / "trajectory.json").is_file())


# ---- helpers --------------------------------------------------------------------------------------------------

def terminus_reply(content: str) -> dict | None:
    """The JSON object of a Terminus-2 reply, also when the model wrapped it in prose or a code fence."""
    start, end = content.find("{"), content.rfind("}")
    if start < 0 or end < start:
        return None
    try:
        reply = json.loads(content[start:end + 1])
    except (json.JSONDecodeError, RecursionError):
        return None
    return reply if isinstance(reply, dict) and isinstance(reply.get("commands"), list) else None


def _calls_in_message(message: str) -> list[dict]:
    """The calls an agent step without `tool_calls` writes in its message: a Terminus-2 JSON reply's keystroke
    batches (ATIF written with the raw reply), or OpenHands' `<function=…>` text calls."""
    reply = terminus_reply(message)
    if reply is not None:
        return [{"function_name": "bash_command", "arguments": item} for item in reply["commands"]
                if isinstance(item, dict)]
    return [{"function_name": name, "arguments": arguments} for name, arguments in text_function_calls(message)]


def _read_json(path: Path, expected: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as error:
        raise ValueError(f"{path}: cannot be read as JSON ({type(error).__name__}: {error}); "
                         f"expected {expected}") from error


def _shell_command(call: Any, keystrokes_to_command: Callable[[Any], str | None]) -> str | None:
    """The command of a shell tool call; None for other tools (mark_task_complete, editors) and odd arguments."""
    if not isinstance(call, dict) or _hashable(call.get("function_name")) not in SHELL_TOOLS:
        return None
    # ATIF says an object; some converters keep the provider's JSON string.
    arguments = call_arguments(call.get("arguments"))
    if arguments is None:
        return None
    if "keystrokes" in arguments:
        return keystrokes_to_command(arguments["keystrokes"])
    command = shell_command(arguments)
    return command if command is not None and command.strip() else None


def _exit_code(result: dict, content: str, exit_code_of: Callable[[str], int | None] | None) -> int | None:
    # ATIF has no exit-code field; some converters put one in the result's extra, else the text may print it.
    extra = result.get("extra") if isinstance(result.get("extra"), dict) else {}
    found = [extra[key] for key in ("exit_code", "returncode", "exitCode") if type(extra.get(key)) is int]
    return found[0] if found else exit_code_of(content) if exit_code_of is not None else None


def _reward_file(verifier_dir: Path) -> float | None:
    """The reward Harbor's verifier wrote: `reward.txt` (a float), or `reward.json`'s "reward"."""
    text_path, json_path = verifier_dir / "reward.txt", verifier_dir / "reward.json"
    if text_path.is_file():
        try:
            text = text_path.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as error:
            raise ValueError(f"{text_path}: cannot be read ({error}); expected one number") from error
        if text and _number(text) is None:
            raise ValueError(f"{text_path}: {text[:40]!r} is not a number; expected one float, as Harbor writes")
        return _number(text)  # None when empty: the verifier stopped before scoring
    if json_path.is_file():
        rewards = _read_json(json_path, 'a flat JSON object such as {"reward": 1.0}')
        return _number(rewards.get("reward")) if isinstance(rewards, dict) else None
    return None


def _number(value: Any) -> float | None:
    try:
        number = float(value) if isinstance(value, (int, float, str)) and not isinstance(value, bool) else math.nan
    except (ValueError, OverflowError):
        return None
    return number if math.isfinite(number) else None


def _hashable(value: Any) -> Any:
    # An id that is a list or an object matches nothing (repr of a deep one could recurse out).
    return value if isinstance(value, (str, int, float, type(None))) else object()


def _text(content: Any) -> str:
    """Message or result content as text: a string, or the text parts of a content-part list (ATIF v1.6+)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") if isinstance(part, dict) and isinstance(part.get("text"), str)
                       else part if isinstance(part, str) else "" for part in content)
    # Anything else (an object, say) is not text a terminal showed; str() of a deep one could even recurse out.
    return str(content) if isinstance(content, (int, float)) else ""
