"""What every engine agrees on about a request: the conversation shape, when a reply is continued
rather than started, and the per-request sampling seed."""
from __future__ import annotations

import hashlib
import json
from typing import Sequence

Conversation = Sequence[dict]  # [{"role": "system"|"user"|"assistant", "content": str}, ...]


def continues_reply(conversations: Sequence[Conversation]) -> bool:
    """True when every conversation ends with a prefilled assistant message that the model continues
    (the returned text is then only the continuation); False when none does. Mixed batches are an error."""
    ends = {c[-1].get("role") == "assistant" for c in conversations}
    if len(ends) > 1:
        raise ValueError("a chat batch mixes prefilled assistant replies with fresh ones: send them separately")
    return ends == {True}


def request_seed(seed: int, conversation: Conversation, temperature: float, max_tokens: int, sample: int = 0,
                 top_p: float = 1.0, stop: Sequence[str] | None = None) -> int:
    """The seed of one request: a 31-bit hash of the engine seed, the conversation and the sampling
    parameters (``sample``: which of the M separate requests of a vote). The same request gets the
    same seed in any batch, shard or session."""
    key = json.dumps([seed, list(conversation), temperature, max_tokens, top_p, list(stop or ()), sample],
                     sort_keys=True, ensure_ascii=False)
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "big") & 0x7FFFFFFF
