"""Training stages. `sft`: supervised fine-tuning on stored conversations (`depgpo sft`, in `sft_cli`)."""
