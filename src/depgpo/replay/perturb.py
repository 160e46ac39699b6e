"""A task drawn again with other values for what a read revealed: the environment side of counterfactual (d).

A credited read showed the agent values (the `4821` of `count: 4821`). If the outcome depends on the agent having
seen them, then in the same task with other values the same commands, replayed as they are, no longer earn the
reward: a command that typed the old value writes a wrong answer. If the value flowed from file to file without the
agent (`grep ... > answer.txt`), the reward stays.

That needs a task whose verifier expects whatever values its files hold. The generated tasks (depgpo.tasks.generate,
`category = "generated"` in task.toml) are such tasks: their values are plain numbers written alike into the
environment's files, the instruction and the verifier's checks, so replacing a value everywhere is the same task
drawn with another value. Any other task's verifier may hold its expected values in code this cannot rewrite
consistently; there the perturbation is not done and the reason is given.
"""

from __future__ import annotations

import re
import shutil
import tomllib
from pathlib import Path

_NUMBER = re.compile(r"(?<![\w.])\d{2,}(?![\w.])")  # a whole number token (a value, a port), not part of a word
_REWRITTEN = ("environment", "tests", "instruction.md")  # where a generated task writes its values


def generated(task_dir: Path) -> bool:
    try:
        metadata = tomllib.loads((Path(task_dir) / "task.toml").read_text()).get("metadata", {})
    except (OSError, tomllib.TOMLDecodeError):
        return False
    return metadata.get("category") == "generated"


def value_map(task_dir: Path, observation: str) -> tuple[dict[str, str] | None, str]:
    """(old value -> new value, what is changed) for the values `observation` revealed from the task's files; or
    (None, why not)."""
    task_dir = Path(task_dir)
    if not generated(task_dir):
        return None, "not a generated task: its verifier's expected values cannot be redrawn consistently"
    in_files = set()
    for path in (task_dir / "environment").rglob("*"):
        if path.is_file() and path.name != "Dockerfile":
            in_files |= set(_NUMBER.findall(path.read_text(errors="replace")))
    revealed = sorted(set(_NUMBER.findall(observation or "")) & in_files)
    if not revealed:
        return None, "its output shows no value of the task's files"
    taken = set(in_files) | set(_NUMBER.findall(_all_text(task_dir)))
    mapping = {}
    for value in revealed:
        # The nearest unused number of the same width: the same kind of value, never one the task holds already.
        number = int(value)
        candidate = next(str(number + step) for step in range(1, 10**6)
                         if len(str(number + step)) == len(value) and str(number + step) not in taken)
        mapping[value] = candidate
        taken.add(candidate)
    return mapping, "values changed: " + ", ".join(f"{old} -> {new}" for old, new in mapping.items())


def perturbed_task(task_dir: Path, mapping: dict[str, str], dest: Path) -> Path:
    """A copy of `task_dir` at `dest` with every value of `mapping` replaced in its files, instruction and checks."""
    dest = Path(dest)
    shutil.copytree(task_dir, dest)
    pattern = re.compile(r"(?<![\w.])(" + "|".join(map(re.escape, mapping)) + r")(?![\w.])")
    for name in _REWRITTEN:
        for path in [dest / name] if (dest / name).is_file() else (dest / name).rglob("*"):
            if path.is_file():
                text = path.read_text(errors="surrogateescape")
                path.write_text(pattern.sub(lambda m: mapping[m.group(1)], text), errors="surrogateescape")
    return dest


def _all_text(task_dir: Path) -> str:
    parts = []
    for name in _REWRITTEN:
        path = task_dir / name
        for file in [path] if path.is_file() else path.rglob("*") if path.is_dir() else []:
            if file.is_file():
                parts.append(file.read_text(errors="replace"))
    return "\n".join(parts)
