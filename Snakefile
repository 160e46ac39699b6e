# DepGPO reproduction DAG: tasks -> SFT data -> SFT -> four-attempt filtering -> RL (methods, beta sweep,
# ablations) -> evaluation (eval.rounds: one at tiny scale, three in the paper) -> tables and figures. Every rule
# calls `depgpo`; no logic lives here.
#
#   snakemake                          the tiny DAG on this machine (scale=tiny; profiles/default)
#   snakemake --config scale=ci        the CI smoke variant
#   snakemake rl_depgpo_beta0.25       one RL run in every setting and seed (and what it needs): rl_grpo, ...
#                                      (rule rl_job makes each of them, its {run} wildcard one of RUNS)
#   snakemake report -f                regenerate tables and figures from results/ only
#   snakemake --profile slurm          the paper's grid as Slurm GPU jobs (config/scale/paper.yaml)
#   snakemake --config overrides="rl.updates=2 agent.max_turns=6"    any Hydra key, to every stage
#
# The workflow's own config keys (scale, launcher, overrides) are workflow/schemas/config.schema.yaml; the rest is
# Hydra's, reached through overrides (depgpo.workflow_config: checked here, one line a problem, before any job).
import sys

from snakemake.utils import min_version, validate

from depgpo.config import sweep_runs
from depgpo.workflow_config import check_jobs, check_workflow_keys, compose_checked, parse_overrides

min_version("9.0")  # pinned in pyproject.toml (workflow extra); older ones are untested
check_workflow_keys(config, f"{workflow.basedir}/workflow/schemas/config.schema.yaml")  # one line, not a schema dump
validate(config, "workflow/schemas/config.schema.yaml")  # sets the defaults of absent keys

SCALE = config["scale"]
OVERRIDES = parse_overrides(config["overrides"])  # to every stage, after its setting's and before its run's
CFG = compose_checked(SCALE, OVERRIDES)  # validated there, focal_setting among settings included
R = CFG.results_dir
DEPGPO = f"{sys.executable} -m depgpo"  # the interpreter running Snakemake has the package installed
SETTINGS = [f"{s['model']}/{s['data']}" for s in CFG.settings]
FOCAL = f"{CFG.focal_setting.model}/{CFG.focal_setting.data}"  # where the beta sweep and ablations run (Tables 2, 9)
SWEEP = sweep_runs(CFG)
CONTROLS = list(CFG.controls)  # runs that are not evaluated: the frozen twin (depgpo.config.CONTROL_RUNS)
RUNS = list(CFG.methods) + SWEEP + CONTROLS
RUN_SETTINGS = {run: SETTINGS if run in CFG.methods else [FOCAL] for run in RUNS}  # every method in every setting
EVALUATED = {run: settings for run, settings in RUN_SETTINGS.items() if run not in CONTROLS}
SEEDS = list(CFG.seeds)
# Runs in interval_seeds.runs train in its seeds instead; the SFT policy is evaluated in every seed any run has, so
# that each run's evaluation pairs with the SFT policy's on the same sampling seeds (depgpo.report.stats).
SEEDS_OF = {run: list(CFG.interval_seeds.seeds) if run in CFG.interval_seeds.runs else SEEDS for run in RUNS}
SEEDS_OF["sft"] = sorted({seed for seeds in SEEDS_OF.values() for seed in seeds})
TEST_SETS = list(CFG.eval.test_sets)  # Terminal-Bench 2.0 and 2.1 (or their generated stand-ins)
check_jobs(SCALE, OVERRIDES, [(*setting.split("/"), run) for run, settings in RUN_SETTINGS.items()
                              for setting in settings])


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/sft.smk"
include: "workflow/rules/rl.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/counterfactual.smk"
include: "workflow/rules/report.smk"


rule all:
    default_target: True
    input:
        f"{R}/report/index.md",
