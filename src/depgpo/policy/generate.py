"""Turn-by-turn generation for the agent loop, with the token accounting RL needs.

    policy = Policy(model, tokenizer, max_turn_tokens=128, temperature=1.0, top_p=1.0, observation_chars=1000)
    ctx = policy.start(instruction)
    turn = policy.next_turn(ctx, rng_seed=7)        # turn.command: str, None (<done/>) or ParseError
    policy.observe(ctx, output, exit_code)          # after running turn.command in the sandbox
    turns = policy.next_turns([ctx1, ctx2], rng_seeds=[7, 8])   # one turn of each, decoded together

`Context` holds the episode in verl's multi-turn layout (AgentLoopOutput): `prompt_ids`, then `response_ids` with
`response_mask` 1 on tokens the model sampled and 0 on template and observation tokens, `response_logprobs`
(0.0 where the mask is 0) and `turn_ids` (the turn of each sampled token, -1 elsewhere). Each maximal run of 1s in
the mask is exactly one turn.

Sampling re-encodes the whole context at the start of every turn, then extends a KV cache token by token: simple,
and cheap next to running the command. `next_turns` decodes the turns of several contexts as one batch (left-padded,
one forward per token for the sequences still running), each with its own seeded generator: a rollout's draws do not
depend on which others share its batch, and its tokens only as far as batched arithmetic rounds differently.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from depgpo.policy.chat import IM_END, ParseError, parse_assistant, render_observation, render_prompt


def tokenize(tokenizer: PreTrainedTokenizerBase, text: str) -> list[int]:
    """Token ids of one chat segment; segments are tokenized apart and concatenated, in SFT as in generation."""
    return tokenizer.encode(text, add_special_tokens=False)


@dataclass
class Context:
    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    response_mask: list[int] = field(default_factory=list)
    response_logprobs: list[float] = field(default_factory=list)
    turn_ids: list[int] = field(default_factory=list)
    num_turns: int = 0

    @property
    def token_ids(self) -> list[int]:
        return self.prompt_ids + self.response_ids

    def add_turn(self, token_ids: list[int], logprobs: list[float]) -> None:
        self.response_ids += token_ids
        self.response_mask += [1] * len(token_ids)
        self.response_logprobs += logprobs
        self.turn_ids += [self.num_turns] * len(token_ids)
        self.num_turns += 1

    def add_context(self, token_ids: list[int]) -> None:
        """Tokens the model did not sample (template, observations): in the context, never trained on."""
        self.response_ids += token_ids
        self.response_mask += [0] * len(token_ids)
        self.response_logprobs += [0.0] * len(token_ids)
        self.turn_ids += [-1] * len(token_ids)


@dataclass
class TurnOutput:
    token_ids: list[int]
    logprobs: list[float]   # of each sampled token under the sampling distribution (see Policy)
    text: str
    command: str | None | ParseError


class Policy:
    """Samples one assistant turn at a time, up to <|im_end|> or max_turn_tokens.

    Logprobs are those of softmax(logits / temperature), the distribution `sequence_logprobs` recomputes for the
    loss; top-p only restricts which tokens can be drawn (as in verl). temperature=0 decodes greedily and reports
    the model's own (temperature 1) logprobs.
    """

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, max_turn_tokens: int = 256,
                 temperature: float = 1.0, top_p: float = 1.0, observation_chars: int = 1000):
        self.model, self.tokenizer = model, tokenizer
        self.max_turn_tokens, self.temperature, self.top_p = max_turn_tokens, temperature, top_p
        self.observation_chars = observation_chars
        self.stop_id = tokenizer.convert_tokens_to_ids(IM_END)

    def start(self, instruction: str) -> Context:
        return Context(prompt_ids=tokenize(self.tokenizer, render_prompt(instruction)))

    def next_turn(self, ctx: Context, rng_seed: int) -> TurnOutput:
        return self._add_turn(ctx, *self.generate(ctx.token_ids, rng_seed))

    def next_turns(self, contexts: list[Context], rng_seeds: list[int]) -> list[TurnOutput]:
        """One turn for each context, generated together (`generate_batch`)."""
        generated = self.generate_batch([ctx.token_ids for ctx in contexts], rng_seeds)
        return [self._add_turn(ctx, token_ids, logprobs) for ctx, (token_ids, logprobs) in zip(contexts, generated)]

    def _add_turn(self, ctx: Context, token_ids: list[int], logprobs: list[float]) -> TurnOutput:
        ctx.add_turn(token_ids, logprobs)
        if token_ids[-1] != self.stop_id:
            ctx.add_context([self.stop_id])  # close a cut-off turn, so the context stays well-formed ChatML
        text = self.tokenizer.decode(token_ids, skip_special_tokens=False)
        return TurnOutput(token_ids, logprobs, text, parse_assistant(text))

    def observe(self, ctx: Context, observation: str, exit_code: int | None) -> None:
        ctx.add_context(tokenize(self.tokenizer, render_observation(observation, exit_code, self.observation_chars)))

    def generate(self, context_ids: list[int], rng_seed: int) -> tuple[list[int], list[float]]:
        """One assistant turn's tokens and their logprobs (the backend: subclasses may ask a server instead)."""
        return self._sample(context_ids, torch.Generator(device=self.model.device).manual_seed(rng_seed))

    def generate_batch(self, contexts: list[list[int]], rng_seeds: list[int]) -> list[tuple[list[int], list[float]]]:
        """`generate` for several contexts at once: one batched forward pass per token (subclasses that ask a server
        send the requests together instead)."""
        if len(contexts) == 1:
            return [self.generate(contexts[0], rng_seeds[0])]
        generators = [torch.Generator(device=self.model.device).manual_seed(seed) for seed in rng_seeds]
        return self._sample_batch(contexts, generators)

    @torch.inference_mode()
    def _sample(self, context_ids: list[int], generator: torch.Generator) -> tuple[list[int], list[float]]:
        device = self.model.device
        output = self.model(input_ids=torch.tensor([context_ids], device=device), use_cache=True, logits_to_keep=1)
        token_ids: list[int] = []
        logprobs: list[float] = []
        while True:
            token, logprob = self._draw(output.logits[0, -1].float(), generator)
            token_ids.append(token)
            logprobs.append(logprob)
            if token == self.stop_id or len(token_ids) == self.max_turn_tokens:
                return token_ids, logprobs
            output = self.model(input_ids=torch.tensor([[token]], device=device),
                                past_key_values=output.past_key_values, use_cache=True)

    @torch.inference_mode()
    def _sample_batch(self, contexts: list[list[int]], generators: list[torch.Generator]
                      ) -> list[tuple[list[int], list[float]]]:
        """Left-padded contexts decoded together; a row leaves the batch (and its KV cache) when its turn ends."""
        device, width = self.model.device, max(len(c) for c in contexts)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.stop_id
        input_ids = torch.full((len(contexts), width), pad, dtype=torch.long)
        attention = torch.zeros((len(contexts), width), dtype=torch.long)
        for row, context in enumerate(contexts):
            input_ids[row, width - len(context):] = torch.tensor(context)
            attention[row, width - len(context):] = 1
        positions = (attention.cumsum(1) - 1).clamp(min=0)  # each row's positions as if it were alone
        attention, positions = attention.to(device), positions.to(device)
        output = self.model(input_ids=input_ids.to(device), attention_mask=attention, position_ids=positions,
                            use_cache=True, logits_to_keep=1)
        cache, logits = output.past_key_values, output.logits[:, -1].float()
        next_position = positions[:, -1:] + 1
        results: list[tuple[list[int], list[float]]] = [([], []) for _ in contexts]
        running = list(range(len(contexts)))  # rows still decoding, in the order of the batch's rows
        while True:
            tokens, keep = [], []
            for row_in_batch, row in enumerate(running):
                token, logprob = self._draw(logits[row_in_batch], generators[row])
                results[row][0].append(token)
                results[row][1].append(logprob)
                if token != self.stop_id and len(results[row][0]) < self.max_turn_tokens:
                    tokens.append(token)
                    keep.append(row_in_batch)
            if not keep:
                return results
            if len(keep) < len(running):  # drop the finished rows from everything the next step reads
                index = torch.tensor(keep, device=device)
                cache.batch_select_indices(index)
                attention, next_position = attention[index], next_position[index]
                running = [running[i] for i in keep]
            attention = torch.cat([attention, attention.new_ones((len(running), 1))], dim=1)
            output = self.model(input_ids=torch.tensor([[t] for t in tokens], device=device), attention_mask=attention,
                                position_ids=next_position, past_key_values=cache, use_cache=True)
            cache, logits, next_position = output.past_key_values, output.logits[:, -1].float(), next_position + 1

    def _draw(self, logits: torch.Tensor, generator: torch.Generator) -> tuple[int, float]:
        if self.temperature == 0:
            token = int(logits.argmax())
            return token, float(torch.log_softmax(logits, dim=-1)[token])
        logprobs = torch.log_softmax(logits / self.temperature, dim=-1)
        probs = logprobs.exp()
        if self.top_p < 1.0:
            sorted_probs, order = probs.sort(descending=True)
            # Keep the smallest set of most likely tokens whose mass reaches top_p.
            sorted_probs[sorted_probs.cumsum(0) - sorted_probs >= self.top_p] = 0.0
            probs = torch.zeros_like(probs).scatter(0, order, sorted_probs)
        token = int(torch.multinomial(probs, 1, generator=generator))
        return token, float(logprobs[token])


def make_policy(model, tokenizer, cfg, temperature: float | None = None) -> Policy:
    """The sampling policy of a stage, from the composed config's `agent:` section."""
    return Policy(model, tokenizer, max_turn_tokens=cfg.agent.max_turn_tokens,
                  temperature=cfg.agent.temperature if temperature is None else temperature,
                  top_p=cfg.agent.top_p, observation_chars=cfg.agent.observation_chars)


def response_logits(model: PreTrainedModel, prompt_ids: list[int], response_ids: list[int]) -> torch.Tensor:
    """(len(response_ids), vocab) logits that predict each response token; with gradients (one forward pass)."""
    input_ids = torch.tensor([prompt_ids + response_ids], device=model.device)
    return model(input_ids=input_ids, logits_to_keep=len(response_ids) + 1).logits[0, :-1]


def logprobs_from_logits(logits: torch.Tensor, token_ids: list[int] | torch.Tensor,
                         temperature: float = 1.0) -> torch.Tensor:
    token_ids = torch.as_tensor(token_ids, device=logits.device)
    return torch.log_softmax(logits.float() / temperature, dim=-1).gather(-1, token_ids.unsqueeze(-1)).squeeze(-1)


def sequence_logprobs(model: PreTrainedModel, prompt_ids: list[int], response_ids: list[int],
                      temperature: float = 1.0) -> torch.Tensor:
    """Log-probability of every response token under the current model (observation tokens included: mask them)."""
    return logprobs_from_logits(response_logits(model, prompt_ids, response_ids), response_ids, temperature)
