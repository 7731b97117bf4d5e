"""Placement groups for env actors: reserve one CPU bundle per actor, packed or spread over nodes.

``actor_options: {placement_strategy: SPREAD}`` (or ``PACK``, ``STRICT_PACK``, ``STRICT_SPREAD``)
makes a pool reserve ``{CPU: num_cpus}`` bundles up front (``num_cpus`` of the actor options,
default 1) and schedule actor ``i`` into bundle ``i``; a replaced actor goes back into its bundle.
Rollout engines and trainer workers in GPU bundles are not placed here (see the README).
"""

from __future__ import annotations

from typing import Any

from ..core import CascadeError

STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")


def reserve(ray: Any, count: int, strategy: Any, num_cpus: float, timeout_s: float) -> Any:
    """A ready placement group of ``count`` CPU bundles, or a ``CascadeError`` naming the option."""
    if not isinstance(strategy, str) or strategy.upper() not in STRATEGIES:
        raise CascadeError(
            f"actor_options.placement_strategy: expected one of {', '.join(STRATEGIES)}, got {strategy!r}"
        )
    from ray.util.placement_group import placement_group, remove_placement_group

    group = placement_group([{"CPU": num_cpus}] * count, strategy=strategy.upper())
    ready, _ = ray.wait([group.ready()], timeout=timeout_s)
    if not ready:
        remove_placement_group(group)
        raise CascadeError(
            f"actor_options.placement_strategy: {count} bundles of {num_cpus:g} CPU ({strategy.upper()}) could not "
            f"be reserved within {timeout_s:g} s (cluster resources: {ray.cluster_resources()})"
        )
    return group


def bundle_options(group: Any, index: int) -> dict[str, Any]:
    """``.options()`` that schedule an actor into bundle ``index`` of ``group``."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    return {
        "scheduling_strategy": PlacementGroupSchedulingStrategy(
            placement_group=group, placement_group_bundle_index=index
        )
    }


def remove(group: Any) -> None:
    from ray.util.placement_group import remove_placement_group

    remove_placement_group(group)
