"""SFT conversations from a user-given file (the paper's SETA and TMAX SFT sets), checked and normalised.

Accepts JSONL (one conversation per line) or Parquet (pandas), each row holding OpenAI chat `messages` (roles
system/user/assistant/tool; assistant turns with `bash` tool calls or Terminus-2 JSON replies). Writes the
conversations JSONL the SFT stage reads, and, like the generated data's oracle runs, a reference-credit summary for
Figure 1(d) from the static dependency credit of a seeded sample of the conversations (their commands are not rerun).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

ROLES = {"system", "user", "assistant", "tool"}


class ConversationError(ValueError):
    pass


def read_conversations(path: Path) -> list[dict]:
    """Rows of a JSONL or Parquet file, each checked to hold a list of chat messages."""
    path = Path(path)
    if not path.is_file():
        raise ConversationError(f"{path}: no such file (set data.sft_conversations, e.g. DEPGPO_SETA_SFT=/path)")
    if path.suffix == ".parquet":
        import pandas as pd

        rows = [_plain(row) for row in pd.read_parquet(path).to_dict(orient="records")]
    else:
        rows = []
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as e:
            raise ConversationError(f"{path}: not UTF-8 text (byte {e.start}: {e.reason}); write the conversations "
                                    "as UTF-8 JSONL, one conversation object per line") from None
        for number, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise ConversationError(f"{path}:{number}: not JSON ({e.msg}); write one conversation "
                                            "object per line") from None
    return [_checked(row, f"{path} row {i}") for i, row in enumerate(rows, start=1)]


def _plain(value):
    """Parquet's nested columns come back as numpy arrays and scalars: plain lists, dicts and numbers instead."""
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


def _checked(row: dict, where: str) -> dict:
    messages = row.get("messages", row.get("conversations"))
    if not isinstance(messages, list) or not messages:
        raise ConversationError(f"{where}: field 'messages' must be a non-empty list of chat messages")
    for j, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            raise ConversationError(f"{where}: messages[{j}].role must be one of {sorted(ROLES)}")
    if not any(m["role"] == "assistant" for m in messages):
        raise ConversationError(f"{where}: no assistant message: nothing to train on")
    return {key: value for key, value in row.items() if key != "conversations"} | {"messages": messages}


def import_conversations(source: Path, out_jsonl: Path, reference_json: Path, sample: int, seed: int) -> dict:
    from depgpo.inference import from_conversation
    from depgpo.train.sft_data import connected_fraction

    conversations = read_conversations(source)
    out_jsonl.parent.mkdir(parents=True, exist_ok=True)
    with open(out_jsonl, "w") as out:
        for conversation in conversations:
            out.write(json.dumps(conversation) + "\n")
    picked = random.Random(seed).sample(range(len(conversations)), k=min(sample, len(conversations)))
    references = []
    for i in sorted(picked):
        trajectory = from_conversation(conversations[i], f"{source.stem}#{i}")
        references.append({"task": trajectory["task"]["id"], "commands": len(trajectory["commands"]),
                           "reward": trajectory["verifier"].get("reward"),
                           "connected_fraction": connected_fraction(trajectory)})
    reference_json.write_text(json.dumps({"source": str(source), "static": True, "trajectories": references},
                                         indent=1))
    return {"conversations": len(conversations), "reference_sample": len(references)}
