"""Serve a cascade env to NeMo Gym as a resources server, and play episodes against it as NeMo Gym does.

What it shows, step by step:

1. ``cascade_envs.export.export("nemo-gym", ENV_ID, PATH)`` writes the env's rows as NeMo Gym JSONL
   (``responses_create_params.input``: the prompt; ``cascade_row``: the row the server plays;
   ``task_source``: the agent of your NeMo Gym config that plays them).
2. ``BackgroundServer("nemo-gym", ENV_ID)`` serves the env with the NeMo Gym protocol on a free local
   port (``cascade-envs serve --protocol nemo-gym ENV_ID --port 8100`` is the same server as a
   command: pass ``--url http://127.0.0.1:8100`` to use one you started).
3. Each episode is the calls NeMo Gym's ``simple_agent`` makes: ``POST /seed_session`` with the row
   (the answer sets the ``cascade_session`` cookie, which the client sends back), the model's reply to
   ``responses_create_params.input``, then ``POST /verify`` with the row and that reply as a Responses
   API ``response``; the answer carries ``reward``, ``reward_reason`` and ``mask_sample`` (true for a
   masked reward: a verifier or judge failure, which NeMo-RL drops with
   ``env.should_mask_flagged_samples``).

No ``nemo-gym`` package is needed: the requests are plain httpx. The reply comes from ``--policy``
(``embedded``: SmolLM2-135M on this machine; ``hf:PATH``; or the base URL of an OpenAI-compatible server).

    python examples/serve_for_nemo_gym.py                    # MCQA's own rows, 1 episode, embedded model
    python examples/serve_for_nemo_gym.py --tasks bundled:mcqa/easy.jsonl --episodes 2   # the CI run
    python examples/serve_for_nemo_gym.py --env cascade/InstructionFollowing-v0 --episodes 16 \
        --policy http://127.0.0.1:8000/v1
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

import httpx

from cascade_envs.export import export
from cascade_envs.rollout import SamplingParams, make_policy
from cascade_envs.serving.server import BackgroundServer


def responses_api_response(text: str, cut: bool) -> dict[str, Any]:
    """The model's reply as an OpenAI Responses API object, as NeMo Gym's model servers return it."""
    return {
        "id": "resp_0",
        "object": "response",
        "created_at": 0,
        "model": "policy",
        "output": [
            {
                "id": "msg_0",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        ],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        # A reply cut at the length limit: the env scores it as overlong (0).
        "incomplete_details": {"reason": "max_output_tokens"} if cut else None,
    }


async def play(url: str, rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    """One rollout per row, with the calls NeMo Gym's simple_agent makes to a resources server."""
    policy = make_policy(args.policy)
    sampling = SamplingParams(max_tokens=args.max_tokens, temperature=0.0)  # greedy
    try:
        for row in rows:
            # A client per rollout: its cookie jar carries this rollout's session from call to call.
            async with httpx.AsyncClient(base_url=url, timeout=120) as client:
                seeded = await client.post("/seed_session", json=row)
                seeded.raise_for_status()

                messages = [
                    {"role": m["role"], "content": m["content"]}
                    for m in row["responses_create_params"]["input"]
                ]
                # The reply is a Completion: a str that also carries its finish_reason and token ids.
                reply = await policy.agenerate(messages, sampling=sampling)

                response = responses_api_response(str(reply), cut=reply.finish_reason == "length")
                verified = await client.post("/verify", json={**row, "response": response})
                verified.raise_for_status()
                result = verified.json()
            task = row["cascade_row"]
            print(f"task {task.get('uuid') or task.get('id') or '?'}: reply {str(reply)[:120]!r}")
            reason = f": {result['reward_reason']}" if result["reward_reason"] else ""
            print(f"  reward {result['reward']}{reason} (mask_sample {result['mask_sample']})")
    finally:
        await policy.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="cascade/MCQA-v0", help="the env to serve (its own task file)")
    parser.add_argument("--tasks", help="another task file of the env")
    parser.add_argument("--url", help="a running `cascade-envs serve --protocol nemo-gym` server")
    parser.add_argument("--policy", default="embedded", help="embedded, hf:PATH or http://HOST:PORT/v1")
    parser.add_argument("--episodes", type=int, default=1, help="rows played, from the top of the export")
    parser.add_argument("--max-tokens", type=int, default=128, help="generation limit of one reply")
    parser.add_argument("--rows", default="runs/nemo_gym_rows.jsonl", help="where the export goes")
    args = parser.parse_args()

    count = export("nemo-gym", args.env, args.rows, tasks=args.tasks, limit=args.episodes)
    print(f"exported {count} row(s) of {args.env} to {args.rows}")
    rows = [json.loads(line) for line in Path(args.rows).read_text(encoding="utf-8").splitlines()]

    if args.url:
        print(f"resources server: {args.url}")
        asyncio.run(play(args.url, rows, args))
        return
    env_kwargs = {"tasks": args.tasks} if args.tasks else None
    with BackgroundServer("nemo-gym", args.env, env_kwargs=env_kwargs) as server:  # stopped on exit
        print(f"resources server: {server.url} (nemo-gym protocol, {args.env})")
        asyncio.run(play(server.url, rows, args))


if __name__ == "__main__":
    main()
