"""Where full DepGPO's credit and the counterfactual labels disagree, command by command
(docs/replay.md#where-credit-is-wrong-and-why).

The scores (report.scores) say how often credit misses; this lists each miss, so that causes can be read off and
grouped: in a success, a **necessary** command (removing it lowered the reward) with q = 0, and a command with
q > 0 whose removal left the reward (not necessary); in a failure, a **harmful** command (removing it raised the
reward) with q = 0. Commands a `--removals` budget did not remove have no label and are not listed. q is recomputed
on the kept replay with the given CreditConfig, as the table's DepGPO row is.
"""

from __future__ import annotations

from collections import Counter

import pandas as pd

from depgpo.credit import CreditConfig, credit_with_fallback
from depgpo.report.scores import Counterfactual, labels, turn_count

MISSED = "necessary, no credit"
SPURIOUS = "credited, not necessary"
UNBLAMED = "harmful, no credit"
COLUMNS = ["kind", "task", "source", "index", "turn", "q", "role", "reward", "reward_without", "reward_perturbed",
           "text"]


def disagreements(results: list[Counterfactual], config: CreditConfig | None = None) -> pd.DataFrame:
    """One row per command whose label and credit disagree (module docstring), reproducible results only."""
    config = config or CreditConfig()
    rows = []
    for result in results:
        if not result.reproducible:
            continue
        credit = credit_with_fallback(result.trajectory, config, turn_count(result))
        q = {c.index: c.q for c in credit.commands}
        roles = {c.index: c.role for c in credit.commands}
        outcome, labelled = labels(result)
        for command, label in zip(result.commands, labelled):
            if command.get("necessary") is None:  # not removed under a --removals budget
                continue
            score = q.get(command["index"], 0.0)
            kind = (MISSED if label and score == 0 else SPURIOUS if not label and score > 0 else None) \
                if outcome == "success" else (UNBLAMED if label and score == 0 else None)
            if kind is None:
                continue
            first_line = (command.get("text") or "").strip().splitlines() or [""]
            rows.append({"kind": kind, "task": result.task, "source": result.path, "index": command["index"],
                         "turn": command["turn"], "q": round(score, 4),
                         "role": roles.get(command["index"], credit.fallback or ""),
                         "reward": result.reward, "reward_without": command.get("reward_without"),
                         "reward_perturbed": command.get("reward_perturbed"), "text": first_line[0][:120]})
    return pd.DataFrame(rows, columns=COLUMNS)


def summary_lines(frame: pd.DataFrame) -> list[str]:
    """Counts by kind and DepGPO's role of the command, most frequent first."""
    if frame.empty:
        return ["no disagreement between full DepGPO's credit and the counterfactual labels"]
    counts = Counter(zip(frame["kind"], frame["role"]))
    return [f"{kind}, DepGPO's role {role or 'none'}: {n} commands of "
            f"{frame[(frame.kind == kind) & (frame.role == role)].task.nunique()} tasks"
            for (kind, role), n in counts.most_common()]
