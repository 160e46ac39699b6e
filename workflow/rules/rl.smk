# RL runs. `rl_job_{run}` trains one run of one setting and seed; `rl_{run}` (no wildcards) asks for that run in
# every setting (the focal one for beta and ablation runs) and seed, so a run can be (re)made by name: `snakemake rl_depgpo_beta0.25`.
# A run resumes from its last checkpoint when its job is rerun after a kill (depgpo.train.rl).

for _run in RUNS:

    rule:
        name:
            f"rl_job_{_run}"
        input:
            policy=f"{R}/{{model}}/{{data}}/sft/checkpoint",
            train=f"{R}/{{model}}/{{data}}/filter/rl_train.txt",
        output:
            f"{R}/{{model}}/{{data}}/rl/{_run}/seed{{seed}}/done.json",
        log:
            f"{R}/logs/{{model}}/{{data}}/rl_{_run}_seed{{seed}}.log",
        benchmark:
            f"{R}/benchmarks/{{model}}/{{data}}/rl_{_run}_seed{{seed}}.tsv",
        params:
            depgpo=gpu_stage("rl"),
            out=lambda wildcards, output: os.path.dirname(output[0]),
            overrides=setting_overrides,
            run=run_override_string(_run),
        resources:
            gpu=1,
        conda:
            "../../envs/gpu-train.yaml"
        shell:
            "{params.depgpo} rl --policy {input.policy} --train {input.train} --out {params.out}"
            " {params.overrides} {params.run} seed={wildcards.seed} > {log} 2>&1"

    rule:
        name:
            f"rl_{_run}"
        input:
            expand(f"{R}/{{setting}}/rl/{_run}/seed{{seed}}/done.json", setting=RUN_SETTINGS[_run], seed=SEEDS),
