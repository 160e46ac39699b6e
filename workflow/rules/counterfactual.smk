# The report's credit scores (docs/replay.md#scores): a sample of full DepGPO's logged rollouts in the focal setting,
# of both outcomes, replayed without each command (`depgpo counterfactual-sample`); the report scores every credit
# weighting on the kept replays without replaying again. counterfactual.per_outcome: 0 leaves it out.
SCORED_RUN = "depgpo"
SCORES = CFG.counterfactual.per_outcome > 0 and SCORED_RUN in RUNS


rule counterfactual:
    input:
        [f"{R}/{FOCAL}/rl/{SCORED_RUN}/seed{seed}/done.json" for seed in SEEDS_OF.get(SCORED_RUN, [])],
    output:
        f"{R}/{FOCAL}/counterfactual/{SCORED_RUN}.jsonl",
    log:
        f"{R}/logs/{FOCAL}/counterfactual_{SCORED_RUN}.log",
    benchmark:
        f"{R}/benchmarks/{FOCAL}/counterfactual_{SCORED_RUN}.tsv",
    params:
        depgpo=DEPGPO,
        runs=lambda wildcards, input: " ".join(os.path.dirname(path) for path in input),
        per_outcome=CFG.counterfactual.per_outcome,
        seed=CFG.seed,
        overrides=setting_overrides(CFG.focal_setting),
    conda:
        "../../envs/cpu.yaml"
    shell:
        "{params.depgpo} counterfactual-sample {params.runs} --per-outcome {params.per_outcome} --seed {params.seed}"
        " --out {output} {params.overrides} > {log} 2>&1"
