"""The feature store's side that runs on the platform (Feast 0.66): the checks a tenant's
feature_store.yaml and definitions pass before use (repo.py), the IAM-authenticated online
store (online.py), training datasets built point-in-time correct and registered as dataset
versions (dataset.py), and the `python -m workloads.features` verbs (cli.py)."""


def _without_runtime_type_checks() -> None:
    """Feast decorates its classes with typeguard's @typechecked, which re-parses and
    recompiles each one's source when Feast is imported (about 5 s of CPU at every start of a
    feature server, materialization or dataset job on 2 cores) and checks the argument types of
    every call after. typeguard documents the decorator as a debugging aid not meant for
    production, and turns it off under `python -O`; -O would also drop every assert, so only
    the decorator goes, here, before any module of this package imports Feast."""
    try:
        import typeguard
    except ImportError:  # not the features image: no Feast here
        return

    def typechecked(target=None, **_options):
        return _passthrough if target is None else target

    def _passthrough(target):
        return target

    typeguard.typechecked = typechecked


_without_runtime_type_checks()
