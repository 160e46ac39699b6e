"""Two more agent log shapes, turned into chat messages with tool calls for `formats.from_conversation`:

- **OpenHands event stream** (its `save_trajectory_path` / Harbor's `openhands.trajectory.json`): a JSON list of
  events `{id, source, action, args, tool_call_metadata}` and `{observation, cause, content}`. Each agent action is a
  turn; `run` is a shell command, `edit` / `read` / `write` are file-editor calls (as `str_replace_editor`), and an
  observation answers the action whose id is its `cause`.
- **Gemini CLI session** (`~/.gemini/tmp/…/chats/session-*.json`): `{sessionId, messages: [{type: user | gemini,
  content, toolCalls: [{id, name, args, result}]}]}`; `run_shell_command` is the shell, `write_file` / `replace` /
  `read_file` the file tools.
"""

from __future__ import annotations

import json
from typing import Any

# OpenHands action -> (tool name, editor command) when the event has no tool_call_metadata.
_OPENHANDS_ACTIONS = {"run": ("execute_bash", None), "edit": ("str_replace_editor", None),
                      "read": ("str_replace_editor", "view"), "write": ("str_replace_editor", "create"),
                      "run_ipython": ("execute_ipython_cell", None), "browse": ("browser", None),
                      "browse_interactive": ("browser", None), "finish": ("finish", None), "think": ("think", None)}


def is_openhands_events(document: Any) -> bool:
    return (isinstance(document, list) and bool(document)
            and all(isinstance(event, dict) and ("action" in event or "observation" in event) for event in document)
            and not any("role" in event for event in document))


def openhands_event_conversation(events: list[dict]) -> dict:
    """The events as chat messages: the first user message, one assistant message per agent action (with its tool
    call) and a tool message per observation of an action."""
    messages: list[dict] = []
    for event in events:
        args = _mapping(event.get("args"))
        action, source = event.get("action"), event.get("source")
        if action == "message" and source == "user":
            messages.append({"role": "user", "content": str(args.get("content") or event.get("message") or "")})
        elif action == "message" and source == "agent":
            messages.append({"role": "assistant", "content": str(args.get("content") or event.get("message") or "")})
        elif isinstance(action, str) and source == "agent" and action not in ("system", "recall"):
            messages.append({"role": "assistant", "content": str(args.get("thought") or ""),
                             "tool_calls": [_openhands_call(event, action, args)]})
        elif "observation" in event and event.get("cause") is not None and event.get("observation") != "recall":
            extras = _mapping(event.get("extras"))
            metadata = _mapping(extras.get("metadata"))
            messages.append({"role": "tool", "tool_call_id": str(event["cause"]),
                             "content": str(event.get("content") or ""), "exit_code": metadata.get("exit_code")})
    return {"messages": messages}


def _openhands_call(event: dict, action: str, args: dict) -> dict:
    metadata = _mapping(event.get("tool_call_metadata"))
    default_name, editor_command = _OPENHANDS_ACTIONS.get(action, (action, None))
    function_name = metadata.get("function_name")
    name = function_name if isinstance(function_name, str) else default_name
    arguments = dict(args)
    if name in ("str_replace_editor", "edit_file") and "command" not in arguments and editor_command:
        arguments["command"] = editor_command
    if "content" in arguments and "file_text" not in arguments:
        arguments["file_text"] = arguments["content"]  # a `write` action's text
    return {"id": str(event.get("id")), "function": {"name": name, "arguments": arguments}}


def is_gemini_session(conversation: Any) -> bool:
    messages = conversation.get("messages") if isinstance(conversation, dict) else None
    return (isinstance(messages, list) and bool(messages)
            and all(isinstance(m, dict) and "type" in m and "role" not in m for m in messages))


def gemini_messages(messages: list[dict]) -> list[dict]:
    """A Gemini CLI session's messages as chat messages; info and error lines are dropped."""
    chat: list[dict] = []
    for message in messages:
        kind = message.get("type")
        if kind == "user":
            chat.append({"role": "user", "content": _text(message.get("content"))})
        elif kind == "gemini":
            calls = [call for call in message.get("toolCalls") or [] if isinstance(call, dict)]
            chat.append({"role": "assistant", "content": _text(message.get("content")), "tool_calls": [
                {"id": str(call.get("id")), "function": {"name": call.get("name"), "arguments": call.get("args")}}
                for call in calls]})
            chat += [{"role": "tool", "tool_call_id": str(call.get("id")), "content": _result_text(call.get("result"))}
                     for call in calls]
    return chat


def _mapping(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") if isinstance(part, dict) and isinstance(part.get("text"), str) else ""
                       for part in content)
    return ""


def _result_text(result: Any) -> str:
    """The output a Gemini CLI tool result shows (`[{functionResponse: {response: {output}}}]`), else its JSON."""
    for part in result if isinstance(result, list) else []:
        response = part.get("functionResponse", {}).get("response") if isinstance(part, dict) else None
        if isinstance(response, dict) and isinstance(response.get("output"), str):
            return response["output"]
    try:
        return json.dumps(result)[:100_000] if result is not None else ""
    except (TypeError, ValueError, RecursionError):
        return ""
