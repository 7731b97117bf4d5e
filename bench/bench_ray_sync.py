"""Weight-sync time of ``rollout.engine: ray`` on CPU: the embedded model (SmolLM2-135M, float32) sent
from this process to one HF engine actor, through the object store and through a gloo broadcast.

    python bench/bench_ray_sync.py [--repeats 3] [--bucket-mb 64]

Starts a local Ray (2 CPUs, private temp dirs). Each sync gathers the parameters in buckets, sends
them and waits until the actor has copied them into its model; the first sync (at start-up, which
also sets up the gloo group) is not counted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--bucket-mb", type=float, default=64)
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="cr-")
    os.environ.update(RAY_TMPDIR=root, RAY_USAGE_STATS_ENABLED="0", HF_HUB_OFFLINE="1")
    import ray
    import torch
    from transformers import AutoModelForCausalLM

    from cascade_envs.trainer.config import model_path
    from cascade_envs.trainer.ray_engine import RayEngine

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, _temp_dir=f"{root}/t")
    model = AutoModelForCausalLM.from_pretrained(model_path("embedded"), dtype=torch.float32)
    mib = sum(p.numel() * p.element_size() for p in model.parameters()) / 2**20
    for transport in ("object_store", "collective"):
        engine = RayEngine(
            model,
            None,
            num_engines=1,
            weight_sync=transport,
            bucket_mb=args.bucket_mb,
            address=None,
            engine_kwargs={"dtype": "float32"},
        )
        times = []
        for _ in range(args.repeats):
            engine.sync_weights(model)
            times.append(engine.last_sync["sync_s"])
        engine.close()
        shown = ", ".join(f"{t:.2f}" for t in times)
        print(
            f"{transport:<13} {mib:.0f} MiB in {engine.last_sync['buckets']:.0f} buckets: {shown} s "
            f"(median {statistics.median(times):.2f} s, {mib / statistics.median(times):.0f} MiB/s)"
        )
    ray.shutdown()


if __name__ == "__main__":
    main()
