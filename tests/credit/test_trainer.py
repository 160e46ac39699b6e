"""depgpo.credit.trainer, the torch-free trainer API (docs/extending.md#credit-in-another-trainer): groups of rollouts
(trajectory fixtures, OpenAI tool-call messages) to per-turn advantages, turns to token spans, the same numbers as
the torch estimator, one-line errors; and the long-log behaviour of the default factors that the page states."""

from __future__ import annotations

import copy
import json
import math
import random

import pytest

from depgpo.credit import CreditConfig, step_factors_for
from depgpo.credit.trainer import (
    TokenSpan, depgpo_turn_advantages, group_advantages, group_credit, mask_token_spans, render_chatml,
    rollout_trajectory, token_advantages, turn_advantages, turn_token_spans,
)
from tests.helpers import DATA

OFFLINE = DATA / "offline"
NATIVE = json.loads((OFFLINE / "native_traced.json").read_text())  # traced, 3 commands in 3 turns
CHAT = json.loads((OFFLINE / "chat_single.json").read_text())  # OpenAI tool calls: 3 commands, 4 assistant turns
BATCH = [json.loads(line) for line in (OFFLINE / "chat_batch.jsonl").read_text().splitlines() if line.strip()]
INSTRUCTION = "Count the lines of /app/data.txt into /app/answer.txt."


def bash(command: str, output: str, call_id: str) -> list[dict]:
    call = {"id": call_id, "type": "function",
            "function": {"name": "bash", "arguments": json.dumps({"command": command})}}
    return [{"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call_id, "content": output}]


def conversation(*commands: str, done: bool = True) -> list[dict]:
    messages = [{"role": "system", "content": "Use the bash tool."}, {"role": "user", "content": INSTRUCTION}]
    for number, command in enumerate(commands):
        messages += bash(command, "", f"call_{number}")
    return messages + ([{"role": "assistant", "content": "Done."}] if done else [])


def assistant_turns(messages: list[dict]) -> int:
    return sum(message["role"] == "assistant" for message in messages)


# ---- the group advantage ----------------------------------------------------------------------------------------

def test_group_advantages_are_verls_grpo():
    half = 0.5 / (math.sqrt(0.5) + 1e-6)  # sample std of [1, 0]: sqrt(0.5)
    assert group_advantages([1.0, 0.0]) == pytest.approx([half, -half])
    assert group_advantages([1, 0, 0, 0], norm_adv_by_std=False) == [0.75, -0.25, -0.25, -0.25]
    assert group_advantages([0.7, 0.7, 0.7]) == [0.0, 0.0, 0.0]  # no signal in the group
    assert group_advantages([1.0]) == [1.0 / (1.0 + 1e-6)]  # verl: a group of one has mean 0 and std 1
    assert group_advantages([]) == []


# ---- rollouts to per-turn advantages ------------------------------------------------------------------------------

def test_a_group_of_trajectory_dicts():
    failed = copy.deepcopy(NATIVE)
    failed["verifier"]["reward"] = 0.0
    credits = group_credit([NATIVE, failed], [1.0, 0.0])
    assert [credit.step_factors for credit in credits] == [[1.5, 1.5, 0.0]] * 2  # the credit ignores the reward
    advantage = 0.5 / (math.sqrt(0.5) + 1e-6)
    assert credits[0].turn_advantages == pytest.approx([1.5 * advantage, 1.5 * advantage, 0.0])
    assert credits[1].turn_advantages == pytest.approx([-1.5 * advantage, -1.5 * advantage, 0.0])
    assert credits[1].turn_advantages[2] == 0.0 and math.copysign(1.0, credits[1].turn_advantages[2]) == 1.0  # not -0.0
    assert [credit.fallback for credit in credits] == [None, None]


def test_openai_tool_call_messages_have_one_value_per_assistant_message():
    credits = group_credit([CHAT, CHAT[:-1]], [1.0, 0.0])
    assert credits[0].step_factors == [0.0, 0.0, 4.0, 0.0]  # the final reply runs no command: credit 0
    assert credits[1].step_factors == [0.0, 0.0, 3.0]
    assert [credit.num_turns for credit in credits] == [assistant_turns(CHAT), assistant_turns(CHAT[:-1])]
    assert turn_advantages([CHAT], [1.0]) == [pytest.approx([0.0, 0.0, 4.0, 0.0], rel=1e-5)]  # group of one


def test_conversation_dicts_and_fallbacks_keep_the_turn_count():
    credits = group_credit(BATCH, [row.get("reward") or 0.0 for row in BATCH])
    assert [credit.num_turns for credit in credits] == [assistant_turns(row["messages"]) for row in BATCH]
    assert [credit.fallback for credit in credits] == ["equal credit on every turn", "no turn has positive credit",
                                                        None]
    for credit in credits[:2]:  # unit factors: GRPO's advantage on every turn
        assert credit.turn_advantages == [credit.advantage] * credit.num_turns


@pytest.mark.parametrize(("messages", "fallback"), [
    (conversation(), "empty command-credit output: the trajectory has no commands"),  # one turn, no command
    (conversation("echo hi", done=False)[:2], "no step information"),  # no assistant message: no turns
    (conversation("ls /srv"), "no turn has positive credit"),
    ([{"role": "user", "content": "hello"}] + bash("ls /srv", "", "c"),  # the task names no file: no E
     "missing trace: no verifier records (verifier.E_source is none): an offline log has no verifier trace, and "
     "its task text names no file, path or port"),
])
def test_a_rollout_without_credit_gets_unit_factors_and_says_why(messages, fallback):
    (credit,) = group_credit([messages], [1.0])
    assert credit.fallback == fallback
    assert credit.step_factors == [1.0] * assistant_turns(messages)


def test_a_trajectory_the_credit_cannot_read_falls_back_with_its_turns():
    broken = {key: value for key, value in NATIVE.items() if key != "verifier"}
    (credit,) = group_credit([broken], [0.0])
    assert credit.fallback == "missing trace: verifier: missing" and credit.step_factors == [1.0, 1.0, 1.0]


def test_num_turns_adds_turns_without_a_command():
    (values,) = turn_advantages([NATIVE], [1.0], num_turns=[4])
    assert values == pytest.approx([2.0, 2.0, 0.0, 0.0], rel=1e-5)
    assert turn_advantages([NATIVE], [1.0], num_turns=[None]) == turn_advantages([NATIVE], [1.0])


def test_the_config_reaches_the_credit():
    (values,) = turn_advantages([NATIVE], [1.0], config=CreditConfig(factor_floor=1.0), norm_adv_by_std=False)
    assert values == pytest.approx([1.2, 1.2, 0.6])


def test_rollout_trajectory_is_the_inferred_trajectory_of_a_conversation():
    trajectory = rollout_trajectory({"messages": CHAT, "workdir": "/app"})
    assert trajectory["num_turns"] == 4 and trajectory["source"] == "static"
    assert [command["turn"] for command in trajectory["commands"]] == [0, 1, 2]
    assert rollout_trajectory(NATIVE) == NATIVE


# ---- turns to tokens ------------------------------------------------------------------------------------------

def test_spans_from_per_message_token_counts():
    counts = [5, 20, 7, 11, 9, 13, 4, 6, 8]  # chat_single.json: system, user, (assistant, tool) x 3, assistant
    spans = turn_token_spans(CHAT, token_counts=counts)
    assert spans == [TokenSpan(25, 32), TokenSpan(43, 52), TokenSpan(65, 69), TokenSpan(75, 83)]
    assert len(spans) == len(turn_advantages([CHAT], [1.0])[0])
    per_token = token_advantages([0.0, 0.0, 4.0, 0.0], spans, length=sum(counts))
    assert per_token[65:69] == [4.0] * 4 and sum(per_token) == 16.0


def test_spans_from_a_tokenizer_and_a_renderer():
    def tokenize(text: str) -> list[int]:
        return [len(word) for word in text.split()]

    spans = turn_token_spans(CHAT, tokenize=tokenize)
    sizes = [len(tokenize(render_chatml(message))) for message in CHAT]
    assert [span.end - span.start for span in spans] == [sizes[i] for i in (2, 4, 6, 8)]
    assert spans[0].start == sizes[0] + sizes[1]
    assert render_chatml(CHAT[4]) == ('<|im_start|>assistant\n\n<tool_call>\n{"name": "bash", "arguments": '
                                      '{"command": "wc -l orders.csv"}}\n</tool_call><|im_end|>\n')
    assert turn_token_spans(CHAT, tokenize=tokenize, render=lambda message: "x") == [
        TokenSpan(start, start + 1) for start in (2, 4, 6, 8)]


def test_spans_from_verls_response_mask():
    assert mask_token_spans([0, 1, 1, 0, 0, 1, 0, 1]) == [TokenSpan(1, 3), TokenSpan(5, 6), TokenSpan(7, 8)]
    assert mask_token_spans([True, False, True]) == [TokenSpan(0, 1), TokenSpan(2, 3)]
    assert mask_token_spans([]) == [] and mask_token_spans([0, 0]) == []


# ---- the same numbers as the torch estimator ---------------------------------------------------------------------

def random_factors(rng: random.Random, turns: int) -> list[float]:
    weights = [rng.choice([0.0, rng.random(), rng.random() * 5]) for _ in range(turns)]
    total = math.fsum(weights)
    return [w * turns / total for w in weights] if total > 0 else [1.0] * turns


def test_it_agrees_with_compute_depgpo_advantage_on_random_groups():
    torch = pytest.importorskip("torch")
    np = pytest.importorskip("numpy")
    pytest.importorskip("verl")
    from depgpo.algos.advantages import compute_depgpo_advantage

    rng = random.Random(20261203)
    for _ in range(60):
        groups = [rng.randint(1, 6) for _ in range(rng.randint(1, 3))]
        rewards = [[rng.choice([0.0, 1.0, rng.random()]) for _ in range(size)] for size in groups]
        factors = [[random_factors(rng, rng.randint(0, 5)) for _ in range(size)] for size in groups]
        masks, index, expected = [], [], []
        norm = rng.random() < 0.7
        for g, (group_rewards, group_factors) in enumerate(zip(rewards, factors)):
            per_turn = depgpo_turn_advantages(group_rewards, group_factors, norm_adv_by_std=norm)
            for turn_values, turn_factors in zip(per_turn, group_factors):
                mask = [0] * rng.randint(0, 2)
                for _ in turn_factors:
                    mask += [1] * rng.randint(1, 4) + [0] * rng.randint(1, 3)
                masks.append(mask)
                index.append(f"group{g}")
                expected.append(token_advantages(turn_values, mask_token_spans(mask), len(mask)))
        width = max(max(len(mask) for mask in masks), 1)
        padded = torch.tensor([mask + [0] * (width - len(mask)) for mask in masks], dtype=torch.float32)
        turn_ids = torch.full(padded.shape, -1, dtype=torch.long)
        for row, mask in enumerate(masks):
            for turn, span in enumerate(mask_token_spans(mask)):
                turn_ids[row, span.start:span.end] = turn
        token_rewards = torch.zeros_like(padded)
        token_rewards[:, 0] = torch.tensor([r for group in rewards for r in group])  # verl sums a row's rewards
        advantages, _ = compute_depgpo_advantage(token_rewards, padded, np.array(index, dtype=object),
                                                 norm_adv_by_std_in_grpo=norm, turn_ids=turn_ids,
                                                 step_factors=[f for group in factors for f in group])
        for row, values in enumerate(expected):
            assert advantages[row, :len(values)].tolist() == pytest.approx(values, rel=1e-5, abs=1e-5)


def test_group_credit_factors_give_the_estimators_advantages():
    """From real-shaped rollouts: what group_credit says per turn is what the estimator puts on the tokens."""
    credits = group_credit([CHAT, CHAT[:-1], NATIVE], [1.0, 0.0, 1.0])
    assert [c.turn_advantages for c in credits] == depgpo_turn_advantages(
        [1.0, 0.0, 1.0], [c.step_factors for c in credits])


# ---- bad input: one line naming the argument and the fix -----------------------------------------------------------

@pytest.mark.parametrize(("call", "message"), [
    (lambda: turn_advantages([{"bogus": 1}], [1.0]),
     "turn_advantages: group[0]: expected a trajectory.json dict (docs/trajectory-schema.md), a list of chat "
     "messages, or {'messages': [...]}, got a dict with keys ['bogus']"),
    (lambda: turn_advantages([NATIVE, NATIVE], [1.0, 0.0, 1.0]),
     "turn_advantages: rewards has 3 values for a group of 2 rollouts; give one reward per rollout"),
    (lambda: turn_advantages([NATIVE], ["1.0"]), "turn_advantages: rewards[0]='1.0': expected a number"),
    (lambda: turn_advantages([NATIVE], [float("nan")]), "rewards[0]=nan: expected a finite number"),
    (lambda: turn_advantages([NATIVE], 1.0), "turn_advantages: rewards=1.0: expected a sequence of numbers"),
    (lambda: turn_advantages(NATIVE, [1.0]), "turn_advantages: group: got one rollout (a dict); pass the group as"),
    (lambda: turn_advantages("x.json", [1.0]), "turn_advantages: group='x.json': expected a list of rollouts"),
    (lambda: turn_advantages([NATIVE], [1.0], config={"beta": 0.5}),
     "turn_advantages: config={'beta': 0.5}: expected a CreditConfig, got dict; build one with CreditConfig(...)"),
    (lambda: turn_advantages([NATIVE], [1.0], epsilon=-1), "epsilon=-1: expected a finite number >= 0"),
    (lambda: turn_advantages([NATIVE], [1.0], norm_adv_by_std="yes"), "norm_adv_by_std='yes': expected True"),
    (lambda: turn_advantages([NATIVE], [1.0], num_turns=[2]),
     "turn_advantages: num_turns[0]=2: group[0] has a command in turn 2; give at least 3"),
    (lambda: turn_advantages([NATIVE], [1.0], num_turns=[1, 2]), "num_turns has 2 values for a group of 1"),
    (lambda: turn_advantages([NATIVE | {"schema_version": 99}], [1.0]),
     "turn_advantages: group[0]: schema_version: unknown version 99"),
    (lambda: turn_advantages([NATIVE | {"commands": {}}], [1.0]), "group[0].commands={}: expected a list"),
    (lambda: turn_advantages([NATIVE | {"commands": [{"turn": "0"}]}], [1.0]),
     "group[0].commands[0].turn='0': expected the integer turn"),
    (lambda: turn_advantages([NATIVE | {"num_turns": 2}], [1.0]),
     "group[0].num_turns=2: a command belongs to turn 2"),
    (lambda: turn_advantages([CHAT + ["stray"]], [1.0]), "group[0].messages[9]='stray': not a chat message"),
    (lambda: turn_advantages([{"messages": CHAT, "workdir": 3}], [1.0]),
     "turn_advantages: group[0]: field 'workdir': expected str, got int"),
    (lambda: depgpo_turn_advantages([1.0], [[2.0, 2.0]]), "step_factors[0]=[2.0, 2.0]: mean 2; step factors are"),
    (lambda: depgpo_turn_advantages([1.0], [[2.0, -0.0, 1.0, -1.0]]), "a negative factor"),
    (lambda: depgpo_turn_advantages([1.0, 0.0], [[1.0]]), "step_factors has 1 lists for 2 rewards"),
    (lambda: turn_token_spans(CHAT), "give exactly one of token_counts= (tokens per message) and tokenize="),
    (lambda: turn_token_spans(CHAT, token_counts=[1, 2]), "token_counts has 2 values for 9 messages"),
    (lambda: turn_token_spans(CHAT, token_counts=[1] * 8 + [-1]), "token_counts[8]=-1: expected a token count"),
    (lambda: turn_token_spans({"messages": CHAT}, token_counts=[1]), "turn_token_spans: messages={'messages': [{...}, "
     "{...}, {...}, {...}, ...]}: expected a list of chat messages, got dict"),
    (lambda: mask_token_spans([0, 2]), "mask_token_spans: response_mask[1]=2: expected 0 or 1"),
    (lambda: token_advantages([1.0], [(0, 5)], 3), "spans[0]=(0, 5): spans must be in order, not overlap"),
    (lambda: token_advantages([1.0, 2.0], [(0, 2)], 3), "values has 2 entries for 1 spans"),
    (lambda: token_advantages([1.0, 2.0], [(0, 2), (1, 3)], 3), "spans[1]=(1, 3): spans must be in order"),
    (lambda: token_advantages([1.0], [(0, "2")], 3), "spans[0]=(0, '2'): expected (start, end), two integers"),
])
def test_bad_arguments_get_one_line_naming_them(call, message):
    with pytest.raises(ValueError) as raised:
        call()
    text = str(raised.value)
    assert message in text and "\n" not in text, text


# ---- the two defects of the issue, and the long-log numbers of the page -------------------------------------------

def test_step_factors_for_refuses_to_return_no_factors_for_an_unreadable_trajectory():
    with pytest.raises(ValueError, match=r"^step_factors_for: the trajectory cannot be read \(missing trace: "
                                         r"verifier: missing\) and num_turns is not given"):
        step_factors_for({"bogus": 1})
    assert step_factors_for({"bogus": 1}, num_turns=3) == ([1.0, 1.0, 1.0], "missing trace: verifier: missing")
    for bad in (-1, True, "3", 2.0, 10**12):
        with pytest.raises(ValueError, match=r"^step_factors_for: num_turns=.*: expected the rollout's number"):
            step_factors_for(NATIVE, num_turns=bad)


@pytest.mark.parametrize(("fields", "message"), [
    ({"factor_floor": "x"}, "credit.factor_floor: expected int or float, got 'x'"),
    ({"beta": None}, "credit.beta: expected int or float, got None"),
    ({"enabled": "yes"}, "credit.enabled: expected bool, got 'yes'"),
    ({"variant": 3}, "credit.variant: expected str, got 3"),
    ({"text_max_lines": 2.5}, "credit.text_max_lines: expected int, got 2.5"),
    ({"factor_floor": float("inf")}, "factor_floor must be a finite number >= 0, got inf"),
    ({"factor_floor": float("nan")}, "factor_floor must be a finite number >= 0, got nan"),
])
def test_credit_config_names_a_field_of_the_wrong_type(fields, message):
    with pytest.raises(ValueError) as raised:
        CreditConfig(**fields)
    assert str(raised.value) == message
    assert CreditConfig(beta=1, factor_floor=2) == CreditConfig(beta=1.0, factor_floor=2.0)  # an int is a number


def long_log(exploring: int) -> list[dict]:
    """`exploring` turns of `ls` that show nothing used later, the one write of the answer, and a final reply."""
    messages = [{"role": "user", "content": INSTRUCTION}]
    for number in range(exploring):
        messages += bash(f"ls -la /app/dir{number}", f"file{number}.txt", f"call_{number}")
    return messages + bash("wc -l < /app/data.txt > /app/answer.txt", "", "write") + [
        {"role": "assistant", "content": "Done."}]


def test_on_a_long_log_the_default_factors_put_everything_on_one_turn():
    log = long_log(36)
    assert assistant_turns(log) == 38
    ((factors,),) = [[credit.step_factors for credit in group_credit([log], [1.0])]]
    assert factors[36] == 38.0 and factors.count(0.0) == 37  # docs/extending.md#on-long-logs
    for alpha, credited, rest in ((0.25, 4.5238, 0.9048), (1.0, 1.9487, 0.9744)):
        (credit,) = group_credit([log], [1.0], config=CreditConfig(factor_floor=alpha))
        assert credit.step_factors[36] == pytest.approx(credited, abs=1e-4)
        assert credit.step_factors[0] == pytest.approx(rest, abs=1e-4)
        assert credit.step_factors[36] == pytest.approx(38 * (1 + alpha) / (38 * alpha + 1))
    (scaled,) = group_credit([log], [1.0], config=CreditConfig(factor_scale="max"))
    assert max(scaled.step_factors) == 38.0  # the max scale bounds nothing when the other turns have credit 0


@pytest.mark.parametrize("alpha", [0.05, 0.25, 1.0, 4.0])
def test_factor_floor_bounds_the_factors_at_any_length(alpha):
    rng = random.Random(alpha)
    for exploring in (0, 3, 36, 120):
        (credit,) = group_credit([long_log(exploring)], [1.0], config=CreditConfig(factor_floor=alpha))
        assert max(credit.step_factors) <= (1 + alpha) / alpha + 1e-12
        assert min(credit.step_factors) >= alpha / (1 + alpha) - 1e-12
    for _ in range(200):  # the bound is of the normalisation, whatever the turn credits
        from depgpo.credit.factors import step_factors
        factors, _ = step_factors([rng.choice([0.0, rng.random()]) for _ in range(rng.randint(2, 60))],
                                  CreditConfig(factor_floor=alpha))
        assert alpha / (1 + alpha) - 1e-12 <= min(factors) <= max(factors) <= (1 + alpha) / alpha + 1e-12
