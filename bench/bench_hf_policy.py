"""HFPolicy generation speed on the embedded SmolLM2-135M model, against plain ``model.generate``.

Prints the cached load time of ``HFPolicy.embedded()`` (and, with ``--convert``, the one-time GGUF
conversion into a fresh cache folder), then tokens/s at each batch size for: the reference — a bare
``model.generate(do_sample=True)`` with ``output_scores`` and ``compute_transition_scores`` for the
logprobs — ``HFPolicy.generate`` (per-row seeds, stop handling, logprobs) and concurrent
``HFPolicy.agenerate`` calls (micro-batched), with the ratio ours/reference. Each figure is the best
of ``--repeats`` runs, as wall-clock tokens/s and as tokens per CPU-second of this process (the
stable figure on a shared machine when ``--threads 1``).

    python bench/bench_hf_policy.py [--tokens 32] [--batch-sizes 1,8] [--threads 1] [--repeats 3] [--convert]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from collections.abc import Callable

STORY = [{"role": "user", "content": "Tell me a long story about a dragon who learns to cook."}]


def best_rate(run: Callable[[], int], repeats: int) -> tuple[float, float]:
    """Best (wall tokens/s, tokens per CPU-second) of ``repeats`` calls of ``run`` -> token count."""
    wall_best = cpu_best = 0.0
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        tokens = run()
        wall_best = max(wall_best, tokens / (time.perf_counter() - wall))
        cpu_best = max(cpu_best, tokens / max(time.process_time() - cpu, 1e-9))
    return wall_best, cpu_best


def reference(policy, batch: int, tokens: int) -> int:
    import torch

    prompt = policy.encode_prompt(STORY)
    ids = torch.tensor([prompt] * batch)
    out = policy.model.generate(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        do_sample=True,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        max_new_tokens=tokens,
        pad_token_id=policy.pad_token_id,
        eos_token_id=sorted(policy.eos_token_ids),
        output_scores=True,
        return_dict_in_generate=True,
    )
    policy.model.compute_transition_scores(out.sequences, out.scores, normalize_logits=True)
    rows = out.sequences[:, len(prompt) :].tolist()
    eos = policy.eos_token_ids
    return sum(next((j + 1 for j, t in enumerate(row) if t in eos), len(row)) for row in rows)


def ours_sync(policy, batch: int, sampling) -> int:
    return sum(len(o.token_ids) for o in policy.generate([STORY] * batch, sampling))


def ours_async(policy, batch: int, sampling) -> int:
    async def concurrent():
        return await asyncio.gather(*(policy.agenerate(STORY, sampling=sampling) for _ in range(batch)))

    return sum(len(o.token_ids) for o in asyncio.run(concurrent()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--batch-sizes", default="1,8")
    parser.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch default)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--convert", action="store_true", help="also time the GGUF conversion (temp cache)")
    args = parser.parse_args()
    batches = [int(b) for b in args.batch_sizes.split(",")]

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    from cascade_envs.policies.embedded import embedded_model_path
    from cascade_envs.policies.hf import HFPolicy
    from cascade_envs.policy import SamplingParams

    if args.convert:
        with tempfile.TemporaryDirectory() as cache:
            os.environ["CASCADE_ENVS_CACHE"] = cache
            start = time.perf_counter()
            embedded_model_path()
            print(f"first use (GGUF -> safetensors conversion): {time.perf_counter() - start:6.1f} s")
            del os.environ["CASCADE_ENVS_CACHE"]
    embedded_model_path()  # the default cache must be converted before timing the cached load
    start = time.perf_counter()
    policy = HFPolicy.embedded(device="cpu", max_batch_size=max(batches))
    print(f"cached load, HFPolicy.embedded():         {time.perf_counter() - start:6.2f} s")
    print(f"torch threads: {torch.get_num_threads()}, {args.tokens} new tokens per sample, temperature 1")
    sampling = SamplingParams(max_tokens=args.tokens, temperature=1.0, seed=0)
    policy.generate([STORY], SamplingParams(max_tokens=2))  # warm-up

    print(f"{'':>8}{'reference':>20}{'ours (generate)':>20}{'ours (agenerate)':>20}{'ratio':>12}")
    print(
        f"{'batch':>8}{'tok/s  tok/cpu-s':>20}{'tok/s  tok/cpu-s':>20}{'tok/s  tok/cpu-s':>20}{'wall  cpu':>12}"
    )
    for batch in batches:
        ref = best_rate(lambda b=batch: reference(policy, b, args.tokens), args.repeats)
        sync = best_rate(lambda b=batch: ours_sync(policy, b, sampling), args.repeats)
        conc = best_rate(lambda b=batch: ours_async(policy, b, sampling), args.repeats)
        cells = "".join(f"{w:>10.1f}{c:>10.1f}" for w, c in (ref, sync, conc))
        print(f"{batch:>8}{cells}{sync[0] / ref[0]:>6.2f}{sync[1] / ref[1]:>6.2f}")


if __name__ == "__main__":
    main()
