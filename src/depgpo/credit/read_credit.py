"""Read credit (docs/credit.md#read-credit): a command is a supporting read when its observation showed the agent a salient token
that a later credited command then used, in its command text or in the content it wrote.

Readings this module had to choose, beyond the definition's text:
- A token shown by an earlier observation is not revealed again (config `reveal_once`): the first observation
  that shows it is the only source of information edges for it.
- A command's own text counts as earlier than its observation, so `echo 63841` reveals nothing.
- The escapes `\\n`, `\\t`, `\\r` inside command text (printf, echo -e) separate words, so the `VERSION` of
  `printf 'A\\nVERSION:2.0'` is the same word as the one `cat` later prints.
- Information edges are followed only into commands with positive credit (an edge into a zero-credit command
  carries nothing), which is also all that `CreditResult.information_edges` lists.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass

from depgpo.credit.config import CreditConfig
from depgpo.credit.records import EpisodeRecords

_ESCAPES = re.compile(r"\\[ntr]")


@dataclass
class ReadCredit:
    info: list[float]
    q: list[float]  # q(c) = max(Contrib(c), info(c))
    information_edges: list[tuple[int, int]]  # (r, c): c used a token first revealed by r's observation


def salient_tokens(text: str, config: CreditConfig) -> set[str]:
    is_salient = config.salient_regex.fullmatch
    return {word for word in set(config.token_regex.findall(_ESCAPES.sub(" ", text))) if is_salient(word)}


def read_credit(episode: EpisodeRecords, contrib: list[float], config: CreditConfig) -> ReadCredit:
    count = len(episode.commands)
    info, q, edges = [0.0] * count, [0.0] * count, []
    if config.variant == "no_read_credit":
        return ReadCredit(info, list(contrib), edges)
    revealers = _revealers(episode, config)
    # Edges point forward in time: in reverse order q(c) is final before c passes β·q(c) back to its sources.
    for c in reversed(range(count)):
        q[c] = max(contrib[c], info[c])
        if q[c] <= 0:
            continue
        command = episode.commands[c]
        used = salient_tokens(command.text, config) | salient_tokens(command.written_text, config)
        for r in sorted({r for token in used for r in revealers.get(token, ()) if r < c}):
            info[r] = max(info[r], config.beta * q[c])
            edges.append((r, c))
    return ReadCredit(info, q, edges)


def _revealers(episode: EpisodeRecords, config: CreditConfig) -> dict[str, list[int]]:
    """For every salient token, the commands whose observation revealed it: it was in neither the instruction nor
    any earlier command text (nor, with `reveal_once`, any earlier observation)."""
    known = salient_tokens(episode.instruction, config)
    revealers: dict[str, list[int]] = defaultdict(list)
    for command in episode.commands:
        known |= salient_tokens(command.text, config)
        revealed = salient_tokens(command.observation, config) - known
        for token in revealed:
            revealers[token].append(command.index)
        if config.reveal_once:
            known |= revealed
    return revealers
