"""index.md's "What produced these numbers": one line where every stage ran on the same kernels, a note where not."""

import json

from depgpo import numerics
from depgpo.report.provenance import numerics_markdown


def stage(root, path, **changes):
    facts = {"torch": "2.13.0+cpu", "cpu_capability": "AVX2", "blas": "mkl", "threads": 1, "pin": "on",
             "environment": dict(numerics.PINNED), "user_settings": {}, "machine": "x86_64", "cpu": "AMD EPYC"}
    for key, value in changes.items():
        facts[key] = {**facts[key], **value} if isinstance(value, dict) else value
    (root / path).mkdir(parents=True)
    (root / path / numerics.NUMERICS_FILE).write_text(json.dumps(facts))


def test_threads_that_snakemake_set_are_no_other_kernels(tmp_path):
    stage(tmp_path, "tiny/tiny/sft", threads=2, environment={"OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2"},
          user_settings={"OMP_NUM_THREADS": "2"})
    stage(tmp_path, "tiny/tiny/eval/grpo/seed0", environment={"OMP_NUM_THREADS": "1"})
    lines = numerics_markdown(tmp_path)
    assert not any("Note" in line for line in lines)
    assert "(all 2 stages)" in lines[0] and "pin on" in lines[0]
    assert "- policy threads: 1 (tiny/tiny/eval/grpo/seed0); 2 (tiny/tiny/sft)" in lines


def test_stages_on_other_kernels_are_named_in_a_note(tmp_path):
    stage(tmp_path, "tiny/tiny/sft")
    stage(tmp_path, "tiny/tiny/eval/grpo/seed0", cpu_capability="AVX512", pin="off", environment={},
          user_settings={"ATEN_CPU_CAPABILITY": "avx512"})
    text = "\n".join(numerics_markdown(tmp_path))
    assert "ran on 2 different kernel settings" in text
    assert "CPU capability AVX512, BLAS mkl, pin off" in text and "(1 stages: tiny/tiny/eval/grpo/seed0)" in text
    assert "kernel variables the user set (they win over the pin): ATEN_CPU_CAPABILITY=avx512" in text


def test_a_tree_from_before_the_record_says_so(tmp_path):
    assert "no stage recorded it" in numerics_markdown(tmp_path)[0]
