"""The offline renderer behaves as the provider's helm.v4.Chart does: hooks dropped, CRDs of
enabled subcharts only, the release namespace on namespaced objects, and one render never
changing the next."""

from __future__ import annotations

from infra.checks.images import object_id
from infra.render import release_spec, render, templates

ON = {"gfd": {"enabled": True}}
OFF = {"gfd": {"enabled": False}, "nfd": {"enabled": False}}


def ids(rendered) -> set[str]:
    return {object_id(o) for o in rendered.objects}


def test_a_render_with_a_subchart_off_does_not_remove_it_from_the_next():
    # Helm drops a disabled subchart from the loaded chart itself; each render loads its own.
    templates(release_spec("nvidia-device-plugin", "nvidia-device-plugin", "nvidia-device-plugin", OFF))
    objects = ids(render(release_spec("nvidia-device-plugin", "nvidia-device-plugin", "nvidia-device-plugin", ON),
                         use_disk_cache=False))
    assert "Deployment nvidia-device-plugin/nvidia-device-plugin-node-feature-discovery-master" in objects


def test_subchart_off_means_its_objects_and_its_crds_are_not_applied():
    off = render(release_spec("nvidia-device-plugin", "nvidia-device-plugin", "nvidia-device-plugin", OFF),
                 use_disk_cache=False)
    assert not any("node-feature-discovery" in i or "nfd.k8s-sigs.io" in i for i in ids(off))
    on = render(release_spec("nvidia-device-plugin", "nvidia-device-plugin", "nvidia-device-plugin", ON),
                use_disk_cache=False)
    assert "CustomResourceDefinition nodefeaturerules.nfd.k8s-sigs.io" in ids(on)


def test_hooks_are_not_applied_and_are_reported():
    on = render(release_spec("nvidia-device-plugin", "nvidia-device-plugin", "nvidia-device-plugin", ON),
                use_disk_cache=False)
    hooks = {(h.kind, h.name, h.events) for h in on.hooks}
    assert ("Job", "nvidia-device-plugin-node-feature-discovery-prune", "post-delete") in hooks
    assert not any(i.endswith("-prune") for i in ids(on))


def test_namespaced_objects_get_the_release_namespace_and_cluster_objects_none():
    rendered = render(release_spec("kueue", "kueue", "kueue-system", {}), use_disk_cache=False)
    by_kind = {}
    for obj in rendered.objects:
        by_kind.setdefault(obj["kind"], set()).add(obj["metadata"].get("namespace"))
    assert by_kind["Deployment"] == {"kueue-system"}
    assert by_kind["ClusterRole"] == {None} and by_kind["CustomResourceDefinition"] == {None}
