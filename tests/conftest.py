
import pytest

from tests.helpers.cli import depgpo


@pytest.fixture(scope="session")
def sft_policy(tmp_path_factory):
    """(Shared by the pipeline and agent-loop tests.) Two generated tasks, their oracle conversations, and a briefly fine-tuned tiny policy."""
    root = tmp_path_factory.mktemp("pipeline")
    depgpo("generate-tasks", "--out", str(root / "tasks"), "--pool", "2", "--test", "0", "--seed", "3",
           "--families", "supporting_read,required_deletion")
    sft = root / "sft"
    depgpo("sft-data", "--tasks", str(root / "tasks" / "pool"), "--out", str(sft / "conversations.jsonl"),
           "--reference", str(sft / "reference_credit.json"), "--variants", "1", "scale=ci")
    depgpo("sft", "--data", str(sft / "conversations.jsonl"), "--out", str(sft), "scale=ci", "sft.epochs=5")
    train = root / "rl_train.txt"
    train.write_text("".join(f"{d}\n" for d in sorted((root / "tasks" / "pool").iterdir()) if d.is_dir()))
    return root, sft / "checkpoint", train
