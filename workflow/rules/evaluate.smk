# pass@1 over three rounds on both test sets, for the SFT policy and every RL run (Tables 1, 2, 9; Figure 6).


def eval_policy(wildcards):
    if wildcards.run == "sft":
        return f"{R}/{wildcards.model}/{wildcards.data}/sft/checkpoint"
    return f"{R}/{wildcards.model}/{wildcards.data}/rl/{wildcards.run}/seed{wildcards.seed}/done.json"


rule evaluate:
    input:
        policy=eval_policy,
        tests=f"{R}/tasks/{{test}}/index.json",
    output:
        f"{R}/{{model}}/{{data}}/eval/{{run}}/seed{{seed}}/{{test}}.json",
    log:
        f"{R}/logs/{{model}}/{{data}}/eval_{{run}}_seed{{seed}}_{{test}}.log",
    params:
        overrides=setting_overrides,
        checkpoint=lambda wc, input: input.policy if wc.run == "sft" else input.policy.replace("done.json", "checkpoint"),
    resources:
        gpu=1,
    shell:
        "{DEPGPO} evaluate --policy {params.checkpoint} --tasks {R}/tasks/{wildcards.test} --run {wildcards.run}"
        " --out {output} {params.overrides} seed={wildcards.seed} > {log} 2>&1"
