"""Hydra config composition for every pipeline stage: `config/config.yaml` + groups + `key=value` overrides.

We use Hydra's compose API rather than `@hydra.main`, so that stages keep their own command line (input and output
paths) and write only where Snakemake tells them to.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, ListConfig, OmegaConf

from depgpo.credit.config import CreditConfig

REPO_CONFIG_DIR = Path(__file__).resolve().parents[2] / "config"


def credit_default(key: str):
    """`${credit_default:KEY}` in config/method/base/common.yaml: CreditConfig's default of KEY, so that beta and the
    other credit knobs have one default, the dataclass's."""
    fields = {field.name: field for field in dataclasses.fields(CreditConfig)}
    if key not in fields or fields[key].default is dataclasses.MISSING:
        raise ConfigError(f"credit_default:{key}: CreditConfig has no such field with a default")
    default = fields[key].default
    # A tuple default becomes a ListConfig: a resolver's plain list or tuple cannot be resolved in place.
    return ListConfig(list(default)) if isinstance(default, tuple) else default


# Registered on import: every composition goes through this module (Hydra's compose resolves it lazily).
OmegaConf.register_new_resolver("credit_default", credit_default, replace=True)


def config_dir() -> Path:
    """`config/` of the repository (override with DEPGPO_CONFIG_DIR for an installed copy)."""
    path = Path(os.environ.get("DEPGPO_CONFIG_DIR", REPO_CONFIG_DIR))
    if not (path / "config.yaml").is_file():
        raise FileNotFoundError(f"{path}/config.yaml not found: run from a checkout of the repository or set "
                                "DEPGPO_CONFIG_DIR to its config/ directory")
    return path


def compose(overrides: list[str] | tuple[str, ...] = ()) -> DictConfig:
    """The composed, resolved and validated config. Unknown groups or options raise Hydra's own clear errors
    (e.g. `method=dpgpo` -> "Could not find 'method/dpgpo'", with the available options listed)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        cfg = hydra_compose(config_name="config", overrides=list(overrides))
    OmegaConf.resolve(cfg)
    validate(cfg)
    return cfg


def validate(cfg: DictConfig) -> None:
    """Every check of a composed config, once, before any stage reads or writes anything: the keys of VALUE_RANGES
    and value_choices(), then the keys that must agree (the method's, the grid's). Raises ConfigError (one line)."""
    from depgpo.algos.method_config import method_config_problem

    validate_values(cfg)
    problem = method_config_problem(cfg)
    if problem:
        raise ConfigError(problem)
    focal, settings = cfg.get("focal_setting"), cfg.get("settings")
    if focal is None or settings is None:
        return
    focal, settings = f"{focal.model}/{focal.data}", [f"{s.model}/{s.data}" for s in settings]
    if focal not in settings:
        raise ConfigError(f"focal_setting={focal} is not one of settings ({', '.join(settings)}); set focal_setting "
                          "to one of them (where the beta sweep and the ablations run)")


class ConfigError(ValueError):
    """A config value of the wrong type, out of range or not one of the valid values, or keys that disagree; the
    message is one line that names the key, what it accepts and the fix."""


@dataclass(frozen=True)
class Range:
    """What a numeric key accepts: its type (int, or float, which takes an int too), a closed or open interval, and
    special values outside it (`special`: value -> meaning, e.g. -1 -> "all"); `example` goes into the message."""

    kind: type
    example: int | float
    what: str
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    special: tuple[tuple[int | float, str], ...] = ()

    def problem(self, value) -> str | None:
        """Why `value` is not accepted, or None."""
        if self.kind is int:
            if isinstance(value, bool) or not isinstance(value, int):
                return "is not an integer"
        elif isinstance(value, bool) or not isinstance(value, (int, float)):
            return "is not a number"
        elif not math.isfinite(value):
            return "is not a finite number"
        if any(value == special for special, _ in self.special):
            return None
        below = self.low is not None and (value <= self.low if self.low_open else value < self.low)
        above = self.high is not None and (value >= self.high if self.high_open else value > self.high)
        if not (below or above):
            return None
        if self.low is not None and self.high is not None:
            bound = (f"must lie in {'(' if self.low_open else '['}{_number(self.low)}, {_number(self.high)}"
                     f"{')' if self.high_open else ']'}")
        elif self.low is not None:
            bound = f"must be {'>' if self.low_open else '>='} {_number(self.low)}"
        else:
            bound = f"must be {'<' if self.high_open else '<='} {_number(self.high)}"
        return bound + "".join(f", or {_number(special)} ({meaning})" for special, meaning in self.special)


@dataclass(frozen=True)
class Choice:
    """What a key with named values accepts: one of `values` (`many`: a list of them); `what` goes into the message,
    and the first value is the example."""

    values: tuple
    what: str
    many: bool = False

    def problem(self, value) -> str | None:
        """Why `value` is not accepted, or None."""
        if self.many and not (isinstance(value, list) or OmegaConf.is_list(value)):
            return "is not a list"
        items = value if self.many else [value]
        # the same type too: 1 is not true, 0.0 not false
        bad = [item for item in items if not any(type(item) is type(v) and item == v for v in self.values)]
        if not bad:
            return None
        valid = ", ".join(_written(v) for v in self.values)
        if self.many:
            return f"holds {', '.join(_shown(item) for item in bad)}, not one of {valid}"
        return f"is not one of {valid}"

    @property
    def example(self):
        return [self.values[0]] if self.many else self.values[0]


def _number(value: int | float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


# The numeric keys a user sets (config.yaml, method/*.yaml, scale/*.yaml), checked by `validate_values` at every
# composition, before any stage reads or writes anything. Keys a composition lacks (another model) are skipped.
# The keys with named values are value_choices() (their values come from the modules that use them).
ALL = ((-1, "all"),)
VALUE_RANGES: dict[str, Range] = {
    "seed": Range(int, 0, "the random seed", low=0),
    "torch_threads": Range(int, 1, "policy threads per stage", low=1),
    "agent.max_turns": Range(int, 6, "model turns per episode", low=1),
    "agent.max_turn_tokens": Range(int, 48, "tokens one model reply may take", low=1),
    "agent.max_context_tokens": Range(int, 1024, "prompt + turns + observations", low=1),
    "agent.observation_chars": Range(int, 400, "observation characters shown to the model", low=0),
    "agent.temperature": Range(float, 1.0, "sampling temperature, 0 greedy", low=0),
    "agent.top_p": Range(float, 1.0, "nucleus sampling mass", low=0, high=1, low_open=True),
    "agent.command_timeout_s": Range(float, 1, "seconds a command may run", low=0, low_open=True),
    "agent.workers": Range(int, 2, "episodes whose commands run side by side", low=1),
    "agent.decode_batch": Range(int, 32, "rollouts whose turns are decoded as one batch", low=1),
    "agent.decode_groups": Range(int, 2, "groups of a batch, one decoding while the others' commands run", low=1),
    "rollout.vllm.tensor_parallel_size": Range(int, 1, "GPUs per vLLM server", low=1),
    "rollout.vllm.gpu_memory_utilization": Range(float, 0.85, "share of GPU memory vLLM takes", low=0, high=1,
                                                 low_open=True),
    "rollout.vllm.max_num_seqs": Range(int, 256, "sequences one vLLM server batches", low=1),
    "rollout.vllm.cpu_kv_cache_gb": Range(int, 1, "vLLM CPU build's KV cache, whole GiB", low=1),
    "agent.environment.disk_bytes": Range(int, 2 << 30, "bytes all of an episode's files may take", low=1 << 20),
    "agent.environment.disk_inodes": Range(int, 1_000_000, "files an episode may create", low=1000),
    "actor.clip_ratio_low": Range(float, 0.2, "PPO clip below 1", low=0),
    "actor.clip_ratio_high": Range(float, 0.2, "PPO clip above 1", low=0),
    "actor.clip_ratio_c": Range(float, 3.0, "dual-clip bound", low=1, low_open=True),
    "actor.entropy_coeff": Range(float, 0.0, "entropy bonus", low=0),
    "actor.kl_loss_coef": Range(float, 0.001, "KL loss weight", low=0),
    "rl.tasks_per_update": Range(int, 4, "tasks per update", low=1),
    "rl.k": Range(int, 8, "rollouts per task", low=1),
    "rl.updates": Range(int, 150, "RL updates", low=1),
    "rl.lr": Range(float, 5e-4, "AdamW learning rate", low=0),
    "rl.weight_decay": Range(float, 0.0, "AdamW weight decay", low=0),
    "rl.grad_clip": Range(float, 1.0, "gradient-norm clip", low=0, low_open=True),
    "rl.checkpoint_every": Range(int, 2, "updates between checkpoints", low=1),
    "rl.ppo_epochs": Range(int, 1, "optimizer steps per update", low=1),
    "rl.train_max_tasks": Range(int, -1, "training tasks used", low=1, special=ALL),
    "sft.threads": Range(int, 2, "policy threads of the local SFT stage", low=1),
    "sft.epochs": Range(int, 60, "passes over the conversations", low=0),
    "sft.lr": Range(float, 3e-3, "AdamW learning rate", low=0),
    "sft.batch_size": Range(int, 8, "conversations per step", low=1),
    "sft.max_seq_len": Range(int, 768, "tokens per conversation", low=1),
    "sft.weight_decay": Range(float, 0.0, "AdamW weight decay", low=0),
    "sft.grad_clip": Range(float, 1.0, "gradient-norm clip, 0 off", low=0),
    "sft.warmup_steps": Range(int, 50, "steps of linear lr warm-up (cosine schedule)", low=0),
    "sft.copy.steps": Range(int, 800, "copying steps before SFT", low=0),
    "sft.copy.batch": Range(int, 64, "strings per copying step", low=1),
    "sft.copy.lr": Range(float, 1e-3, "copying steps' AdamW learning rate", low=0),
    "sft.copy.mix": Range(float, 0.25, "share of SFT steps followed by a copying step", low=0, high=1),
    "sft.copy.recall": Range(float, 0.5, "share of a copying batch that is key-value recall", low=0, high=1),
    "sft.checkpoint_every": Range(int, 1000, "verl SFT steps between checkpoints", low=1,
                                  special=((-1, "at the end"),)),
    "sft_data.variants": Range(int, 2, "conversations per task", low=1),
    "sft_data.incomplete": Range(int, 0, "conversations per task that stop short", low=0),
    "filter.attempts": Range(int, 4, "attempts per candidate task", low=2),
    "filter.val_fraction": Range(float, 0.1, "share of the selected tasks held out", low=0, high=1, high_open=True),
    "eval.rounds": Range(int, 3, "evaluation rounds", low=1),
    "counterfactual.per_outcome": Range(int, 8, "DepGPO rollouts of each outcome replayed for the credit scores",
                                        low=0),
    "eval.temperature": Range(float, 1.0, "sampling temperature, 0 greedy", low=0),
    "algorithm.gigpo.omega": Range(float, 1.0, "weight of GiGPO's step advantage", low=0),
    "algorithm.gigpo.gamma": Range(float, 0.95, "GiGPO's discount", low=0, high=1),
    "algorithm.filter_groups.max_num_gen_batches": Range(int, 10, "DAPO's generation batches per update", low=0),
    "algorithm.overlong.buffer_len": Range(int, 2048, "DAPO's overlong buffer", low=0),
    "algorithm.overlong.penalty_factor": Range(float, 1.0, "DAPO's overlong penalty", low=0),
    "algorithm.overlong.max_resp_len": Range(int, 8192, "DAPO's response length", low=1),
    "credit.beta": Range(float, CreditConfig.beta, "dependency decay per read hop", low=0, high=1),
    "credit.indirect_decay": Range(float, CreditConfig.indirect_decay, "indirect write decay", low=0, high=1),
    "credit.factor_floor": Range(float, CreditConfig.factor_floor, "step-factor floor", low=0),
    "tasks.pool": Range(int, 16, "generated candidate tasks", low=0),
    "tasks.sft": Range(int, 320, "generated tasks whose oracle runs are the SFT data", low=0),
    "tasks.test": Range(int, 2, "generated tasks per test set", low=0),
    "launcher.signal_delay_s": Range(int, 120, "seconds of warning before the time limit", low=0),
    "launcher.max_requeues": Range(int, 3, "requeues of a preempted job", low=0),
}
_ABSENT = object()
BACKENDS_OF_STAGES = ("local", "verl")  # sft.backend and rl.backend
FLAG = (True, False)


@functools.cache
def value_choices() -> dict[str, Choice]:
    """The keys with named values, each with what it accepts (imported here: the modules that use them are heavy)."""
    from depgpo.algos.advantages import GIGPO_MODES
    from depgpo.algos.losses import POLICY_LOSSES
    from depgpo.algos.methods import methods
    from depgpo.credit.config import VARIANTS
    from depgpo.env.images.backend import BACKENDS, RUNTIMES
    from depgpo.env.judging.tampering import TAMPERING_POLICIES
    from depgpo.env.sandbox.privilege import PRIVILEGES
    from depgpo.tasks.task import VERIFIER_VIEWS

    declared = tuple(methods())
    return {
        "method.name": Choice(declared, "the compared method; select it with method=NAME"),
        "algorithm.norm_adv_by_std": Choice(FLAG, "divide the group advantage by its std"),
        "algorithm.gigpo.mode": Choice(GIGPO_MODES, "GiGPO's normalisation of both terms"),
        "algorithm.filter_groups.enable": Choice(FLAG, "DAPO's dynamic sampling"),
        "algorithm.overlong.enable": Choice(FLAG, "DAPO's overlong reward shaping"),
        "actor.policy_loss": Choice(POLICY_LOSSES, "verl's policy loss"),
        "actor.use_kl_loss": Choice(FLAG, "KL loss to the reference policy"),
        "credit.enabled": Choice(FLAG, "the credit module; off: unit step factors"),
        "credit.variant": Choice(VARIANTS, "full DepGPO or a Table 2 ablation; select it with ablation=NAME"),
        "sft.schedule": Choice(("constant", "cosine"), "SFT's lr: constant, or cosine after sft.warmup_steps"),
        "sft.backend": Choice(BACKENDS_OF_STAGES, "local: one process, CPU or one GPU; verl: verl's trainer, GPUs"),
        "rollout.backend": Choice(("local", "vllm"), "filtering and evaluation: local: the checkpoint in the "
                                                     "stage's process; vllm: vLLM servers (verl's server manager)"),
        "rollout.vllm.dtype": Choice(("auto", "bfloat16", "float16", "float32"), "vLLM's weights; auto: the "
                                                                                  "model config's dtype"),
        "rollout.vllm.enforce_eager": Choice(FLAG, "vLLM without CUDA graphs"),
        "rl.backend": Choice(BACKENDS_OF_STAGES, "local: one process, CPU or one GPU; verl: verl's trainer, GPUs"),
        "agent.environment.backend": Choice(BACKENDS, "auto: the host where it stands for the task's image, "
                                                      "else the image; host: this machine's system directories; "
                                                      "image: each task's container image"),
        "agent.environment.runtime": Choice(("auto", *RUNTIMES), "the image backend's container runtime; auto: "
                                                                 "the first on PATH"),
        "agent.environment.tampering": Choice(TAMPERING_POLICIES, "zero: an episode whose verifier ran "
                                                                  "agent-planted code earns 0; keep: recorded only"),
        "agent.environment.verifier_view": Choice(("task", *VERIFIER_VIEWS), "what the verifier sees of the "
                                                  "agent's work: image (its workdir), full, or task (the task's "
                                                  "[verifier] view; docs/threat-model.md#the-verifiers-view)"),
        "agent.environment.pin_cpu": Choice(FLAG, "pin each episode to a CPU of the job's that no other holds, "
                                                  "while one is free; false: episodes float "
                                                  "(docs/benchmarks.md#pinning)"),
        "agent.environment.privilege": Choice(PRIVILEGES, "the sandbox; auto: root when run as root, else "
                                                          "rootless (docs/sandbox.md#privilege)"),
        "launcher.cluster": Choice((None, "slurm", "local", "debug"), "submitit's executor; null: Slurm where "
                                                                      "sbatch exists, else a local process"),
        "methods": Choice(declared, "the compared methods", many=True),
        "ablations": Choice(tuple(v for v in VARIANTS if v != "full"), "the Table 2 ablations of DepGPO", many=True),
        "controls": Choice(tuple(CONTROL_RUNS), "RL runs that are not methods", many=True),
        "interval_seeds.runs": Choice((*declared, *CONTROL_RUNS), "runs trained in interval_seeds.seeds "
                                                                            "instead of seeds", many=True),
    }


def validate_values(cfg: DictConfig) -> None:
    """Raise ConfigError, one line naming the key, what it accepts and an example, for the first key of VALUE_RANGES
    or value_choices() of the wrong type, out of range or not one of the valid values, e.g.
    "rl.lr='abc' is not a number; set rl.lr=<float> (AdamW learning rate), e.g. rl.lr=0.0005"."""
    for key, accepted in {**VALUE_RANGES, **value_choices()}.items():
        value = OmegaConf.select(cfg, key, default=_ABSENT)
        if value is _ABSENT:
            continue
        problem = accepted.problem(value)
        if problem is None:
            continue
        example = f"{key}={_written(accepted.example)}"
        if isinstance(accepted, Range) and problem.startswith("is not"):  # the wrong type
            message = f"{key}={_shown(value)} {problem}; set {key}=<{accepted.kind.__name__}> ({accepted.what}), " \
                      f"e.g. {example}"
        else:
            message = f"{key}={_shown(value)} {problem} ({accepted.what}), e.g. {example}"
        raise ConfigError(message)


def _written(value) -> str:
    """A value as an override writes it: null, true, 3, 0.5, abc, [a, b]."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) or OmegaConf.is_list(value):
        return f"[{', '.join(_written(item) for item in value)}]"
    return _shown(value)


def _shown(value) -> str:
    """A value as an error message shows what was given: null, true, 3, 0.5, 'abc' (quoted, so that '' shows)."""
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, (int, float)) and math.isfinite(value):
        return _number(value)
    if isinstance(value, list) or OmegaConf.is_list(value):
        return f"[{', '.join(_shown(item) for item in value)}]"
    return repr(value) if isinstance(value, str) else str(value)


def run_name(cfg: DictConfig) -> str:
    """results/ run directory name: the method, then the β of a sweep point or the ablation variant (parse_run
    reads it back)."""
    from depgpo.algos.methods import method

    name = cfg.method.name
    if not method(name).credit_ablations:
        return name
    if cfg.credit.variant != "full":
        return f"{name}_{cfg.credit.variant}"
    if float(cfg.credit.beta) != CreditConfig.beta:
        return f"{name}{BETA_INFIX}{cfg.credit.beta}"
    return name


BETA_INFIX = "_beta"  # {method}_beta{β}: a β-sweep run


def sweep_runs(cfg: DictConfig) -> list[str]:
    """The runs of the beta sweep (`betas`, but the default beta: that is full DepGPO) and of the ablations."""
    return [f"depgpo{BETA_INFIX}{beta}" for beta in cfg.betas if float(beta) != CreditConfig.beta] + \
        [f"depgpo_{variant}" for variant in cfg.ablations]


# Control runs (config `controls`), not methods: `frozen` samples GRPO's draws with the SFT policy and never changes it
# (lr 0), so a method's training reward can be read against the same tasks and sampling seeds (Figure 5a).
CONTROL_RUNS = {"frozen": ["method=grpo", "rl.lr=0"]}


@dataclass(frozen=True)
class Run:
    """What a run name (a results directory, a Snakemake target) means; the one place run names are parsed."""

    name: str
    method: str                 # the declared method it trains (depgpo.algos.methods)
    beta: float | None = None   # a β-sweep run: credit.beta
    ablation: str | None = None  # an ablation run: credit.variant
    control: bool = False       # not a method: config `controls`

    @property
    def overrides(self) -> list[str]:
        """The config overrides that reproduce the run."""
        if self.control:
            return list(CONTROL_RUNS[self.name])
        if self.beta is not None:
            return [f"method={self.method}", f"credit.beta={self.name.rsplit(BETA_INFIX, 1)[1]}"]
        if self.ablation is not None:
            return [f"method={self.method}", f"ablation={self.ablation}"]
        return [f"method={self.method}"]

    def credit(self) -> CreditConfig | None:
        """The credit the run trains with, for a method with credit ablations (DepGPO); None otherwise."""
        from depgpo.algos.methods import method

        if self.control or not method(self.method).credit_ablations:
            return None
        if self.beta is not None:
            return CreditConfig(beta=self.beta)
        return CreditConfig(variant=self.ablation) if self.ablation is not None else CreditConfig()


def parse_run(name: str) -> Run:
    """The Run a name stands for: a method (`grpo`), a β run (`depgpo_beta0.25`), an ablation (`depgpo_direct_only`)
    or a control (`frozen`). A name it cannot place raises ValueError naming the forms it knows."""
    from depgpo.algos.methods import methods
    from depgpo.credit.config import VARIANTS

    declared = methods()
    if name in CONTROL_RUNS:
        return Run(name, "grpo", control=True)
    if name in declared:
        return Run(name, name)
    for method_name, declared_method in declared.items():
        if not declared_method.credit_ablations or not name.startswith(method_name + "_"):
            continue
        rest = name.removeprefix(method_name + "_")
        if rest.startswith(BETA_INFIX[1:]):
            try:
                return Run(name, method_name, beta=float(rest.removeprefix(BETA_INFIX[1:])))
            except ValueError:
                pass
        if rest in VARIANTS and rest != "full":
            return Run(name, method_name, ablation=rest)
    raise ValueError(f"run {name!r} is none of: a method ({', '.join(declared)}), a β run (depgpo{BETA_INFIX}0.25), "
                     f"an ablation (depgpo_VARIANT, VARIANT one of {', '.join(v for v in VARIANTS if v != 'full')}) "
                     f"or a control ({', '.join(CONTROL_RUNS)})")


def run_overrides(run: str) -> list[str]:
    """The config overrides that reproduce a run name (inverse of `run_name`, and the control runs)."""
    return parse_run(run).overrides
