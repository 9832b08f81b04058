"""Code that runs on the platform's nodes: the trainer, the collective bandwidth check and
the GPU node check. Nothing here imports Pulumi."""
