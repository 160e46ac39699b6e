r"""The conversation format the policy reads and writes: ChatML with one bash command per assistant turn.

Broken into lines for reading; only the `\n` are real newlines:

    <|im_start|>system\n{SYSTEM_PROMPT}<|im_end|>\n<|im_start|>user\n{instruction}<|im_end|>\n
    <|im_start|>assistant\n
    <bash>ls -la</bash><|im_end|>                                  <- written by the model
    \n<|im_start|>tool\n{output}\n[exit code: 0]<|im_end|>\n        <- template and environment
    <|im_start|>assistant\n
    <done/><|im_end|>                                              <- the model ends the episode

The model's turn ends exactly at its stop token `<|im_end|>`; the newline ChatML puts after it opens the next
block. So supervised training and RL train on the same tokens: the ones the model itself samples.

Stored SFT data are OpenAI chat messages with `bash` tool calls (docs/pipeline.md); `messages_to_turns` reads them.
This module is text only: tokenization lives with the model (depgpo.policy.generate, depgpo.train.sft).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

IM_START, IM_END, END_OF_TEXT = "<|im_start|>", "<|im_end|>", "<|endoftext|>"
BASH_OPEN, BASH_CLOSE, DONE = "<bash>", "</bash>", "<done/>"
SPECIAL_TOKENS = (END_OF_TEXT, IM_START, IM_END, BASH_OPEN, BASH_CLOSE, DONE)

SYSTEM_PROMPT = ("You are an agent in a Linux terminal. Answer each turn with one bash command as "
                 "<bash>COMMAND</bash>, or with <done/> when the task is complete.")

_ASSISTANT_TURN = re.compile(re.escape(BASH_OPEN) + r"(.*)" + re.escape(BASH_CLOSE) + r"\s*" + re.escape(IM_END),
                             re.DOTALL)
_DONE_TURN = re.compile(r"\s*" + re.escape(DONE) + r"\s*" + re.escape(IM_END))
# The exit-code line closes a tool message; the newline before it belongs to it (see render_observation).
_EXIT_CODE_LINE = re.compile(r"\n?\[exit code: (-?\d+)\]\Z")


@dataclass(frozen=True)
class ParseError:
    """An assistant turn that is neither a command nor <done/>; the agent loop runs no command for it."""
    reason: str
    text: str


@dataclass(frozen=True)
class Observation:
    text: str
    exit_code: int | None   # None: the command timed out, or the turn ran no command


def render_prompt(instruction: str) -> str:
    """System and user blocks, then the opening of the model's first turn."""
    return (f"{IM_START}system\n{SYSTEM_PROMPT}{IM_END}\n{IM_START}user\n{instruction}{IM_END}\n"
            f"{IM_START}assistant\n")


def render_assistant(command: str | None) -> str:
    """The text of one model turn, through its stop token; None renders the final <done/> turn."""
    return f"{DONE if command is None else BASH_OPEN + command + BASH_CLOSE}{IM_END}"


def parse_assistant(text: str) -> str | None | ParseError:
    """The command of a model turn, None for <done/>, or a ParseError (also for a turn cut off before <|im_end|>)."""
    if not text.endswith(IM_END):
        return ParseError("cut off before <|im_end|>", text)
    if _DONE_TURN.fullmatch(text):
        return None
    match = _ASSISTANT_TURN.fullmatch(text.lstrip())
    if match is None:
        return ParseError("expected <bash>COMMAND</bash> or <done/>", text)
    if not match.group(1).strip():
        return ParseError("empty command", text)
    return match.group(1)


def truncate_middle(text: str, limit_chars: int) -> str:
    """Keep the head and the tail of a long observation, so tiny contexts still see how a command started and ended."""
    if len(text) <= limit_chars:
        return text
    head = limit_chars // 2
    tail = limit_chars - head
    return f"{text[:head]}\n[... {len(text) - limit_chars} characters omitted ...]\n{text[len(text) - tail:]}"


def render_observation(text: str, exit_code: int | None, limit_chars: int) -> str:
    """The tool block answering a turn (truncated to limit_chars), then the opening of the next model turn."""
    body = truncate_middle(text, limit_chars)
    if exit_code is not None:
        body = f"{body}\n[exit code: {exit_code}]" if body else f"[exit code: {exit_code}]"
    return f"\n{IM_START}tool\n{body}{IM_END}\n{IM_START}assistant\n"


def messages_to_turns(conversation: dict | list) -> tuple[str, list[str | None], list[Observation]]:
    """(instruction, commands, observations) of a stored conversation; a None command is the final <done/>.

    Every assistant message is one turn: one bash tool call, or none (the episode ends there; later messages are
    ignored). Each command is answered by the tool message that follows it. The stored system message is ignored:
    the policy always sees SYSTEM_PROMPT. Raises ValueError on anything else.
    """
    messages = conversation["messages"] if isinstance(conversation, dict) else conversation
    instruction = next((m["content"] for m in messages if m["role"] == "user"), None)
    if not isinstance(instruction, str):
        raise ValueError("conversation has no user message with text content")
    commands: list[str | None] = []
    observations: list[Observation] = []
    awaiting_reply = False
    for message in messages:
        if message["role"] == "assistant":
            if awaiting_reply:
                raise ValueError(f"turn {len(commands) - 1}: the command has no tool reply")
            calls = message.get("tool_calls") or []
            if len(calls) > 1:
                raise ValueError(f"turn {len(commands)}: {len(calls)} tool calls; the format has one per turn")
            if not calls:
                commands.append(None)
                break
            commands.append(_bash_command(calls[0], turn=len(commands)))
            awaiting_reply = True
        elif message["role"] == "tool" and awaiting_reply:
            content = message.get("content") or ""
            exit_line = _EXIT_CODE_LINE.search(content)
            observations.append(Observation(content[:exit_line.start()], int(exit_line.group(1))) if exit_line
                                else Observation(content, None))
            awaiting_reply = False
    if awaiting_reply:
        raise ValueError(f"turn {len(commands) - 1}: the command has no tool reply")
    return instruction, commands, observations


def conversation_segments(instruction: str, commands: list[str | None], observations: list[Observation],
                          observation_chars: int) -> list[tuple[str, bool]]:
    """The rendered conversation as (text, written_by_model) pieces; joined they are the full ChatML text."""
    segments = [(render_prompt(instruction), False)]
    for turn, command in enumerate(commands):
        segments.append((render_assistant(command), True))
        if turn < len(observations):
            observation = observations[turn]
            segments.append((render_observation(observation.text, observation.exit_code, observation_chars), False))
    return segments


def _bash_command(call: dict, turn: int) -> str:
    function = call.get("function") or {}
    if function.get("name") != "bash":
        raise ValueError(f"turn {turn}: tool call to {function.get('name')!r}, expected 'bash'")
    arguments = function.get("arguments")
    command = (json.loads(arguments) if isinstance(arguments, str) else arguments or {}).get("command")
    if not isinstance(command, str):
        raise ValueError(f"turn {turn}: bash call without a string 'command' argument")
    return command
