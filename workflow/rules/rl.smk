# RL runs. `rl_job` trains one run ({run}: one of RUNS) of one setting and seed; `rl_{run}` (no wildcards) asks for
# that run in every setting (the focal one for beta and ablation runs) and seed, so a run can be (re)made by name:
# `snakemake rl_depgpo_beta0.25`. A run resumes from its last checkpoint when its job is rerun after a kill
# (depgpo.train.rl).
import re


rule rl_job:
    input:
        policy=f"{R}/{{model}}/{{data}}/sft/checkpoint",
        train=f"{R}/{{model}}/{{data}}/filter/rl_train.txt",
    output:
        f"{R}/{{model}}/{{data}}/rl/{{run}}/seed{{seed}}/done.json",
    log:
        f"{R}/logs/{{model}}/{{data}}/rl_{{run}}_seed{{seed}}.log",
    benchmark:
        f"{R}/benchmarks/{{model}}/{{data}}/rl_{{run}}_seed{{seed}}.tsv",
    wildcard_constraints:
        run="|".join(map(re.escape, RUNS)),
    params:
        depgpo=gpu_stage("rl"),
        out=lambda wildcards, output: os.path.dirname(output[0]),
        overrides=setting_overrides,
        run=lambda wildcards: run_override_string(wildcards.run),
    resources:
        gpu=1,
    conda:
        "../../envs/gpu-train.yaml"
    shell:
        "{params.depgpo} rl --policy {input.policy} --train {input.train} --out {params.out}"
        " {params.overrides} {params.run} seed={wildcards.seed} > {log} 2>&1"


# Target rules cannot have wildcards: one per run name, inputs only.
for _run in RUNS:

    rule:
        name:
            f"rl_{_run}"
        input:
            expand(f"{R}/{{setting}}/rl/{_run}/seed{{seed}}/done.json", setting=RUN_SETTINGS[_run], seed=SEEDS_OF[_run]),
