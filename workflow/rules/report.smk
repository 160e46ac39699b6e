# The paper's tables and figures, from the results tree alone (seconds): `snakemake report -f` regenerates them.


rule report:
    input:
        evals=expand(f"{R}/{{setting}}/eval/{{run}}/seed{{seed}}/{{test}}.json", setting=SETTINGS,
                     run=["sft"] + RUNS, seed=SEEDS, test=TEST_SETS),
        filters=expand(f"{R}/{{setting}}/filter/filter.json", setting=SETTINGS),
        references=expand(f"{R}/{{setting}}/sft/reference_credit.json", setting=SETTINGS),
    output:
        f"{R}/report/index.md",
    log:
        f"{R}/logs/report.log",
    shell:
        "{DEPGPO} report --results {R} --out {R}/report > {log} 2>&1"
