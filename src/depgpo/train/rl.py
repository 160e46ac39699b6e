"""The local RL trainer (CPU or one GPU, `device`): every compared method, with the same estimator and loss code as
verl.

One update = `tasks_per_update` tasks x K rollouts of the current policy in the traced sandbox -> rewards ->
(DepGPO: dependency credit -> step factors) -> per-token advantages (depgpo.algos) -> verl's policy loss ->
`ppo_epochs` AdamW steps on the batch. Checkpoints are written atomically every `checkpoint_every` updates
(depgpo.train.checkpoint); a run killed at any moment, a checkpoint save included, resumes from the last complete one,
and a finished run (done.json) does nothing when rerun.
"""

from __future__ import annotations

import json
import random
import resource
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from depgpo.agent.config import agent_config
from depgpo.agent.loop import Rollout, assign_credit, iter_rollouts
from depgpo.algos.advantages import TurnBatch, compute_advantage
from depgpo.algos.dapo import collect_groups, overlong_penalty
from depgpo.algos.losses import actor_loss, build_actor_config
from depgpo.algos.methods import estimator
from depgpo.algos.metrics import episode_health, gradient_norm, masked_mean, token_entropy, update_metrics
from depgpo.policy.generate import logprobs_from_logits, make_policy, response_logits
from depgpo.policy.device import resolve_device
from depgpo.policy.model import load_policy, save_policy
from depgpo.tasks import Task
from depgpo.train.checkpoint import recover, replace_dir, staging_dir, write_atomically
from depgpo.train.progress import Progress

TRAINER_STATE = "trainer_state.pt"  # optimizer and position, written last: a checkpoint that has it is complete
RUN_OUTPUTS = ("metrics.jsonl", "tb", "trajectories")  # what a run writes besides its checkpoint and done.json


@dataclass
class Group:
    task: Task
    rollouts: list[Rollout]


def training_subset(tasks: list[Task], max_tasks: int, seed: int) -> list[Task]:
    """At most `max_tasks` of the RL training tasks (all if max_tasks <= 0), drawn with the run's seed the way
    verl's data.train_max_samples draws them, in their original order."""
    if max_tasks <= 0 or max_tasks >= len(tasks):
        return list(tasks)
    chosen = np.random.default_rng(seed).choice(len(tasks), size=max_tasks, replace=False)
    return [tasks[i] for i in sorted(chosen)]


def _complete(checkpoint: Path) -> bool:
    return (checkpoint / TRAINER_STATE).is_file()


def _update_of(line: str) -> float:
    """The update of a metrics line; a line cut short by a kill counts as after every checkpoint (dropped)."""
    try:
        return json.loads(line)["update"]
    except (json.JSONDecodeError, KeyError, TypeError):
        return float("inf")


class RLTrainer:
    def __init__(self, cfg: DictConfig, policy_dir: Path, train_tasks: list[Task], out_dir: Path):
        self.cfg, self.out_dir = cfg, Path(out_dir)
        self.tasks = training_subset(train_tasks, cfg.rl.train_max_tasks, cfg.seed)
        self.checkpoint_dir = self.out_dir / "checkpoint"
        recover(self.checkpoint_dir, _complete)  # a kill during a checkpoint save left checkpoint.tmp / .old
        resume = _complete(self.checkpoint_dir)
        self.device = resolve_device(cfg.device)
        self.model, self.tokenizer = load_policy(self.checkpoint_dir if resume else policy_dir)
        self.model.to(self.device)  # before the optimizer: its state (loaded below) follows the parameters' device
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=cfg.rl.lr, weight_decay=cfg.rl.weight_decay)
        self.start_update = 0
        self.tasks_drawn = 0  # position in the stream of shuffled epochs over the training tasks
        if resume:
            # saved on any device; load_state_dict then moves the state onto the parameters' device
            state = torch.load(self.checkpoint_dir / TRAINER_STATE, weights_only=False, map_location="cpu")
            self.optimizer.load_state_dict(state["optimizer"])
            self.start_update = state["next_update"]
            self.tasks_drawn = state.get("tasks_drawn", 0)
            self._drop_metrics_after(self.start_update)
        else:  # a run killed before its first checkpoint: start clean, removing only what the run itself wrote
            for name in RUN_OUTPUTS:
                path = self.out_dir / name
                if path.is_dir():
                    shutil.rmtree(path)
                elif path.exists():
                    path.unlink()
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.actor_config = build_actor_config(cfg.actor, rollout_n=cfg.rl.k)
        self.reference = None  # the SFT policy, never updated: the KL loss's anchor (verl's reference policy)
        if self.actor_config.use_kl_loss:
            self.reference = load_policy(policy_dir)[0].to(self.device).eval().requires_grad_(False)
        self.agent_config = agent_config(cfg, credit=True)
        self.policy = make_policy(self.model, self.tokenizer, cfg)

    def _drop_metrics_after(self, next_update: int) -> None:
        """A run killed between an update's metrics line and its checkpoint redoes that update: keep one line."""
        path = self.out_dir / "metrics.jsonl"
        if path.is_file():
            kept = [line for line in path.read_text().splitlines() if _update_of(line) < next_update]
            write_atomically(path, lambda partial: partial.write_text("".join(line + "\n" for line in kept)))

    # ------------------------------------------------------------------ rollouts
    def _rollout_groups(self, draws: list[tuple[Task, int]], update: int) -> list[Group]:
        """K rollouts of each drawn (task, draw number), all run side by side (agent.workers)."""
        self.model.eval()
        k = self.cfg.rl.k
        jobs = [(task, hash((self.cfg.seed, update, draw, i)) % (2**31)) for task, draw in draws for i in range(k)]
        rollouts = list(iter_rollouts(self.policy, jobs, self.agent_config))
        return [Group(task, rollouts[g * k:(g + 1) * k]) for g, (task, _) in enumerate(draws)]

    def _draw_task(self) -> Task:
        """The next training task: shuffled epochs, each task once per epoch (as verl's data loader serves them),
        so that the reward of one epoch is comparable with the next, whatever the tasks' difficulty."""
        epoch, position = divmod(self.tasks_drawn, len(self.tasks))
        order = list(self.tasks)
        random.Random(hash((self.cfg.seed, epoch))).shuffle(order)
        self.tasks_drawn += 1
        return order[position]

    def collect(self, update: int) -> tuple[list[Group], list[Group]]:
        """(kept, dropped) groups of tasks_per_update draws; with DAPO's dynamic sampling, groups whose rewards are
        all equal are dropped and replaced by fresh ones (depgpo.algos.dapo.collect_groups)."""
        sampling = self.cfg.algorithm.filter_groups

        def draw(first: int, size: int) -> list[Group]:
            return self._rollout_groups([(self._draw_task(), first + i) for i in range(size)], update)

        return collect_groups(draw, lambda group: [r.reward for r in group.rollouts], self.cfg.rl.tasks_per_update,
                              sampling.enable, sampling.max_num_gen_batches)

    # ------------------------------------------------------------------ batch and advantages
    def _padded(self, rows: list[list], fill) -> torch.Tensor:
        width = max(len(r) for r in rows)
        return torch.tensor([list(r) + [fill] * (width - len(r)) for r in rows])

    def advantages(self, groups: list[Group]) -> tuple[torch.Tensor, dict]:
        """Per-token advantages from the estimator declared under `algorithm.adv_estimator` (depgpo.algos.methods),
        called as verl's trainer calls it: turn-level estimators read the batch's turns from a TurnBatch."""
        rollouts = [r for g in groups for r in g.rollouts]
        index = np.array([f"{gi}:{g.task.id}" for gi, g in enumerate(groups) for _ in g.rollouts], dtype=object)
        mask = self._padded([r.response_mask for r in rollouts], 0).float()
        rewards = torch.tensor([r.reward for r in rollouts], dtype=torch.float32)
        algorithm = self.cfg.algorithm
        if algorithm.overlong.enable:
            lengths = torch.tensor([sum(r.response_mask) for r in rollouts])
            penalty = overlong_penalty(lengths, algorithm.overlong.max_resp_len, algorithm.overlong.buffer_len,
                                       algorithm.overlong.penalty_factor)
            rewards = rewards + penalty.to(rewards.dtype)
        last_model_token = (mask * torch.arange(mask.shape[1])).argmax(dim=1)
        token_rewards = torch.zeros_like(mask)
        token_rewards[torch.arange(len(rollouts)), last_model_token] = rewards
        info: dict = {"rewards": [r.reward for r in rollouts], "group_ids": list(index)}
        declared, turns = estimator(algorithm.adv_estimator), None
        if declared.turn_level:
            if "step_factors" in declared.turn_inputs:
                for r in rollouts:  # rollouts made elsewhere (recorded batches) come without credit
                    if r.step_factors is None:
                        assign_credit(r, self.agent_config.credit)
                info.update(step_factors=[r.step_factors for r in rollouts],
                            credit_diagnostics=[r.credit_diagnostics for r in rollouts])
            turns = TurnBatch(turn_ids=[list(r.turn_ids) for r in rollouts],
                              step_factors=info.get("step_factors", []),
                              anchor_keys=[r.anchor_keys for r in rollouts] if "anchor_keys" in declared.turn_inputs
                              else [], gigpo=dict(algorithm.gigpo))
        adv = compute_advantage(declared.name, token_rewards, mask, index, algorithm.norm_adv_by_std, turns)
        return adv, info

    # ------------------------------------------------------------------ one update
    def _forward(self, rollouts: list[Rollout], width: int, model=None) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probs and entropies of every response token under `model` (the current policy), padded to `width`."""
        log_probs, entropies = [], []
        for r in rollouts:
            logits = response_logits(model or self.model, r.prompt_ids, r.response_ids)
            pad = width - len(r.response_ids)
            log_probs.append(torch.nn.functional.pad(logprobs_from_logits(logits, r.response_ids), (0, pad)))
            entropies.append(torch.nn.functional.pad(token_entropy(logits), (0, pad)))
        return torch.stack(log_probs), torch.stack(entropies)

    def step(self, groups: list[Group]) -> dict:
        """`rl.ppo_epochs` optimizer steps on the batch (verl's ppo_epochs, one mini-batch): the first is on-policy
        (ratio 1); later ones are off-policy, where PPO's clip, DAPO's clip-higher and DPPO's trust region act."""
        rollouts = [r for g in groups for r in g.rollouts]
        t0 = time.monotonic()
        advantages, info = self.advantages(groups)
        # Dependency processing of the batch: the estimator here, plus each rollout's credit (computed as it ended, in
        # its worker: summed, so it is the cost per trajectory times the batch, whatever agent.workers is).
        credit_s = time.monotonic() - t0 + sum(r.credit_s for r in rollouts)
        self.model.train()
        width = advantages.shape[1]
        advantages = advantages.float().to(self.device)
        mask = self._padded([r.response_mask for r in rollouts], 0).float().to(self.device)
        old_log_prob = self._padded([r.old_logprobs for r in rollouts], 0.0).float().to(self.device)
        ref_log_prob = None
        if self.reference is not None:
            with torch.no_grad():
                ref_log_prob = self._forward(rollouts, width, self.reference)[0]
        per_epoch = []
        for epoch in range(self.cfg.rl.ppo_epochs):
            log_prob, entropy = self._forward(rollouts, width)
            loss, loss_metrics = actor_loss(self.actor_config, old_log_prob, log_prob, advantages, mask, entropy,
                                            ref_log_prob)
            self.optimizer.zero_grad()
            loss.backward()
            grad_norm = gradient_norm(self.model.parameters())
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.rl.grad_clip)
            self.optimizer.step()
            if epoch == 0:  # the entropy of the policy that sampled the batch
                masked_entropy = masked_mean(entropy.detach(), mask)
            per_epoch.append({"train/loss": float(loss.detach()), "grad_norm": grad_norm, **loss_metrics})
        mean = {key: sum(m[key] for m in per_epoch) / len(per_epoch) for key in per_epoch[0]}  # as verl logs them
        metrics = update_metrics(rewards=info["rewards"], group_ids=info["group_ids"], entropy=masked_entropy,
                                 grad_norm=mean.pop("grad_norm"), step_factors=info.get("step_factors"),
                                 credit_diagnostics=info.get("credit_diagnostics"))
        metrics.update({"time/credit_s": credit_s, **mean, **episode_health([r.trajectory for r in rollouts])})
        return metrics

    # ------------------------------------------------------------------ the run
    def save_checkpoint(self, next_update: int) -> None:
        """Model + optimizer + position, written beside the old checkpoint (trainer_state.pt last) and swapped in;
        the old one stays until the new one is in place (depgpo.train.checkpoint)."""
        staging = staging_dir(self.checkpoint_dir)
        shutil.rmtree(staging, ignore_errors=True)
        save_policy(self.model, self.tokenizer, staging)
        state = {"optimizer": self.optimizer.state_dict(), "next_update": next_update, "tasks_drawn": self.tasks_drawn}
        write_atomically(staging / TRAINER_STATE, lambda partial: torch.save(state, partial))
        replace_dir(staging, self.checkpoint_dir)

    def run(self, progress: bool = True) -> None:
        if (self.out_dir / "done.json").is_file():
            return
        from torch.utils.tensorboard import SummaryWriter

        writer = SummaryWriter(self.out_dir / "tb", purge_step=self.start_update)
        trajectories_dir = self.out_dir / "trajectories"
        trajectories_dir.mkdir(exist_ok=True)
        label = f"rl {self.out_dir.parent.name}/{self.out_dir.name}"
        updates = self.cfg.rl.updates
        # every_percent=0: an update is long enough to be a line of its own in a log
        with open(self.out_dir / "metrics.jsonl", "a") as metrics_file, \
                Progress(updates, label, "update", every_percent=0, initial=self.start_update, quiet=not progress,
                         note=f"updates {self.start_update + 1}-{updates}; metrics in {self.out_dir / 'metrics.jsonl'}"
                              f", TensorBoard in {self.out_dir / 'tb'}") as bar:
            for update in range(self.start_update, updates):
                torch.manual_seed(hash((self.cfg.seed, update)) % (2**31))
                t0 = time.monotonic()
                epoch = self.tasks_drawn // len(self.tasks)
                groups, dropped = self.collect(update)
                rollout_s = time.monotonic() - t0
                if groups:
                    metrics = self.step(groups)
                else:  # DAPO dropped every group: no gradient step, but the reward of what was sampled is known
                    rewards = [r.reward for g in dropped for r in g.rollouts]
                    metrics = {"train/skipped": 1.0, "train/reward_mean": sum(rewards) / len(rewards)}
                metrics.update({"update": update, "train/epoch": epoch, "time/rollout_s": rollout_s, "time/update_s": time.monotonic() - t0,
                                "dapo/dropped_groups": len(dropped),
                                "memory/peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024})
                for key, value in metrics.items():
                    if key != "update":
                        writer.add_scalar(key, value, update)
                metrics_file.write(json.dumps(metrics) + "\n")
                metrics_file.flush()
                with open(trajectories_dir / f"update{update:04d}.jsonl", "w") as fh:
                    for g in groups:
                        for r in g.rollouts:
                            fh.write(json.dumps({"num_turns": r.num_turns, "anchor_keys": r.anchor_keys,
                                                 **r.trajectory}) + "\n")
                bar.advance(reward=f"{metrics.get('train/reward_mean', float('nan')):.3f}",
                            took=f"{time.monotonic() - t0:.1f}s")
                if (update + 1) % self.cfg.rl.checkpoint_every == 0 or update + 1 == self.cfg.rl.updates:
                    self.save_checkpoint(update + 1)
        writer.close()
        (self.out_dir / "done.json").write_text(json.dumps({"updates": self.cfg.rl.updates,
                                                             "config": OmegaConf.to_container(self.cfg)}))
