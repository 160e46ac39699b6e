"""Settings of the credit module (the definition: docs/credit.md).

Every point the definition leaves to the implementation "decided here", and every further reading this implementation had to choose, is a
field with the paper's default (docs/credit-decisions.md), so a run can try the other reading from its Hydra config (`credit.*`).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property

from depgpo.credit.salience import INCIDENTAL_RULES
from depgpo.trajectory.scope import CACHE_DIR_NAMES, TEXT_MAX_BYTES, TEXT_MAX_LINES, UNTRACKED_PREFIXES

# The full method and the Table 2 ablations (docs/credit.md#ablations).
VARIANTS = ("full", "binary_write", "no_verifier_filter", "no_read_credit", "direct_only")


# Salient tokens (docs/credit.md#salient-tokens). A text is cut into words by TOKEN_PATTERN (no capturing groups); a word is salient when
# one of SALIENT_PATTERNS matches it whole.
TOKEN_PATTERN = r"[\w.~+/-]*\w"
SALIENT_PATTERNS = (
    r"[-+]?(?:\d{2,}|\d*\.\d+)(?:\.\d+)*",                    # number: at least 2 digits, or a decimal point
    r"(?:~|\.{1,2})?/.+|[\w.~+-]+/.+",                        # path-like: holds a slash
    r"(?=.{4})(?=.*(?:[\d_.-]|[a-z][A-Z]))[\w.~+-]+",          # identifier: >= 4 chars with a digit, _ - . or
)                                                            # an inner capital (camelCase, not ALLCAPS)


@dataclass(frozen=True)
class CreditConfig:
    beta: float = 0.5  # dependency-decay coefficient β of read credit (docs/credit.md#decay-per-hop, Table 9)
    indirect_decay: float = 1.0  # γ: indirect(c) = γ · max Contrib(w) over G_E edges c -> w (docs/credit.md#indirect-contribution)
    factor_floor: float = 0.0  # α in f_t = (α + q̃_t) / mean(α + q̃) (docs/credit.md#normalisation)
    variant: str = "full"  # one of VARIANTS (docs/credit.md#ablations)
    enabled: bool = True  # False: the credit module is off, every trajectory gets unit factors

    # Tracked scope (docs/credit.md#tracked-scope). None: the trajectory's own `tracked_roots` (else its `workdir`). Directories that hold
    # a verifier record are always added; an exclusion applies only beneath the deepest of these holding a path.
    tracked_roots: tuple[str, ...] | None = None
    untracked_prefixes: tuple[str, ...] = UNTRACKED_PREFIXES
    untracked_dir_names: tuple[str, ...] = CACHE_DIR_NAMES
    # A file one agent command wrote and a later one read is tracked wherever it lies (a script in /tmp the next
    # command runs), the exclusions aside (docs/credit-decisions.md#d-handoffs).
    track_handoffs: bool = True

    # Line-level tracking limits (docs/credit.md#line-level); a larger write is scored at record level even if the trace has lines.
    text_max_bytes: int = TEXT_MAX_BYTES
    text_max_lines: int = TEXT_MAX_LINES

    token_pattern: str = TOKEN_PATTERN
    salient_token_patterns: tuple[str, ...] = SALIENT_PATTERNS
    # Spans blanked in an output before its tokens count as revealed: the clock, `ls -l` columns, version banners …
    # (credit/salience.py, docs/credit-decisions.md#d-incidental); () keeps every salient token, as the paper's text.
    incidental_rules: tuple[str, ...] = tuple(INCIDENTAL_RULES)

    # Readings the definition leaves open (see the module docstrings of write_credit and read_credit):
    # binary_write: D_c holds only the E records whose content of c survived (False: every record of W(c) ∩ E).
    binary_requires_survival: bool = True
    # A token shown by an earlier observation is no longer "first revealed" (False: every observation that shows a
    # token absent from the instruction and from earlier command text is a source of information edges).
    reveal_once: bool = True
    # With reveal_once: a token that a later command computed (ran a program whose output showed it) is credited to
    # the latest such command before its use, rather than to an earlier command that merely displayed it (cat, grep).
    prefer_computed: bool = True
    # A supporting read passes β · q to the commands that wrote what it read, as G_E passes write credit back (the
    # command that wrote the script a credited read ran); False: reads pass credit only along information edges.
    credit_read_sources: bool = True
    # What a later write that rewrote a file whole (wrote every line it holds after) leaves of earlier writes:
    # "content" (the definition: lines still there, matched by content, survive; two identical rewrites both reach E)
    # or "reset" (it replaced the file as delete-and-recreate would: earlier writers' content is gone)
    # (docs/credit-decisions.md#d-rewrite).
    survival_after_rewrite: str = "content"
    # A command's reads in order with its own writes: a record it read only after it had replaced it whole itself
    # (`reads_after_write`: a heredoc written, then printed or run) is no read of what earlier commands wrote there;
    # False: a command's reads and writes are sets, every read is of the version the command found
    # (docs/credit-decisions.md#d-order).
    order_within_command: bool = True
    # q̃_t = (q_t - min q) / Δ ("range", docs/credit.md#normalisation) or q_t / max q ("max", the minimum turn keeps some weight).
    factor_scale: str = "range"
    # Δ = max q - min q at or below this gives unit factors (docs/credit.md#fallbacks, Table 4).
    min_credit_range: float = 1e-9

    def __post_init__(self) -> None:
        for spec in dataclasses.fields(self):  # a value of the wrong type fails here, naming its field
            if isinstance(spec.default, bool | int | float | str):
                _checked_type(spec.name, getattr(self, spec.name), spec.default)
        if self.variant not in VARIANTS:
            raise ValueError(f"unknown credit variant {self.variant!r}; valid: {', '.join(VARIANTS)}")
        if self.survival_after_rewrite not in ("content", "reset"):
            raise ValueError(f"unknown survival_after_rewrite {self.survival_after_rewrite!r}; valid: content, reset")
        if self.factor_scale not in ("range", "max"):
            raise ValueError(f"unknown factor_scale {self.factor_scale!r}; valid: range, max")
        for name in ("beta", "indirect_decay"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must lie in [0, 1], got {getattr(self, name)}")
        if not 0 <= self.factor_floor < math.inf:
            raise ValueError(f"factor_floor must be a finite number >= 0, got {self.factor_floor}")
        if self.text_max_bytes <= 0 or self.text_max_lines <= 0:
            raise ValueError("text_max_bytes and text_max_lines must be positive")
        try:  # compile now, so a bad pattern fails at construction, naming the key
            groups = self.token_regex.groups
        except re.error as error:
            raise ValueError(f"token_pattern {self.token_pattern!r} is not a regular expression: {error}") from error
        if groups:  # findall would return the groups instead of the words
            raise ValueError(f"token_pattern must have no capturing groups: {self.token_pattern!r}")
        try:
            self.salient_regex
        except re.error as error:
            raise ValueError(f"salient_token_patterns {list(self.salient_token_patterns)!r}: {error} (each must be a "
                             "regular expression; inline flags such as (?i) only at the start of the first)") from error
        unknown = [name for name in self.incidental_rules if name not in INCIDENTAL_RULES]
        if unknown:
            raise ValueError(f"unknown incidental_rules {unknown}; valid: {', '.join(INCIDENTAL_RULES)}")

    @cached_property
    def token_regex(self) -> re.Pattern:
        return re.compile(self.token_pattern)

    @cached_property
    def salient_regex(self) -> re.Pattern:
        return re.compile("|".join(f"(?:{pattern})" for pattern in self.salient_token_patterns))

    @classmethod
    def from_mapping(cls, mapping: Mapping) -> CreditConfig:
        """Build from a plain or OmegaConf mapping (`credit:` group); lists become tuples, unknown keys and values
        of the wrong type fail, naming the key."""
        defaults = {field.name: field.default for field in dataclasses.fields(cls)}
        unknown = sorted(set(mapping) - set(defaults))
        if unknown:
            raise ValueError(f"unknown credit config keys {unknown}; valid: {', '.join(sorted(defaults))}")
        values = {}
        for key, value in mapping.items():
            if not isinstance(value, str | bytes) and hasattr(value, "__iter__") and not isinstance(value, Mapping):
                value = tuple(value)
            values[key] = _checked_type(key, value, defaults[key])
        return cls(**values)

    @classmethod
    def from_overrides(cls, overrides: list[str]) -> CreditConfig:
        """`key=value` or `credit.key=value`, in the Hydra override grammar of the stages (`beta=0.25`,
        `reveal_once=false`, `incidental_rules=[date,clock_time]`, `tracked_roots=null`)."""
        from hydra.core.override_parser.overrides_parser import OverridesParser
        from hydra.errors import HydraException

        mapping = {}
        for text in overrides:
            try:
                (override,) = OverridesParser.create().parse_overrides([text])
            except HydraException as error:
                first_line = str(error).splitlines()[0] if str(error) else type(error).__name__
                raise ValueError(f"{text!r} is not a key=value override ({first_line})") from error
            mapping[override.key_or_group.removeprefix("credit.")] = override.value()
        return cls.from_mapping(mapping)


def _checked_type(key: str, value, default):
    """`value` for the field `key` whose default is `default`; an int where a float goes becomes a float."""
    if isinstance(default, bool) or isinstance(default, str):
        expected: tuple[type, ...] = (type(default),)
    elif isinstance(default, float):
        expected = (int, float)
    elif isinstance(default, int):
        expected = (int,)
    else:  # a tuple of strings, or None for "the trajectory's own"
        expected = (tuple,) if default is not None else (tuple, type(None))
    if isinstance(value, bool) and bool not in expected or not isinstance(value, expected):
        names = " or ".join("null" if t is type(None) else {"tuple": "list"}.get(t.__name__, t.__name__)
                            for t in expected)
        raise ValueError(f"credit.{key}: expected {names}, got {value!r}")
    if isinstance(value, tuple) and not all(isinstance(item, str) for item in value):
        raise ValueError(f"credit.{key}: expected a list of strings, got {list(value)!r}")
    return float(value) if isinstance(default, float) else value
