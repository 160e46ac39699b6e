"""The config says each thing once and is checked once: the workflow's own keys against its schema (Snakemake's
`validate`), every composed Hydra key against depgpo.config's registries, with one-line errors that name the key and
the valid values."""

from __future__ import annotations

import dataclasses

import pytest
import yaml
from omegaconf import OmegaConf
from snakemake.exceptions import WorkflowError
from snakemake.utils import validate as snakemake_validate

from depgpo.config import (
    CONTROL_RUNS,
    VALUE_RANGES,
    Choice,
    ConfigError,
    Run,
    compose,
    parse_run,
    run_name,
    run_overrides,
    sweep_runs,
    validate,
    value_choices,
)
from depgpo.credit.config import CreditConfig
from tests.helpers import REPO

SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"


@pytest.fixture(scope="module")
def tiny():
    return compose(["scale=tiny"])


@pytest.fixture(scope="module")
def paper():
    return compose(["scale=paper"])


# ---------------------------------------------------------------------- the workflow's own keys


def test_the_schema_names_every_scale_and_the_default_scale_of_the_hydra_config():
    schema = yaml.safe_load(SCHEMA.read_text())
    scales = sorted(path.stem for path in (REPO / "config" / "scale").glob("*.yaml"))
    assert sorted(schema["properties"]["scale"]["enum"]) == scales
    defaults = yaml.safe_load((REPO / "config" / "config.yaml").read_text())["defaults"]
    assert {"scale": schema["properties"]["scale"]["default"]} in defaults


def test_the_schema_sets_defaults_and_accepts_the_slurm_profiles_config():
    config = {}
    snakemake_validate(config, str(SCHEMA))
    assert config == {"scale": "tiny", "launcher": "none", "overrides": ""}
    profile = yaml.safe_load((REPO / "profiles" / "slurm" / "workflow.yaml").read_text())
    snakemake_validate(profile, str(SCHEMA))
    assert profile == {"scale": "paper", "launcher": "submitit", "overrides": ""}


@pytest.mark.parametrize("config, message", [
    ({"scale": "huge"}, "'huge' is not one of ['tiny', 'ci', 'paper', 'tiny-rl']"),
    ({"launcher": "slurm"}, "'slurm' is not one of ['none', 'submitit']"),
    ({"scael": "ci"}, "'scael' was unexpected"),
])
def test_the_schema_rejects_a_bad_workflow_key(config, message):
    with pytest.raises(WorkflowError, match="Error validating config file") as error:
        snakemake_validate(config, str(SCHEMA))
    assert message in str(error.value.args[0])


def test_the_snakefile_requires_a_snakemake_version_and_validates_its_config():
    snakefile = (REPO / "Snakefile").read_text()
    assert 'min_version("' in snakefile
    assert 'validate(config, "workflow/schemas/config.schema.yaml")' in snakefile


# ---------------------------------------------------------------------- the Hydra config


def test_every_checked_key_exists(tiny):
    """No check of a key that no composition has (a renamed or removed key)."""
    absent = object()
    for key in {**VALUE_RANGES, **value_choices()}:
        assert OmegaConf.select(tiny, key, default=absent) is not absent, key


@pytest.mark.parametrize("key", sorted(value_choices()))
def test_a_value_not_among_the_choices_is_one_line_naming_the_key_and_the_valid_values(tiny, key):
    accepted = value_choices()[key]
    cfg = tiny.copy()
    OmegaConf.update(cfg, key, ["bogus"] if accepted.many else "bogus")
    with pytest.raises(ConfigError) as error:
        validate(cfg)
    message = str(error.value)
    assert "\n" not in message and message.startswith(f"{key}=")
    valid = [("null" if v is None else str(v).lower() if isinstance(v, bool) else v) for v in accepted.values]
    assert f"not one of {', '.join(valid)}" in message


@pytest.mark.parametrize("key", ["credit.enabled", "actor.use_kl_loss", "algorithm.overlong.enable"])
def test_a_flag_takes_only_true_or_false(tiny, key):
    cfg = tiny.copy()
    OmegaConf.update(cfg, key, 1)
    with pytest.raises(ConfigError, match=f"{key}=1 is not one of true, false"):
        validate(cfg)


def test_the_choices_are_choices():
    assert all(isinstance(accepted, Choice) and accepted.values for accepted in value_choices().values())
    assert value_choices()["controls"].values == tuple(CONTROL_RUNS)


def test_the_focal_setting_must_be_one_of_the_settings(paper):
    cfg = paper.copy()
    cfg.focal_setting.data = "tiny"
    with pytest.raises(ConfigError, match=r"focal_setting=qwen3.5-9b/tiny is not one of settings \(qwen3.5-9b/seta"):
        validate(cfg)


def test_one_beta_default_names_full_depgpo_and_the_sweep_leaves_it_out(paper):
    assert paper.credit.beta == CreditConfig.beta
    sweep = sweep_runs(paper)
    assert f"depgpo_beta{CreditConfig.beta}" not in sweep
    assert sweep == ["depgpo_beta0.25", "depgpo_beta0.75", "depgpo_beta1.0", "depgpo_binary_write",
                     "depgpo_no_verifier_filter", "depgpo_no_read_credit", "depgpo_direct_only"]
    for run in [*paper.methods, *sweep]:
        assert run_name(compose(["scale=paper", *run_overrides(run)])) == run


def test_no_dead_rl_keys(paper, tiny):
    """rl.optimizer was read nowhere (AdamW is the trainers' only optimizer): no config sets it."""
    assert "optimizer" not in paper.rl and "optimizer" not in tiny.rl


def test_every_credit_knob_is_a_config_key_with_the_dataclass_default():
    """So that `credit.KEY=VALUE` reaches every reading of docs/credit-decisions.md from a stage, without `+`."""
    depgpo = compose(["scale=tiny", "method=depgpo"])
    assert set(depgpo.credit) == {field.name for field in dataclasses.fields(CreditConfig)}
    assert CreditConfig.from_mapping(OmegaConf.to_container(depgpo.credit)) == CreditConfig()
    changed = compose(["scale=tiny", "method=depgpo", "credit.incidental_rules=[date]", "credit.reveal_once=false"])
    config = CreditConfig.from_mapping(OmegaConf.to_container(changed.credit))
    assert config.incidental_rules == ("date",) and config.reveal_once is False


def test_run_names_are_parsed_in_one_place_and_an_unknown_one_is_refused():
    """parse_run reads back what run_name writes (the workflow's targets, the report's rows and the identical-
    checkpoint check all go through it), and names the forms it knows for a name it cannot place."""
    assert parse_run("depgpo_beta0.25") == Run("depgpo_beta0.25", "depgpo", beta=0.25)
    assert parse_run("depgpo_direct_only").credit() == CreditConfig(variant="direct_only")
    assert parse_run("frozen").overrides == ["method=grpo", "rl.lr=0"] and parse_run("grpo").credit() is None
    for name in ("depgpo_betax", "grpo_direct_only", "mystery", "depgpo_full"):
        with pytest.raises(ValueError, match="is none of: a method"):
            parse_run(name)
