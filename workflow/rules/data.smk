# Task sets and SFT conversations.


rule generate_tasks:
    output:
        pool=f"{R}/tasks/pool/index.json",
        tests=expand(f"{R}/tasks/{{test}}/index.json", test=TEST_SETS),
        sft=[f"{R}/tasks/sft/index.json"] if CFG.tasks.sft else [],
    log:
        f"{R}/logs/generate_tasks.log",
    benchmark:
        f"{R}/benchmarks/generate_tasks.tsv",
    params:
        depgpo=DEPGPO,
        out=lambda wildcards, output: os.path.dirname(os.path.dirname(output.pool)),
        pool=CFG.tasks.pool,
        test=CFG.tasks.test,
        sft=CFG.tasks.sft,
        seed=CFG.seed,
    conda:
        "../../envs/cpu.yaml"
    shell:
        "{params.depgpo} generate-tasks --out {params.out} --pool {params.pool} --test {params.test}"
        " --sft {params.sft} --seed {params.seed} > {log} 2>&1"


# SFT conversations come from oracle runs on the candidate pool (as the paper's SFT data come from the same task
# source as its RL tasks); sampling at temperature 1 then leaves the SFT policy partly successful on them.
rule sft_data:
    input:
        lambda wildcards: [] if wildcards.data in EXTERNAL else [sft_tasks_file(wildcards)],
    output:
        conversations=f"{R}/{{model}}/{{data}}/sft/conversations.jsonl",
        reference=f"{R}/{{model}}/{{data}}/sft/reference_credit.json",
    log:
        f"{R}/logs/{{model}}/{{data}}/sft_data.log",
    benchmark:
        f"{R}/benchmarks/{{model}}/{{data}}/sft_data.tsv",
    params:
        depgpo=DEPGPO,
        source=sft_data_source,
        overrides=setting_overrides,
    conda:
        "../../envs/cpu.yaml"
    shell:
        "{params.depgpo} sft-data {params.source} --out {output.conversations}"
        " --reference {output.reference} {params.overrides} > {log} 2>&1"


# A user's task set (SETA, TMAX, Terminal-Bench 2.0/2.1): what would not run here, and the list of what will.
rule data_check:
    output:
        f"{R}/data/{{name}}.txt",
    log:
        f"{R}/logs/data_check_{{name}}.log",
    wildcard_constraints:
        name="|".join(EXTERNAL) or "^$",
    params:
        depgpo=DEPGPO,
        path=lambda wildcards: EXTERNAL[wildcards.name],
        environment=CFG.agent.environment,
    conda:
        "../../envs/cpu.yaml"
    shell:
        "{params.depgpo} data check {params.path} --runnable {output}"
        " --backend {params.environment.backend} --runtime {params.environment.runtime} > {log} 2>&1"
