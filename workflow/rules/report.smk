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
    params:
        depgpo=DEPGPO,
        out=lambda wildcards, output: os.path.dirname(output[0]),
        results=lambda wildcards, output: os.path.dirname(os.path.dirname(output[0])),
    conda:
        "../../envs/cpu.yaml"
    shell:
        "{params.depgpo} report --results {params.results} --out {params.out} > {log} 2>&1"
