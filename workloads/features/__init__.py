"""The feature store's side that runs on the platform (Feast 0.66): the checks a tenant's
feature_store.yaml and definitions pass before use (repo.py), the IAM-authenticated online
store (online.py), training datasets built point-in-time correct and registered as dataset
versions (dataset.py), and the `python -m workloads.features` verbs (cli.py)."""
