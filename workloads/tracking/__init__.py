"""Experiment tracking, the model registry and lineage, on the platform's MLflow server.

- `client`: the trainer's run (params, metrics, dataset input, code and image) and the
  reachability check every command makes first;
- `store`: checkpoints copied to the checkpoints bucket with a manifest of hashes, and
  read back verified;
- `registry`: model versions from a run's checkpoint, aliases and their rollback, and
  `models:/<name>/<version>` resolved for export;
- `lineage`: dataset version -> run -> checkpoint -> model version -> Triton version ->
  image digests, as JSON or for people;
- `server`: the tracking server's own command line and start-up (its image's entrypoint).
"""
