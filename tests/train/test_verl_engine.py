"""The local trainer's loss is verl's: one step of verl's own FSDP training engine and actor loss
(bench/verl_engine_step.py) on a batch with observation tokens and clipped ratios gives the local path's loss
(depgpo.algos.losses) and gradient norm, for every compared method's actor settings.

The engine runs in a child process (this file run as a script): it sets up verl's platform and a world-size-1
process group, which must not leak into the other tests.
"""

import json
import subprocess
import sys

import pytest

from tests.helpers import REPO

pytest.importorskip("verl")
pytestmark = pytest.mark.slow

METHODS = ("grpo", "dapo", "dppo", "depgpo")


def test_local_loss_and_gradient_equal_verl_fsdp_engine():
    # As a module from the repository root (its own process: FSDP initialises torch.distributed), so that it
    # imports tests.helpers as the test does.
    proc = subprocess.run([sys.executable, "-m", "tests.train.test_verl_engine"], capture_output=True, text=True,
                          timeout=600, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert [r["method"] for r in results] == list(METHODS)
    for r in results:
        assert r["verl_loss"] == pytest.approx(r["local_loss"], rel=1e-5, abs=1e-7), r
        assert r["verl_grad_norm"] == pytest.approx(r["local_grad_norm"], rel=1e-5), r
        assert r["verl_params_changed"]
        if r["method"] != "dppo":  # PPO's clip (DPPO masks by divergence instead) acts on some tokens
            assert r["pg_clipfrac"] > 0, r
    assert len({round(r["local_loss"], 6) for r in results}) >= 3  # vanilla, clip-higher and DPPO-TV are distinct


def _batch(tokenizer, model):
    import torch

    enc = lambda s: tokenizer(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    prompts = [enc("list the files"), enc("show the readme please"), enc("say hello"), enc("count the lines")]
    # action tokens, a tool observation (mask 0), more action tokens
    parts = [("ls -la", "total 0", "done"), ("cat README.md", "the file is empty", ""), ("echo hello", "", ""),
             ("wc -l notes.txt", "12 notes.txt", "echo 12 > /app/out")]
    responses = [enc(a) + enc(o) + enc(b) for a, o, b in parts]
    masks = [[1] * len(enc(a)) + [0] * len(enc(o)) + [1] * len(enc(b)) for a, o, b in parts]
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        old = []
        for p, r in zip(prompts, responses):
            logits = model(torch.tensor([p + r])).logits[0, len(p) - 1:-1]
            true = torch.log_softmax(logits, -1).gather(-1, torch.tensor(r)[:, None])[:, 0]
            old.append((true + 0.4 * torch.randn(len(r), generator=gen)).tolist())  # ratios away from 1: clipping
    advantages = [[a] * len(r) for a, r in zip([1.0, -0.5, 0.75, -1.0], responses)]
    return {"prompt_ids": prompts, "response_ids": responses, "response_mask": masks, "old_log_probs": old,
            "advantages": advantages}


def _local_step(model_dir, batch, actor):
    import torch

    from depgpo.algos.losses import actor_loss, build_actor_config
    from depgpo.algos.metrics import gradient_norm
    from depgpo.policy.generate import sequence_logprobs
    from depgpo.policy.model import load_policy

    model, _ = load_policy(model_dir)
    width = max(map(len, batch["response_ids"]))
    pad = lambda rows: torch.tensor([list(r) + [0] * (width - len(r)) for r in rows], dtype=torch.float32)  # noqa
    log_prob = torch.stack([torch.nn.functional.pad(sequence_logprobs(model, p, r), (0, width - len(r)))
                            for p, r in zip(batch["prompt_ids"], batch["response_ids"])])
    loss, _ = actor_loss(build_actor_config(actor, rollout_n=1), pad(batch["old_log_probs"]), log_prob,
                         pad(batch["advantages"]), pad(batch["response_mask"]))
    loss.backward()
    return float(loss), gradient_norm(model.parameters())


def main() -> None:
    import tempfile

    from depgpo.config import compose
    from depgpo.policy.model import build_tiny_qwen3, save_policy, train_tokenizer

    sys.path.insert(0, str(REPO / "bench"))
    from verl_engine_step import verl_engine_step

    texts = ["ls -la /tmp", "cat README.md | head", "echo hello world", "wc -l notes.txt", "the file is empty"] * 20
    tokenizer = train_tokenizer(texts, vocab_size=300)
    model = build_tiny_qwen3(tokenizer)
    model_dir = tempfile.mkdtemp(prefix="verl_engine_")
    save_policy(model, tokenizer, model_dir)
    batch = _batch(tokenizer, model.eval())
    results = []
    for method in METHODS:
        cfg = compose(["scale=tiny", f"method={method}"])
        actor = {**{k: cfg.actor[k] for k in ("policy_loss", "clip_ratio_low", "clip_ratio_high", "clip_ratio_c",
                                              "loss_agg_mode", "entropy_coeff")}, "lr": 1e-3}
        local_loss, local_grad_norm = _local_step(model_dir, batch, actor)
        verl = verl_engine_step(model_dir, batch, actor, "cpu")
        results.append({"method": method, "local_loss": local_loss, "local_grad_norm": local_grad_norm,
                        "verl_loss": verl["loss"], "verl_grad_norm": verl["grad_norm"],
                        "verl_params_changed": verl["params_changed"],
                        "pg_clipfrac": verl["metrics"]["actor/pg_clipfrac"]})
    print(json.dumps(results))


if __name__ == "__main__":
    main()
