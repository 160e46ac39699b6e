# One rule per RL run, so that a run can be (re)made by name: `snakemake rl_depgpo_beta0.25`.
# A run resumes from its last checkpoint when the rule is rerun after a kill (depgpo.train.rl).

for _run in RUNS:

    rule:
        name:
            f"rl_{_run}"
        input:
            policy=f"{R}/{{model}}/{{data}}/sft/checkpoint",
            train=f"{R}/{{model}}/{{data}}/filter/rl_train.txt",
        output:
            f"{R}/{{model}}/{{data}}/rl/{_run}/seed{{seed}}/done.json",
        log:
            f"{R}/logs/{{model}}/{{data}}/rl_{_run}_seed{{seed}}.log",
        params:
            overrides=setting_overrides,
            run=run_override_string(_run),
            out=lambda wc, output: output[0].rsplit("/", 1)[0],
        resources:
            gpu=1,
        shell:
            "{DEPGPO} rl --policy {input.policy} --train {input.train} --out {params.out}"
            " {params.overrides} {params.run} seed={wildcards.seed} > {log} 2>&1"
