# pass@1 over eval.rounds rounds (one at tiny scale, three in the paper) on both test sets, for the SFT policy and every RL run (Tables 1, 2, 9; Figure 6).
# One job evaluates both test sets, so the policy and the libraries are loaded once.


rule evaluate:
    input:
        policy=eval_policy,
        tests=[task_set_file(test, test) for test in TEST_SETS],
    output:
        expand(f"{R}/{{{{model}}}}/{{{{data}}}}/eval/{{{{run}}}}/seed{{{{seed}}}}/{{test}}.json", test=TEST_SETS),
    log:
        f"{R}/logs/{{model}}/{{data}}/eval_{{run}}_seed{{seed}}.log",
    benchmark:
        f"{R}/benchmarks/{{model}}/{{data}}/eval_{{run}}_seed{{seed}}.tsv",
    params:
        depgpo=gpu_stage("evaluate"),
        checkpoint=lambda wildcards, input: input.policy.replace("done.json", "checkpoint"),
        tasks=lambda wildcards, input: " ".join(task_set_arg(t) for t in input.tests),
        out=lambda wildcards, output: os.path.dirname(output[0]),
        overrides=setting_overrides,
    resources:
        gpu=1,
    conda:
        "../../envs/eval.yaml"
    shell:
        "{params.depgpo} evaluate --policy {params.checkpoint} --tasks {params.tasks} --run {wildcards.run}"
        " --out {params.out} {params.overrides} seed={wildcards.seed} > {log} 2>&1"
