"""The method and ablation config groups compose under Hydra and validate_method_config guards them."""

import shutil
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import MissingConfigException
from omegaconf import OmegaConf

from depgpo.algos.method_config import CREDIT_VARIANTS, METHOD_ESTIMATORS, validate_method_config

CONFIG_DIR = Path(__file__).resolve().parents[1] / "config"
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
def config_dir(tmp_path_factory) -> Path:
    """The project's config/ once it has a config.yaml; until then a copy of the two groups with a minimal one."""
    if (CONFIG_DIR / "config.yaml").exists():
        return CONFIG_DIR
    scratch = tmp_path_factory.mktemp("config")
    for group in ("method", "ablation"):
        shutil.copytree(CONFIG_DIR / group, scratch / group)
    (scratch / "config.yaml").write_text("defaults:\n  - method: depgpo\n  - ablation: none\n  - _self_\n")
    return scratch


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
    assert sorted(METHODS) == sorted(METHOD_ESTIMATORS)
    assert sorted(ABLATIONS.values()) == sorted(CREDIT_VARIANTS)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("ablation", ABLATIONS)
def test_every_method_and_ablation_composes(config_dir, method, ablation):
    cfg = compose_config(config_dir, f"method={method}", f"ablation={ablation}")
    assert cfg.method.name == method
    assert cfg.credit.variant == ABLATIONS[ablation]
    if method == "depgpo" or ablation == "none":
        validate_method_config(cfg)
    else:
        with pytest.raises(ValueError, match="only applies to method 'depgpo'"):
            validate_method_config(cfg)


def test_the_default_is_full_depgpo(config_dir):
    cfg = compose_config(config_dir)
    assert (cfg.method.name, cfg.credit.variant, cfg.credit.enabled, cfg.credit.beta) == ("depgpo", "full", True, 0.5)


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


@pytest.mark.parametrize("method", METHODS)
def test_method_files_set_table7_rl_settings(method):
    rl = OmegaConf.load(CONFIG_DIR / "method" / f"{method}.yaml").rl
    table7 = {"tasks_per_update": 4, "k": 8, "updates": 150, "optimizer": "adamw", "lr": 1e-6}
    assert OmegaConf.to_container(rl) == table7


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
    with pytest.raises(ValueError) as error:
        validate_method_config(cfg)
    assert "'dpgpo'" in str(error.value)
    assert all(name in str(error.value) for name in METHODS)
    with pytest.raises(MissingConfigException):
        compose_config(config_dir, "method=dpgpo")


@pytest.mark.parametrize(
    "override, message",
    [
        ("algorithm.adv_estimator=depgpo", "uses adv_estimator 'grpo'"),
        ("actor.policy_loss=gspo", "vanilla, dppo_tv, dppo_kl"),
        ("algorithm.gigpo.mode=std", "mean_norm, mean_std_norm"),
        ("credit.variant=no_reads", "binary_write"),
    ],
)
def test_inconsistent_method_settings_are_rejected(config_dir, override, message):
    cfg = compose_config(config_dir, "method=grpo", override)
    with pytest.raises(ValueError, match=message):
        validate_method_config(cfg)
