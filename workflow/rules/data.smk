# Task sets and SFT conversations.


rule generate_tasks:
    output:
        pool=f"{R}/tasks/pool/index.json",
        tests=expand(f"{R}/tasks/{{test}}/index.json", test=TEST_SETS),
    log:
        f"{R}/logs/generate_tasks.log",
    params:
        pool=CFG.tasks.pool,
        test=CFG.tasks.test,
        seed=CFG.seed,
    shell:
        "{DEPGPO} generate-tasks --out {R}/tasks --pool {params.pool} --test {params.test} --seed {params.seed}"
        " > {log} 2>&1"


rule generate_sft_tasks:
    output:
        f"{R}/sft_tasks/pool/index.json",
    log:
        f"{R}/logs/generate_sft_tasks.log",
    params:
        n=CFG.sft_data.sft_tasks,
        seed=CFG.seed + 1000,  # other parameters than the RL pool and the test sets
    shell:
        "{DEPGPO} generate-tasks --out {R}/sft_tasks --pool {params.n} --test 0 --seed {params.seed} > {log} 2>&1"


rule sft_data:
    input:
        f"{R}/sft_tasks/pool/index.json",
    output:
        conversations=f"{R}/{{model}}/{{data}}/sft/conversations.jsonl",
        reference=f"{R}/{{model}}/{{data}}/sft/reference_credit.json",
    log:
        f"{R}/logs/{{model}}/{{data}}/sft_data.log",
    params:
        overrides=setting_overrides,
        variants=CFG.sft_data.variants,
    shell:
        "{DEPGPO} sft-data --tasks {R}/sft_tasks/pool --out {output.conversations}"
        " --reference {output.reference} --variants {params.variants} {params.overrides} > {log} 2>&1"
