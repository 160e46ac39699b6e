"""Where the local stages put the policy (the `device` setting)."""

import torch


def resolve_device(name: str) -> torch.device:
    """The `device` setting as a torch device: "auto" is the first GPU when torch sees one, else the CPU."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name not in ("cpu", "cuda") and not name.startswith("cuda:"):
        raise ValueError(f"device={name!r}: expected auto, cpu, cuda or cuda:N")
    if name != "cpu" and not torch.cuda.is_available():
        raise ValueError(f"device={name}: torch {torch.__version__} sees no GPU; set device=cpu or device=auto")
    return torch.device(name)
