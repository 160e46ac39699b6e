"""The method and ablation config groups compose under Hydra, each method file states only what differs from
method/base/common.yaml, and depgpo.config.validate guards them."""

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import MissingConfigException
from omegaconf import OmegaConf

from depgpo.algos.method_config import method_config_problem, method_estimators
from depgpo.config import ConfigError, validate  # registers credit_default, which the compositions below use
from depgpo.credit.config import VARIANTS as CREDIT_VARIANTS
from depgpo.credit.config import CreditConfig
from tests.helpers import REPO

CONFIG_DIR = REPO / "config"
METHODS = ["grpo", "dapo", "dppo", "gigpo", "depgpo"]
ABLATIONS = {
    "none": "full",
    "binary_write": "binary_write",
    "no_verifier_filter": "no_verifier_filter",
    "no_read_credit": "no_read_credit",
    "direct_only": "direct_only",
}
METHOD_SECTIONS = ("method", "algorithm", "actor", "credit", "rl")


@pytest.fixture(scope="module")
def config_dir() -> Path:
    return CONFIG_DIR


def compose_config(config_dir: Path, *overrides: str):
    with initialize_config_dir(config_dir=str(config_dir), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


def method_sections(cfg) -> dict:
    return {section: OmegaConf.to_container(cfg[section]) for section in METHOD_SECTIONS}


def key_paths(tree: dict, prefix: str = "") -> set[str]:
    paths = set()
    for key, value in tree.items():
        paths.add(prefix + key)
        if isinstance(value, dict):
            paths |= key_paths(value, f"{prefix}{key}.")
    return paths


def test_config_groups_hold_exactly_the_methods_and_ablations():
    assert sorted(p.stem for p in (CONFIG_DIR / "method").glob("*.yaml")) == sorted(METHODS)
    assert sorted(p.stem for p in (CONFIG_DIR / "ablation").glob("*.yaml")) == sorted(ABLATIONS)
    assert sorted(METHODS) == sorted(method_estimators())
    assert sorted(ABLATIONS.values()) == sorted(CREDIT_VARIANTS)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("ablation", ABLATIONS)
def test_every_method_and_ablation_composes(config_dir, method, ablation):
    cfg = compose_config(config_dir, f"method={method}", f"ablation={ablation}")
    assert cfg.method.name == method
    assert cfg.credit.variant == ABLATIONS[ablation]
    if method == "depgpo" or ablation == "none":
        validate(cfg)
    else:
        with pytest.raises(ConfigError, match="only applies to method 'depgpo'"):
            validate(cfg)


def test_the_default_is_full_depgpo(config_dir):
    cfg = compose_config(config_dir)
    assert (cfg.method.name, cfg.credit.variant, cfg.credit.enabled, cfg.credit.beta) == ("depgpo", "full", True, 0.5)


def test_the_credit_knobs_have_the_dataclass_defaults(config_dir):
    """One default each (beta included): CreditConfig's, which the base method file reads through credit_default."""
    credit = compose_config(config_dir).credit
    for key in ("variant", "beta", "indirect_decay", "factor_floor"):
        assert credit[key] == getattr(CreditConfig, key), key
    assert compose_config(config_dir, "credit.beta=0.25").credit.beta == 0.25


@pytest.mark.parametrize(
    "method, estimator, loss, clip_low, clip_high, clip_c, filter_groups, overlong, credit",
    [
        ("grpo", "grpo", "vanilla", 0.2, 0.2, 3.0, False, False, False),
        ("dapo", "grpo", "vanilla", 0.2, 0.28, 10.0, True, True, False),
        ("dppo", "grpo", "dppo_tv", 0.2, 0.2, 20.0, False, False, False),
        ("gigpo", "gigpo", "vanilla", 0.2, 0.2, 3.0, False, False, False),
        ("depgpo", "depgpo", "vanilla", 0.2, 0.2, 3.0, False, False, True),
    ],
)
def test_method_settings(
    config_dir, method, estimator, loss, clip_low, clip_high, clip_c, filter_groups, overlong, credit
):
    cfg = compose_config(config_dir, f"method={method}")
    assert cfg.algorithm.adv_estimator == estimator
    assert (cfg.actor.policy_loss, cfg.actor.clip_ratio_low, cfg.actor.clip_ratio_high) == (loss, clip_low, clip_high)
    assert cfg.actor.clip_ratio_c == clip_c
    assert cfg.actor.loss_agg_mode == "token-mean"
    assert (cfg.algorithm.filter_groups.enable, cfg.algorithm.overlong.enable) == (filter_groups, overlong)
    assert cfg.credit.enabled == credit


def test_gigpo_and_dapo_details(config_dir):
    gigpo = compose_config(config_dir, "method=gigpo").algorithm.gigpo
    assert (gigpo.omega, gigpo.gamma, gigpo.mode) == (1.0, 0.95, "mean_std_norm")
    dapo = compose_config(config_dir, "method=dapo").algorithm
    assert (dapo.filter_groups.metric, dapo.filter_groups.max_num_gen_batches) == ("reward", 10)
    assert dapo.overlong.buffer_len < dapo.overlong.max_resp_len


def leaves(tree: dict, prefix: str = "") -> dict:
    """Every leaf of a nested dict by its dotted key."""
    found = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            found |= leaves(value, f"{prefix}{key}.")
        else:
            found[prefix + key] = value
    return found


@pytest.mark.parametrize("method", METHODS)
def test_a_method_file_states_only_what_differs_from_the_base(method):
    own = OmegaConf.to_container(OmegaConf.load(CONFIG_DIR / "method" / f"{method}.yaml"))
    assert own.pop("defaults") == ["base/common", "_self_"]
    base = leaves(OmegaConf.to_container(OmegaConf.load(CONFIG_DIR / "method" / "base" / "common.yaml")))
    restated = {key: value for key, value in leaves(own).items() if base.get(key, object()) == value}
    assert not restated, f"method/{method}.yaml restates base/common.yaml: {restated}"
    assert "rl" not in own  # the scale sets the RL sizes (paper Table 7: config/scale/paper.yaml)


@pytest.mark.parametrize("method", METHODS)
def test_the_paper_scale_sets_table7_rl_settings(config_dir, method):
    rl = compose_config(config_dir, "scale=paper", f"method={method}").rl
    assert (rl.tasks_per_update, rl.k, rl.updates, rl.lr) == (4, 8, 150, 1e-6)


def test_all_methods_set_the_same_keys(config_dir):
    shapes = {method: key_paths(method_sections(compose_config(config_dir, f"method={method}"))) for method in METHODS}
    assert all(shape == shapes["depgpo"] for shape in shapes.values())


@pytest.mark.parametrize("ablation", [a for a in ABLATIONS if a != "none"])
def test_an_ablation_changes_only_the_credit_variant(config_dir, ablation):
    full = method_sections(compose_config(config_dir, "ablation=none"))
    ablated = method_sections(compose_config(config_dir, f"ablation={ablation}"))
    full["credit"]["variant"] = ABLATIONS[ablation]
    assert ablated == full


def test_a_misspelt_method_is_a_clear_error(config_dir):
    cfg = compose_config(config_dir, "method.name=dpgpo")
    with pytest.raises(ConfigError) as error:
        validate(cfg)
    for message in (str(error.value), method_config_problem(cfg)):
        assert "method.name='dpgpo'" in message
        assert all(name in message for name in METHODS)
    with pytest.raises(MissingConfigException):
        compose_config(config_dir, "method=dpgpo")


@pytest.mark.parametrize(
    "override, message",
    [
        ("algorithm.adv_estimator=depgpo", "algorithm.adv_estimator='depgpo': method 'grpo' uses adv_estimator 'grpo'"),
        ("actor.policy_loss=gspo", "actor.policy_loss='gspo' is not one of vanilla, dppo_tv, dppo_kl"),
        ("algorithm.gigpo.mode=std", "algorithm.gigpo.mode='std' is not one of mean_norm, mean_std_norm"),
        ("credit.variant=no_reads", "credit.variant='no_reads' is not one of full, binary_write"),
        ("ablation=direct_only", "credit.variant='direct_only': a credit ablation only applies to method 'depgpo'"),
    ],
)
def test_inconsistent_method_settings_are_rejected(config_dir, override, message):
    cfg = compose_config(config_dir, "method=grpo", override)
    with pytest.raises(ConfigError, match=message):
        validate(cfg)
