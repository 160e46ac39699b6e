"""SFT conversations from oracle solutions, run for real in the traced sandbox.

Each conversation is an oracle solution with some of the task's distractor commands (ls, cat of an unrelated file)
interleaved at seeded positions, executed as an episode; only passing episodes become training data. The same
episodes are the "reference trajectories" of Figure 1(d): for each we record the fraction of its commands that the
dependency credit connects to the verifier's records E.

Optionally (`incomplete_per_task`, config `sft_data.incomplete`) a task also gets conversations that leave out the
oracle's last two commands (its last change and the check after it), kept although they fail: the mistakes of a
teacher whose runs were not verified. They give the SFT policy a mistake on its own path (declaring "done" too
early) for RL to correct; on two training tasks, the tiny policy's only failures were otherwise garbled tokens, and
RL did not beat the frozen policy (docs/changelog.md#before-issue-14).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from depgpo.agent.config import AgentConfig
from depgpo.agent.loop import map_in_threads
from depgpo.credit import CreditConfig, credit_with_fallback
from depgpo.env.episode import Episode
from depgpo.policy.chat import SYSTEM_PROMPT
from depgpo.tasks import load_task
from depgpo.tasks.generate import distractor_commands, oracle_commands

# Every generated oracle ends with its last change, or with that change and one check (cat, ls) after it: leaving out
# two commands always leaves the task undone.
INCOMPLETE_CUT = 2


def with_distractors(oracle: list[str], distractors: list[str], rng: random.Random, max_extra: int) -> list[str]:
    """The oracle's commands in order, with up to max_extra distractors inserted at random positions."""
    commands = list(oracle)
    for extra in rng.sample(distractors, k=min(max_extra, len(distractors), rng.randint(0, max_extra))):
        commands.insert(rng.randint(0, len(commands)), extra)
    return commands


def to_messages(instruction: str, commands: list[str], records: list[dict]) -> list[dict]:
    """OpenAI chat messages with one `bash` tool call per assistant turn, ending with a plain "done" turn."""
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": instruction}]
    for turn, (command, record) in enumerate(zip(commands, records, strict=True)):
        call_id = f"call_{turn}"
        messages.append({"role": "assistant", "content": "", "tool_calls": [
            {"id": call_id, "type": "function",
             "function": {"name": "bash", "arguments": json.dumps({"command": command})}}]})
        exit_code = record["exit_code"]
        suffix = f"\n[exit code: {exit_code}]" if exit_code is not None else ""
        messages.append({"role": "tool", "tool_call_id": call_id, "content": record["observation"] + suffix})
    messages.append({"role": "assistant", "content": "done"})
    return messages


def connected_fraction(trajectory: dict) -> float:
    """Fraction of a trajectory's commands with positive dependency credit (connected to E)."""
    result = credit_with_fallback(trajectory, CreditConfig())
    if not result.commands:  # credit could not be computed (a factor fallback alone still leaves command credit)
        return 0.0
    return sum(c.q > 0 for c in result.commands) / len(result.commands)


def run_scripted(task, commands: list[str], agent: AgentConfig) -> tuple[list[dict], dict, dict]:
    """(command records, verifier result, trajectory) of one episode that runs `commands` in order."""
    with Episode(task, agent.episode) as episode:
        records = [episode.run_command(c, turn=t) for t, c in enumerate(commands)]
        verifier = episode.verify()
        return records, verifier, episode.trajectory()


def build_sft_data(task_dirs: list[Path], out_jsonl: Path, reference_json: Path, agent: AgentConfig,
                   variants_per_task: int, max_distractors: int, seed: int, incomplete_per_task: int = 0) -> dict:
    """Write conversations (JSONL) and the reference-credit summary; returns counts.

    `incomplete_per_task` extra conversations per task stop INCOMPLETE_CUT oracle commands short: an unverified
    teacher's mistake, kept although the verifier fails them, so that the SFT policy sometimes declares "done" too
    early."""
    rng = random.Random(seed)
    incomplete_rng = random.Random(f"{seed}-incomplete")  # its own draws: the complete conversations stay the same
    scripts = []  # (task, commands, complete), drawn in a fixed order so the data do not depend on agent.workers
    for task_dir in task_dirs:
        task = load_task(task_dir)
        oracle, distractors = oracle_commands(task_dir), distractor_commands(task_dir)
        for variant in range(variants_per_task):
            # With several variants the first is the bare oracle; with one, every task draws its distractors.
            bare = variant == 0 and variants_per_task > 1
            scripts.append((task, with_distractors(oracle, distractors, rng, 0 if bare else max_distractors), True))
        for _ in range(incomplete_per_task):
            cut = oracle[:-INCOMPLETE_CUT]
            scripts.append((task, with_distractors(cut, distractors, incomplete_rng, max_distractors), False))
    kept, failed, incomplete, references = 0, 0, 0, []
    out_jsonl.parent.mkdir(parents=True, exist_ok=True)
    with open(out_jsonl, "w") as out:
        episodes = map_in_threads(lambda script: run_scripted(script[0], script[1], agent), scripts, agent.workers)
        for (task, commands, complete), (records, verifier, trajectory) in zip(scripts, episodes):
            if not complete:
                incomplete += 1
            else:
                references.append({"task": task.id, "commands": len(commands), "reward": verifier["reward"],
                                   "connected_fraction": connected_fraction(trajectory)})
                if verifier["reward"] < 1.0:
                    failed += 1
                    continue
            out.write(json.dumps({"task": task.id, "reward": verifier["reward"],
                                  "messages": to_messages(task.instruction, commands, records)}) + "\n")
            kept += 1
    reference_json.write_text(json.dumps({"trajectories": references}, indent=1))
    return {"conversations": kept, "failed_oracle_runs": failed, "incomplete": incomplete}
