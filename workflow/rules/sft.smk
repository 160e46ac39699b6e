# Supervised fine-tuning and four-attempt filtering (Tables 5 and 6).


rule sft:
    input:
        f"{R}/{{model}}/{{data}}/sft/conversations.jsonl",
    output:
        directory(f"{R}/{{model}}/{{data}}/sft/checkpoint"),
    log:
        f"{R}/logs/{{model}}/{{data}}/sft.log",
    benchmark:
        f"{R}/benchmarks/{{model}}/{{data}}/sft.tsv",
    params:
        depgpo=gpu_stage("sft"),
        out=lambda wildcards, output: os.path.dirname(output[0]),
        overrides=setting_overrides,
        torch_threads=CFG.sft.threads,
    threads: CFG.sft.threads  # no episode runs beside SFT; torch gets this many even with fewer --cores, since the
    # weights may depend on it (docs/reproducibility.md)
    resources:
        gpu=1,
    conda:
        "../../envs/gpu-train.yaml"
    shell:
        "{params.depgpo} sft --data {input} --out {params.out} torch_threads={params.torch_threads}"
        " {params.overrides} > {log} 2>&1"


rule filter:
    input:
        policy=f"{R}/{{model}}/{{data}}/sft/checkpoint",
        pool=pool_file,
    output:
        summary=f"{R}/{{model}}/{{data}}/filter/filter.json",
        train=f"{R}/{{model}}/{{data}}/filter/rl_train.txt",
        val=f"{R}/{{model}}/{{data}}/filter/rl_val.txt",
    log:
        f"{R}/logs/{{model}}/{{data}}/filter.log",
    benchmark:
        f"{R}/benchmarks/{{model}}/{{data}}/filter.tsv",
    params:
        depgpo=gpu_stage("filter"),
        tasks=lambda wildcards, input: task_set_arg(input.pool),
        out=lambda wildcards, output: os.path.dirname(output.summary),
        overrides=setting_overrides,
    resources:
        gpu=1,
    conda:
        "../../envs/eval.yaml"
    shell:
        "{params.depgpo} filter --policy {input.policy} --tasks {params.tasks} --out {params.out}"
        " {params.overrides} > {log} 2>&1"
