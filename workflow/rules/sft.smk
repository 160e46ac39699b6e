# Supervised fine-tuning and four-attempt filtering (Tables 5 and 6).


rule sft:
    input:
        f"{R}/{{model}}/{{data}}/sft/conversations.jsonl",
    output:
        directory(f"{R}/{{model}}/{{data}}/sft/checkpoint"),
    log:
        f"{R}/logs/{{model}}/{{data}}/sft.log",
    params:
        overrides=setting_overrides,
    resources:
        gpu=1,
    shell:
        "{DEPGPO} sft --data {input} --out {R}/{wildcards.model}/{wildcards.data}/sft {params.overrides} > {log} 2>&1"


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
        overrides=setting_overrides,
    resources:
        gpu=1,
    shell:
        "{DEPGPO} filter --policy {input.policy} --tasks {R}/tasks/pool"
        " --out {R}/{wildcards.model}/{wildcards.data}/filter {params.overrides} > {log} 2>&1"
