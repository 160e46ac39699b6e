# Task sets and SFT conversations.


rule generate_tasks:
    output:
        pool=f"{R}/tasks/pool/index.json",
        tests=expand(f"{R}/tasks/{{test}}/index.json", test=TEST_SETS),
    log:
        f"{R}/logs/generate_tasks.log",
    params:
        depgpo=DEPGPO,
        out=lambda wildcards, output: os.path.dirname(os.path.dirname(output.pool)),
        pool=CFG.tasks.pool,
        test=CFG.tasks.test,
        seed=CFG.seed,
    conda:
        "../../envs/cpu.yaml"
    shell:
        "{params.depgpo} generate-tasks --out {params.out} --pool {params.pool} --test {params.test}"
        " --seed {params.seed} > {log} 2>&1"


# SFT conversations come from oracle runs on the candidate pool (as the paper's SFT data come from the same task
# source as its RL tasks); sampling at temperature 1 then leaves the SFT policy partly successful on them.
rule sft_data:
    input:
        f"{R}/tasks/pool/index.json",
    output:
        conversations=f"{R}/{{model}}/{{data}}/sft/conversations.jsonl",
        reference=f"{R}/{{model}}/{{data}}/sft/reference_credit.json",
    log:
        f"{R}/logs/{{model}}/{{data}}/sft_data.log",
    params:
        depgpo=DEPGPO,
        tasks=lambda wildcards, input: os.path.dirname(input[0]),
        overrides=setting_overrides,
        variants=CFG.sft_data.variants,
    conda:
        "../../envs/cpu.yaml"
    shell:
        "{params.depgpo} sft-data --tasks {params.tasks} --out {output.conversations}"
        " --reference {output.reference} --variants {params.variants} {params.overrides} > {log} 2>&1"
