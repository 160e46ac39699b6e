# The paper's tables and figures, from the results tree alone (seconds): `snakemake report -f` regenerates them.


rule report:
    input:
        evals=[f"{R}/{setting}/eval/{run}/seed{seed}/{test}.json" for run, settings in {"sft": SETTINGS,
               **EVALUATED}.items() for setting in settings for seed in SEEDS_OF[run] for test in TEST_SETS],
        controls=[f"{R}/{FOCAL}/rl/{run}/seed{seed}/done.json" for run in CONTROLS for seed in SEEDS_OF[run]],
        filters=expand(f"{R}/{{setting}}/filter/filter.json", setting=SETTINGS),
        references=expand(f"{R}/{{setting}}/sft/reference_credit.json", setting=SETTINGS),
        counterfactual=[f"{R}/{FOCAL}/counterfactual/{SCORED_RUN}.jsonl"] if SCORES else [],
    output:
        f"{R}/report/index.md",
    log:
        f"{R}/logs/report.log",
    benchmark:
        f"{R}/benchmarks/report.tsv",
    params:
        depgpo=DEPGPO,
        out=lambda wildcards, output: os.path.dirname(output[0]),
        results=lambda wildcards, output: os.path.dirname(os.path.dirname(output[0])),
        focal=FOCAL,
    conda:
        "../../envs/cpu.yaml"
    shell:
        "{params.depgpo} report --results {params.results} --out {params.out} --setting {params.focal} > {log} 2>&1"
