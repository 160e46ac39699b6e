"""Read credit (docs/credit.md#read-credit): a command is a supporting read when its observation showed the agent a salient token
that a later credited command then used, in its command text or in the content it wrote.

Readings this module had to choose, beyond the definition's text:
- Incidental spans of an output (the clock, `ls -l` columns, version banners …) reveal nothing
  (config `incidental_rules`, credit/salience.py).
- A token shown by an earlier observation is not revealed again (config `reveal_once`): the first observation
  that shows it is the only source of information edges for it, unless (config `prefer_computed`) a later command
  before the use computed it, where the first one merely displayed it: then the latest such command is the source.
- A command's own text counts as earlier than its observation, so `echo 63841` reveals nothing.
- The escapes `\\n`, `\\t`, `\\r` inside command text (printf, echo -e) separate words, so the `VERSION` of
  `printf 'A\\nVERSION:2.0'` is the same word as the one `cat` later prints.
- A supporting read also passes β · q to the commands that wrote what it read (config `credit_read_sources`): the
  command that wrote `/tmp/find_slot.py` shares in the credit of running it.
- Information edges are followed only into commands with positive credit (an edge into a zero-credit command
  carries nothing), which is also all that `CreditResult.information_edges` lists.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from depgpo.credit.config import CreditConfig
from depgpo.credit.records import EpisodeRecords
from depgpo.credit.salience import displays_only, revealing_tokens, salient_tokens


@dataclass
class ReadCredit:
    info: list[float]
    q: list[float]  # q(c) = max(Contrib(c), info(c))
    information_edges: list[tuple[int, int]]  # (r, c): c used a token first revealed by r's observation


def read_credit(episode: EpisodeRecords, contrib: list[float], config: CreditConfig,
                dependency_edges: list[tuple[int, int]] = ()) -> ReadCredit:
    """`dependency_edges`: G's edges (w, r), r read what w wrote; with `credit_read_sources` a credited read
    command passes β · q(r) to each such w."""
    count = len(episode.commands)
    info, q, edges = [0.0] * count, [0.0] * count, []
    if config.variant == "no_read_credit":
        return ReadCredit(info, list(contrib), edges)
    revealers = _revealers(episode, config)
    writers_read: dict[int, set[int]] = defaultdict(set)
    if config.credit_read_sources:
        for writer, reader in dependency_edges:
            if not episode.commands[reader].is_write:  # into a write, G_E's indirect credit already flows
                writers_read[reader].add(writer)
    # Edges point forward in time: in reverse order q(c) is final before c passes β·q(c) back to its sources.
    for c in reversed(range(count)):
        q[c] = max(contrib[c], info[c])
        if q[c] <= 0:
            continue
        command = episode.commands[c]
        for r in sorted(_token_sources(command, c, revealers, config)):
            info[r] = max(info[r], config.beta * q[c])
            edges.append((r, c))
        for w in writers_read[c]:  # the script a supporting read ran, the data it showed
            info[w] = max(info[w], config.beta * q[c])
    return ReadCredit(info, q, edges)


def _revealers(episode: EpisodeRecords, config: CreditConfig) -> dict[str, list[tuple[int, bool]]]:
    """For every salient token, (index, computed) of each command whose observation showed it while the agent could
    not have known it: it was in neither the instruction nor any earlier command text. `computed`: the command ran
    a program other than a display tool (salience.displays_only)."""
    known = salient_tokens(episode.instruction, config)
    revealers: dict[str, list[tuple[int, bool]]] = defaultdict(list)
    for command in episode.commands:
        known |= salient_tokens(command.text, config)
        shown = revealing_tokens(command.observation, command.text, config) - known
        if shown:
            computed = not displays_only(command.text)
            for token in shown:
                revealers[token].append((command.index, computed))
    return revealers


def _token_sources(command, index: int, revealers: dict[str, list[tuple[int, bool]]],
                   config: CreditConfig) -> set[int]:
    """The commands whose outputs revealed a token that `command` (at `index`) uses in its text or written lines."""
    used = salient_tokens(command.text, config) | salient_tokens(command.written_text, config)
    return {r for token in used for r in _sources(revealers.get(token, ()), index, config, token)}


def _sources(revealers: list[tuple[int, bool]] | tuple, user: int, config: CreditConfig, token: str) -> list[int]:
    """The commands before `user` that revealed `token` to it: the first, unless a later one computed it where
    the first merely displayed it. Only a value counts as computed, a token with a digit (a slot, a count, a
    hash): an identifier a traceback prints again was displayed, not computed, by the program that printed it."""
    earlier = [(index, computed) for index, computed in revealers if index < user]
    if not earlier or not config.reveal_once:
        return [index for index, _ in earlier]
    first, first_computed = earlier[0]
    if config.prefer_computed and not first_computed and any(character.isdigit() for character in token):
        computing = [index for index, computed in earlier if computed]
        if computing:
            return [computing[-1]]
    return [first]


def candidate_edges(episode: EpisodeRecords, config: CreditConfig) -> set[tuple[int, int]]:
    """Every (r, c) whose token c uses r revealed, whatever c's credit: what the salience rules act on, counted on
    real logs by bench/credit_corpus.py (information edges proper enter only commands with positive credit)."""
    revealers = _revealers(episode, config)
    found = set()
    for c, command in enumerate(episode.commands):
        found |= {(r, c) for r in _token_sources(command, c, revealers, config)}
    return found
