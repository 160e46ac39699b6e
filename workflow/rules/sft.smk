# Supervised fine-tuning and four-attempt filtering (Tables 5 and 6).


rule sft:
    input:
        f"{R}/{{model}}/{{data}}/sft/conversations.jsonl",
    output:
        directory(f"{R}/{{model}}/{{data}}/sft/checkpoint"),
    log:
        f"{R}/logs/{{model}}/{{data}}/sft.log",
    params:
        depgpo=DEPGPO,
        out=lambda wildcards, output: os.path.dirname(output[0]),
        overrides=setting_overrides,
    resources:
        gpu=1,
    conda:
        "../../envs/gpu-train.yaml"
    shell:
        "{params.depgpo} sft --data {input} --out {params.out} {params.overrides} > {log} 2>&1"


rule filter:
    input:
        policy=f"{R}/{{model}}/{{data}}/sft/checkpoint",
        pool=f"{R}/tasks/pool/index.json",
    output:
        summary=f"{R}/{{model}}/{{data}}/filter/filter.json",
        train=f"{R}/{{model}}/{{data}}/filter/rl_train.txt",
        val=f"{R}/{{model}}/{{data}}/filter/rl_val.txt",
    log:
        f"{R}/logs/{{model}}/{{data}}/filter.log",
    params:
        depgpo=DEPGPO,
        tasks=lambda wildcards, input: os.path.dirname(input.pool),
        out=lambda wildcards, output: os.path.dirname(output.summary),
        overrides=setting_overrides,
    resources:
        gpu=1,
    conda:
        "../../envs/eval.yaml"
    shell:
        "{params.depgpo} filter --policy {input.policy} --tasks {params.tasks} --out {params.out}"
        " {params.overrides} > {log} 2>&1"
