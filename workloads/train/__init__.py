"""GPT-style language model trainer: DDP or FSDP2, mixed precision, gradient accumulation,
exact resume from `torch.distributed.checkpoint` checkpoints. Run with
`torchrun ... -m workloads.train --help`."""
