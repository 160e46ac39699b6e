"""Credit for another trainer (docs/extending.md#credit-in-another-trainer): from a group of rollouts of one task to
per-turn advantages, and from turns to token spans. No torch, no numpy: plain Python on lists.

A rollout is a `trajectory.json` dict (docs/trajectory-schema.md), or an agent's conversation as OpenAI chat
messages (a list, or `{"messages": [...]}` with optional `workdir`, `verifier_source`): assistant messages whose
`tool_calls` run a bash tool (`{"command": ...}` arguments), each answered by a `tool` message. A conversation goes
through offline inference (`depgpo.inference.from_conversation`), which reads each command's reads and writes from
its text and takes E from the task's text (the first user message) or from `verifier_source`.

Turns are model turns: every assistant message is one, with or without a command, so each rollout gets exactly one
advantage per assistant message (a trajectory: its `num_turns`, else one past its last command's turn).

- `turn_advantages(group, rewards)`: `A_t = A_i · f_t` (docs/credit.md#advantage), where `A_i` is the rollout's
  GRPO advantage in its group (`group_advantages`, verl's formula) and `f_t` DepGPO's step factor (mean 1 over the
  turns; `depgpo.credit.step_factors_for`). A turn without a command has credit 0, so factor 0 at the default
  `factor_floor` (α) of 0. A rollout the credit cannot tell apart turn by turn (Table 4 fallbacks: no E, no turn
  with positive credit, ...) gets unit factors, i.e. GRPO's advantage on every turn; `group_credit` says why.
- `turn_token_spans(messages, token_counts=...)` or `(..., tokenize=...)`: the tokens of each assistant message in
  the rendered conversation; `mask_token_spans(response_mask)` the turns of verl's multi-turn layout (each run of
  1s in the mask); `token_advantages(values, spans, length)` puts each turn's value on its tokens.

Bad arguments raise ValueError with one line: the function, the argument, what is wrong, and the fix.
"""

from __future__ import annotations

import json
import math
import reprlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from numbers import Integral
from typing import Any, NamedTuple, TypeAlias

from depgpo.credit import CreditConfig, credit_with_fallback
from depgpo.inference import from_conversation
from depgpo.inference import num_turns as recorded_turns
from depgpo.trajectory.load import TrajectoryError, check_header
from depgpo.trajectory.schema import MAX_TURNS

__all__ = [
    "Message", "Rollout", "RolloutCredit", "TokenSpan", "depgpo_turn_advantages", "group_advantages", "group_credit",
    "mask_token_spans", "render_chatml", "rollout_trajectory", "token_advantages", "turn_advantages",
    "turn_token_spans",
]

Message: TypeAlias = Mapping[str, Any]
Rollout: TypeAlias = Mapping[str, Any] | Sequence[Message]

# verl's default epsilon of GRPO (compute_grpo_outcome_advantage); how far factors may drift from mean 1.
EPSILON = 1e-6
FACTOR_MEAN_TOLERANCE = 1e-5
_SHAPES = ("a trajectory.json dict (docs/trajectory-schema.md), a list of chat messages, or {'messages': [...]}")


class TokenSpan(NamedTuple):
    """Tokens [start, end) of one model turn."""

    start: int
    end: int


@dataclass(frozen=True)
class RolloutCredit:
    """One rollout's share of its group: its GRPO advantage, DepGPO's factors, and their product per turn."""

    reward: float
    advantage: float  # A_i, the rollout's group-relative advantage
    step_factors: list[float]  # f_t, one per turn, mean 1 (unit factors on a fallback)
    turn_advantages: list[float]  # A_i · f_t
    fallback: str | None  # why the factors are unit (docs/credit.md#fallbacks); None when the credit was used

    @property
    def num_turns(self) -> int:
        return len(self.step_factors)


def _fail(function: str, message: str) -> ValueError:
    return ValueError(f"{function}: {message}")


_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxdict, _REPR.maxlist, _REPR.maxstring, _REPR.maxother = 2, 4, 4, 40, 40


def _short(value: object) -> str:
    return _REPR.repr(value)


def _numbers(function: str, name: str, values: object, fix: str, allow_bool: bool = False) -> list[float]:
    """`values` as finite floats (a list, tuple, numpy array or tensor of numbers)."""
    if isinstance(values, str | bytes | Mapping) or not isinstance(values, Iterable):
        raise _fail(function, f"{name}={_short(values)}: expected a sequence of numbers; {fix}")
    numbers: list[float] = []
    for position, value in enumerate(values):
        if isinstance(value, str | bytes) or isinstance(value, bool) and not allow_bool:
            raise _fail(function, f"{name}[{position}]={value!r}: expected a number; {fix}")
        try:
            number = float(value)
        except (TypeError, ValueError, RuntimeError):  # RuntimeError: a tensor of more than one number
            raise _fail(function, f"{name}[{position}]={_short(value)}: expected a number; {fix}") from None
        if not math.isfinite(number):
            raise _fail(function, f"{name}[{position}]={number}: expected a finite number; {fix}")
        numbers.append(number)
    return numbers


def _sequence(function: str, name: str, value: object, what: str) -> Sequence[Any]:
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Sequence):
        raise _fail(function, f"{name}={_short(value)}: expected a list of {what}, got {type(value).__name__}")
    return value


def _count(function: str, name: str, value: object, fix: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TURNS:
        raise _fail(function, f"{name}={value!r}: expected an integer in [0, {MAX_TURNS}]; {fix}")
    return value


def _settings(function: str, epsilon: object, norm_adv_by_std: object) -> float:
    if isinstance(epsilon, bool) or not isinstance(epsilon, int | float) or not 0 <= epsilon < math.inf:
        raise _fail(function, f"epsilon={epsilon!r}: expected a finite number >= 0 (verl's default: {EPSILON})")
    if not isinstance(norm_adv_by_std, bool):
        raise _fail(function, f"norm_adv_by_std={norm_adv_by_std!r}: expected True (GRPO) or False (Dr. GRPO)")
    return float(epsilon)


# ---- the group advantage and DepGPO's product -------------------------------------------------------------------

def group_advantages(rewards: Sequence[float], *, epsilon: float = EPSILON,
                     norm_adv_by_std: bool = True) -> list[float]:
    """GRPO's outcome advantage of each rollout of one group, as verl computes it
    (`verl.trainer.ppo.core_algos.compute_grpo_outcome_advantage`): `(r_i - mean r) / (std r + epsilon)`, with the
    sample std (n - 1); without `norm_adv_by_std` (Dr. GRPO) only `r_i - mean r`. A group of one rollout has mean 0
    and std 1 there, so its advantage is its reward (divided by 1 + epsilon)."""
    return _group_advantages("group_advantages", rewards, epsilon, norm_adv_by_std)


def _group_advantages(function: str, rewards: object, epsilon: object, norm_adv_by_std: object) -> list[float]:
    values = _numbers(function, "rewards", rewards, "give one scalar reward per rollout")
    epsilon = _settings(function, epsilon, norm_adv_by_std)
    mean, std = 0.0, 1.0  # verl's for a group of one
    if len(values) > 1:
        # Equal rewards: exactly 0, never the rounding of their mean divided by epsilon.
        mean = values[0] if min(values) == max(values) else math.fsum(values) / len(values)
        std = math.sqrt(math.fsum((value - mean) ** 2 for value in values) / (len(values) - 1))
    return [(value - mean) / (std + epsilon) if norm_adv_by_std else value - mean for value in values]


def depgpo_turn_advantages(rewards: Sequence[float], step_factors: Sequence[Sequence[float]], *,
                           epsilon: float = EPSILON, norm_adv_by_std: bool = True) -> list[list[float]]:
    """`A_i · f_t` for every turn t of every rollout i of one group, from given step factors (each rollout's: finite,
    >= 0, mean 1; empty for a rollout without turns). What `depgpo.algos.advantages.compute_depgpo_advantage`
    puts on the tokens of each turn."""
    function = "depgpo_turn_advantages"
    factor_lists = _sequence(function, "step_factors", step_factors, "per-rollout lists of factors")
    advantages = _group_advantages(function, rewards, epsilon, norm_adv_by_std)
    if len(factor_lists) != len(advantages):
        raise _fail(function, f"step_factors has {len(factor_lists)} lists for {len(advantages)} rewards; give one "
                              "list of factors per rollout, in the rewards' order")
    checked = [_factors(function, f"step_factors[{i}]", factors) for i, factors in enumerate(factor_lists)]
    return [_products(advantage, factors) for advantage, factors in zip(advantages, checked, strict=True)]


def _products(advantage: float, factors: Sequence[float]) -> list[float]:
    return [advantage * factor + 0.0 for factor in factors]  # + 0.0: a factor 0 gives 0.0, never -0.0


def _factors(function: str, name: str, factors: object) -> list[float]:
    fix = "step factors are non-negative with mean 1 over the turns (depgpo.credit.step_factors_for)"
    values = _numbers(function, name, factors, fix)
    if any(value < 0 for value in values):
        raise _fail(function, f"{name}={_short(values)}: a negative factor; {fix}")
    if values and abs(math.fsum(values) / len(values) - 1.0) > FACTOR_MEAN_TOLERANCE:
        raise _fail(function, f"{name}={_short(values)}: mean {math.fsum(values) / len(values):.6g}; {fix}")
    return values


# ---- rollouts to trajectories, and to credit --------------------------------------------------------------------

def rollout_trajectory(rollout: Rollout, *, where: str = "rollout") -> dict[str, Any]:
    """The trajectory a rollout stands for: a trajectory dict checked as every reader checks it (its header, and
    commands whose turns fit `num_turns`), or one inferred from a conversation. ValueError naming `where` otherwise."""
    return _trajectory("rollout_trajectory", where, rollout)


def _trajectory(function: str, where: str, rollout: object) -> dict[str, Any]:
    if isinstance(rollout, Mapping) and "schema_version" in rollout:
        return _checked_trajectory(function, where, dict(rollout))
    if isinstance(rollout, Mapping) and isinstance(rollout.get("messages"), list):
        conversation = dict(rollout)
    elif not isinstance(rollout, str | bytes | Mapping) and isinstance(rollout, Sequence):
        conversation = {"messages": list(rollout)}
    else:
        shape = f"a dict with keys {sorted(map(str, rollout))[:8]}" if isinstance(rollout, Mapping) else \
            type(rollout).__name__
        raise _fail(function, f"{where}: expected {_SHAPES}, got {shape}")
    for position, message in enumerate(conversation["messages"]):
        if not isinstance(message, Mapping) or not isinstance(message.get("role"), str):
            raise _fail(function, f"{where}.messages[{position}]={_short(message)}: not a chat message; each entry "
                                  "needs a string 'role' (system, user, assistant, tool)")
    conversation["messages"] = [dict(message) for message in conversation["messages"]]
    try:
        return from_conversation(conversation, where)
    except ValueError as error:
        raise _fail(function, f"{where}: {error}") from None


def _checked_trajectory(function: str, where: str, trajectory: dict[str, Any]) -> dict[str, Any]:
    fix = "see docs/trajectory-schema.md"
    try:
        check_header(trajectory)
    except TrajectoryError as error:
        raise _fail(function, f"{where}: {error}") from None
    commands = trajectory.get("commands")
    if not isinstance(commands, list):
        raise _fail(function, f"{where}.commands={_short(commands)}: expected a list of commands; {fix}")
    last = -1
    for position, command in enumerate(commands):
        turn = command.get("turn") if isinstance(command, Mapping) else None
        if isinstance(turn, bool) or not isinstance(turn, int) or not 0 <= turn < MAX_TURNS:
            raise _fail(function, f"{where}.commands[{position}].turn={_short(turn)}: expected the integer turn "
                                  f"that issued the command (0, 1, ...); {fix}")
        last = max(last, turn)
    recorded = trajectory.get("num_turns")
    if recorded is not None:
        _count(function, f"{where}.num_turns", recorded, "the number of model turns, or null")
        if recorded <= last:
            raise _fail(function, f"{where}.num_turns={recorded}: a command belongs to turn {last}; record every "
                                  "model turn, or null to count them from the commands")
    return trajectory


def group_credit(group: Sequence[Rollout], rewards: Sequence[float], *, config: CreditConfig | None = None,
                 epsilon: float = EPSILON, norm_adv_by_std: bool = True,
                 num_turns: Sequence[int | None] | None = None) -> list[RolloutCredit]:
    """Each rollout's GRPO advantage, step factors, per-turn advantages and fallback reason, for a group of
    rollouts of one task (one reward each). `num_turns[i]`, when given, overrides rollout i's turn count (at least
    one past its last command's turn)."""
    return _group_credit("group_credit", group, rewards, config, epsilon, norm_adv_by_std, num_turns)


def _group_credit(function: str, group: object, rewards: object, config: CreditConfig | None, epsilon: float,
                  norm_adv_by_std: bool, num_turns: object) -> list[RolloutCredit]:
    config = CreditConfig() if config is None else config
    if not isinstance(config, CreditConfig):
        raise _fail(function, f"config={_short(config)}: expected a CreditConfig, got {type(config).__name__}; "
                              "build one with CreditConfig(...) or CreditConfig.from_mapping({...})")
    if isinstance(group, Mapping):
        raise _fail(function, "group: got one rollout (a dict); pass the group as a list of rollouts of one task, "
                              "[rollout, ...]")
    rollouts = _sequence(function, "group", group, "rollouts of one task (trajectory dicts or message lists)")
    values = _numbers(function, "rewards", rewards, "give one scalar reward per rollout, in the group's order")
    if len(values) != len(rollouts):
        raise _fail(function, f"rewards has {len(values)} values for a group of {len(rollouts)} rollouts; give one "
                              "reward per rollout, in the group's order")
    counts: Sequence[int | None] = [None] * len(rollouts)
    if num_turns is not None:
        counts = _sequence(function, "num_turns", num_turns, "turn counts (or None), one per rollout")
        if len(counts) != len(rollouts):
            raise _fail(function, f"num_turns has {len(counts)} values for a group of {len(rollouts)} rollouts; "
                                  "give one per rollout (None: the rollout's own count)")
    advantages = _group_advantages(function, values, epsilon, norm_adv_by_std)
    results = []
    for i, (rollout, reward, advantage, count) in enumerate(zip(rollouts, values, advantages, counts, strict=True)):
        trajectory = _trajectory(function, f"group[{i}]", rollout)
        turns = recorded_turns(trajectory)  # its num_turns, else one past its last command's turn
        if count is not None:
            needed = max((int(command["turn"]) for command in trajectory["commands"]), default=-1) + 1
            fix = f"at least {needed} (one past group[{i}]'s last command turn), or None for its own count"
            if _count(function, f"num_turns[{i}]", count, fix) < needed:
                raise _fail(function, f"num_turns[{i}]={count}: group[{i}] has a command in turn {needed - 1}; "
                                      f"give {fix}")
            turns = count
        credit = credit_with_fallback(trajectory, config, turns)
        factors, fallback = credit.step_factors, credit.fallback
        if len(factors) != turns:  # never expected: credit_with_fallback counts the turns it is given
            raise RuntimeError(f"group_credit: group[{i}]: {len(factors)} step factors for {turns} turns")
        results.append(RolloutCredit(reward=reward, advantage=advantage, step_factors=list(factors),
                                     turn_advantages=_products(advantage, factors), fallback=fallback))
    return results


def turn_advantages(group: Sequence[Rollout], rewards: Sequence[float], *, config: CreditConfig | None = None,
                    epsilon: float = EPSILON, norm_adv_by_std: bool = True,
                    num_turns: Sequence[int | None] | None = None) -> list[list[float]]:
    """DepGPO's advantage of every turn of every rollout of one group: `result[i][t] = A_i · f_t`, with one entry per
    model turn (assistant message) of rollout i. See `group_credit` for the arguments and the fallback reasons."""
    credits = _group_credit("turn_advantages", group, rewards, config, epsilon, norm_adv_by_std, num_turns)
    return [credit.turn_advantages for credit in credits]


# ---- turns to tokens ------------------------------------------------------------------------------------------

def _text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return "".join(_text(part.get("text")) if isinstance(part, Mapping) else _text(part) for part in content)
    return ""


def render_chatml(message: Message) -> str:
    """One message in ChatML with Hermes-style tool calls (Qwen's template): a stand-in for your tokenizer's chat
    template, for `turn_token_spans(..., tokenize=...)` without `render`."""
    body = _text(message.get("content"))
    calls = message.get("tool_calls")
    for call in calls if isinstance(calls, list) else []:
        function = call.get("function") if isinstance(call, Mapping) else None
        if isinstance(function, Mapping):
            arguments = function.get("arguments")
            if isinstance(arguments, str):
                try:
                    arguments = json.loads(arguments)
                except (ValueError, RecursionError):
                    pass
            body += "\n<tool_call>\n" + json.dumps({"name": function.get("name"), "arguments": arguments}) + \
                "\n</tool_call>"
    return f"<|im_start|>{message.get('role')}\n{body}<|im_end|>\n"


def turn_token_spans(messages: Sequence[Message], *, token_counts: Sequence[int] | None = None,
                     tokenize: Callable[[str], Sequence[int]] | None = None,
                     render: Callable[[Message], str] | None = None) -> list[TokenSpan]:
    """The tokens of each assistant message (each model turn, in order) in the conversation's token sequence, with
    the messages' tokens laid end to end: from `token_counts` (one per message, as your chat template rendered
    them), or from `tokenize(render(message))` (`render` defaults to `render_chatml`). Spans count from the first
    message's first token: subtract the prompt's length for response positions."""
    function = "turn_token_spans"
    entries = _sequence(function, "messages", messages, "chat messages")
    for position, message in enumerate(entries):
        if not isinstance(message, Mapping) or not isinstance(message.get("role"), str):
            raise _fail(function, f"messages[{position}]={_short(message)}: not a chat message; each entry needs a "
                                  "string 'role'")
    if (token_counts is None) == (tokenize is None):
        raise _fail(function, "give exactly one of token_counts= (tokens per message) and tokenize= (text -> ids)")
    if token_counts is not None:
        counts = _sequence(function, "token_counts", token_counts, "token counts, one per message")
        if len(counts) != len(entries):
            raise _fail(function, f"token_counts has {len(counts)} values for {len(entries)} messages; give each "
                                  "message's token count, in order")
        sizes = [_size(function, f"token_counts[{i}]", count) for i, count in enumerate(counts)]
    else:
        assert tokenize is not None
        if not callable(tokenize) or (render is not None and not callable(render)):
            raise _fail(function, "tokenize and render must be callables: tokenize(text) -> token ids, "
                                  "render(message) -> text")
        sizes = [len(tokenize((render or render_chatml)(message))) for message in entries]
    spans, offset = [], 0
    for message, size in zip(entries, sizes, strict=True):
        if message["role"] == "assistant":
            spans.append(TokenSpan(offset, offset + size))
        offset += size
    return spans


def _size(function: str, name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral) or value < 0:
        raise _fail(function, f"{name}={value!r}: expected a token count, an integer >= 0")
    return int(value)


def mask_token_spans(response_mask: Sequence[int] | Sequence[bool] | Sequence[float]) -> list[TokenSpan]:
    """The turns of verl's multi-turn layout (an agent loop's `response_mask`: 1 on tokens the model sampled, 0 on
    template and observation tokens): each maximal run of 1s is one model turn (depgpo.policy.generate), as long
    as some token the model did not sample separates every two turns."""
    function = "mask_token_spans"
    values = _numbers(function, "response_mask", response_mask, "the mask holds 1 (model token) or 0 (other)",
                      allow_bool=True)
    spans: list[TokenSpan] = []
    start = None
    for position, value in enumerate([*values, 0.0]):
        if value not in (0.0, 1.0):
            raise _fail(function, f"response_mask[{position}]={value:g}: expected 0 or 1")
        if value == 1.0 and start is None:
            start = position
        elif value == 0.0 and start is not None:
            spans.append(TokenSpan(start, position))
            start = None
    return spans


def token_advantages(values: Sequence[float], spans: Sequence[TokenSpan | tuple[int, int]],
                     length: int) -> list[float]:
    """A list of `length` per-token values: `values[k]` on every token of `spans[k]`, 0.0 elsewhere."""
    function = "token_advantages"
    numbers = _numbers(function, "values", values, "give one value per turn (turn_advantages' list of a rollout)")
    ranges = _sequence(function, "spans", spans, "(start, end) token spans, one per turn")
    if isinstance(length, bool) or not isinstance(length, int) or length < 0:
        raise _fail(function, f"length={length!r}: expected the number of tokens, an integer >= 0")
    if len(numbers) != len(ranges):
        raise _fail(function, f"values has {len(numbers)} entries for {len(ranges)} spans; give one value per turn "
                              "(the rollout's turn count must equal its number of assistant messages)")
    per_token = [0.0] * length
    previous_end = 0
    for k, (value, span) in enumerate(zip(numbers, ranges, strict=True)):
        if not (isinstance(span, tuple | list) and len(span) == 2
                and all(isinstance(x, Integral) and not isinstance(x, bool) for x in span)):
            raise _fail(function, f"spans[{k}]={_short(span)}: expected (start, end), two integers")
        start, end = int(span[0]), int(span[1])
        if not previous_end <= start <= end <= length:
            raise _fail(function, f"spans[{k}]=({start}, {end}): spans must be in order, not overlap, and lie in "
                                  f"[0, length={length}]")
        per_token[start:end] = [value] * (end - start)
        previous_end = end
    return per_token
