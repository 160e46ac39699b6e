"""Counterfactual (e): a minimal sufficient set of commands, the label that sees redundancy (docs/replay.md#scores).

Leave-one-out (b) cannot label either of two writes that each suffice: without either one the other still earns the
reward, so both look unnecessary. Replays of subsets can. The label is one minimal sufficient set M of a successful
trajectory (reward r > 0), defined as the forward greedy finds it:

    S = every command
    for each command c in order, unless removing c alone lowered the reward (necessary by (b): kept untested):
        if the commands S - {c}, replayed, earn at least r: S = S - {c}
    M = S

A command is *in the sufficient set* when it is in M. Of two whole writes of the answer, M keeps the later (the
earlier one is tried first and the later suffices without it); with no redundancy, M is exactly the necessary set.

The search computes that M with fewer replays: it tries to drop a whole run of candidates at once (first all of
them: one replay when the necessary commands alone suffice) and splits a run that cannot go in halves, earlier half
first. Where the reward is monotone in the commands kept (a superset of a sufficient set suffices), dropping a run
drops what the greedy would drop one by one, so M is the same, and every command of M is necessary within M. Where it
is not (a command that only harms, or two that only matter together), M is still a replayed, sufficient set.

A replay of a set already replayed is not repeated: (a), each (b) and (c) are known. `budget` bounds the new replays;
the candidates not decided when it runs out stay in S and get no label (None).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class SufficientSet:
    kept: tuple[int, ...]          # S at the end: M when complete; always a set whose replay earned r
    labels: list[bool | None]      # per command: in M, not in M, or None (undecided when the budget ran out)
    replays: int                   # new replays the search ran (those not already known from (a)-(c))
    complete: bool                 # every candidate decided


def search(n: int, necessary: list[bool | None], suffices: Callable[[tuple[int, ...]], bool],
           known: dict[tuple[int, ...], bool], budget: int | None = None) -> SufficientSet:
    """M for n commands; `necessary` is (b)'s label (None where a budget did not remove it), `suffices(keep)` replays
    the commands `keep` and says whether they earn the reward, `known` holds the kept sets whose answer is known."""
    known = dict(known)
    known.setdefault(tuple(range(n)), True)  # (a) earned r by definition
    state = {"kept": set(range(n)), "replays": 0}
    labels: list[bool | None] = [True if necessary[k] else None for k in range(n)]

    def can_drop(run: list[int]) -> bool | None:
        """Whether S without `run` still earns r; None when it would take a replay over the budget."""
        keep = tuple(sorted(state["kept"] - set(run)))
        if keep not in known:
            if budget is not None and state["replays"] >= budget:
                return None
            state["replays"] += 1
            known[keep] = suffices(keep)
        return known[keep]

    def decide(run: list[int]) -> bool:
        """Decide every command of `run`; False when the budget ran out first."""
        answer = can_drop(run)
        if answer is None:
            return False
        if answer:
            state["kept"] -= set(run)
            for k in run:
                labels[k] = False
            return True
        if len(run) == 1:
            labels[run[0]] = True
            return True
        half = len(run) // 2
        return decide(run[:half]) and decide(run[half:])

    candidates = [k for k in range(n) if not necessary[k]]
    complete = decide(candidates) if candidates else True
    return SufficientSet(tuple(sorted(state["kept"])), labels, state["replays"], complete)
