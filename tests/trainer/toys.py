"""A tiny word-level tokenizer + randomly initialised Llama, and a simple verifiable env, for trainer tests.

The model is small enough that a GRPO run of a few dozen steps takes seconds on two CPU cores,
and the env's reward is easy to verify by hand: the fraction of the answer's words that are "yes".
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cascade_envs import Env, Prompt, Reward, Row, TaskError

WORDS = ["yes", "no", "maybe", "cat", "dog", "red", "blue", "one", "two", "say", "the", "word"]
SPECIAL = ["<pad>", "<|im_start|>", "<|im_end|>"]
ROLES = ["system", "user", "assistant"]
TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }} {{ m['content'] }}<|im_end|>{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant {% endif %}"
)
PROMPTS = ["say the word yes", "say yes", "one word yes", "the word yes", "say yes yes", "yes say"]


def tiny_tokenizer(words: Sequence[str] = WORDS) -> Any:
    """A word-level tokenizer over ``words`` (each one token; any other word is ``<unk>``)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate(SPECIAL + ROLES + list(words) + ["<unk>"])}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    core.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with spaces
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token="<pad>",
        eos_token="<|im_end|>",
        bos_token="<|im_start|>",
        unk_token="<unk>",
    )
    tok.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    tok.chat_template = TEMPLATE
    return tok


def tiny_model(
    vocab_size: int,
    seed: int = 0,
    hidden: int = 32,
    *,
    special_ids: tuple[int | None, int | None, int | None] = (0, 1, 2),
    max_positions: int = 128,
) -> Any:
    """A tiny random Llama: ``special_ids`` are its pad, bos and eos token ids."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        pad_token_id=special_ids[0],
        bos_token_id=special_ids[1],
        eos_token_id=special_ids[2],
    )
    return LlamaForCausalLM(config).eval()


def save_tiny(folder: Path, seed: int = 0, words: Sequence[str] = WORDS) -> Path:
    """A tiny model + tokenizer over ``words`` saved as a Hugging Face folder (what ``model.path`` points at)."""
    tok = tiny_tokenizer(words)
    model = tiny_model(len(tok), seed=seed)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


class SayYesEnv(Env[Prompt]):
    """Reward: the fraction of the answer's words that are "yes" (0 for an empty answer)."""

    thinking = False

    def load_task(self, row: Row) -> Prompt:
        prompt = Prompt.of(row)
        if not isinstance(row.get("prompt"), str):
            raise TaskError("expected a string", "prompt")
        return prompt

    async def ascore(self, task: Prompt, answer: str) -> Reward:
        words = answer.split()
        if not words:
            return Reward.zero("empty answer")
        return Reward(sum(w == "yes" for w in words) / len(words))


class ConstantEnv(SayYesEnv):
    """Every answer scores 0 (cut ones too): every group is filtered out."""

    async def ascore(self, task: Prompt, answer: str) -> Reward:
        return Reward.zero("this env never rewards")


def say_yes_tasks() -> list[dict[str, Any]]:
    return [{"id": f"p{i}", "prompt": p} for i, p in enumerate(PROMPTS)]


class HalfBrokenEnv(SayYesEnv):
    """The verifier fails on answers with an odd number of words (masked samples); others score as SayYes."""

    async def ascore(self, task: Prompt, answer: str) -> Reward:
        if len(answer.split()) % 2:
            raise RuntimeError("verifier crashed")
        return await super().ascore(task, answer)


def register_toys() -> None:
    import cascade_envs

    cascade_envs.register("test/SayYes-v0", SayYesEnv, tasks=say_yes_tasks())
    cascade_envs.register("test/Constant-v0", ConstantEnv, tasks=say_yes_tasks())
    cascade_envs.register("test/HalfBroken-v0", HalfBrokenEnv, tasks=say_yes_tasks())


def perturb(model: Any, seed: int, scale: float = 0.3) -> None:
    """Move every weight away from where it was (a stand-in for a training step an engine must follow)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * scale)


def hf_logprobs(model: Any, completion: Any, temperature: float = 1.0) -> Any:
    """log_softmax(logits / T) of ``completion``'s tokens under ``model`` (teacher forcing)."""
    import torch

    ids = torch.tensor([completion.prompt_token_ids + completion.token_ids])
    n = len(completion.prompt_token_ids)
    with torch.no_grad():
        logits = model(ids).logits[0, n - 1 : -1].float() / (temperature or 1.0)
    return torch.log_softmax(logits, -1).gather(1, torch.tensor(completion.token_ids)[:, None])[:, 0]
