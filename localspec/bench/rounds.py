"""How many rounds the bench times a prompt in: a short answer gets more."""

from __future__ import annotations

# A round of an answer shorter than this times too little decoding to resolve a few
# percent: a 20-token answer is 0.4 s on a 0.5B model, and this 2-core EPYC's plain rate
# of one (sb-rag-521) ran 33.5-43.5 tok/s over 12 runs in a row; the 3-round median ratio
# of a mode that drafted nothing there came out 0.95 (rounds 0.84, 1.01, 0.95). Such an
# answer gets rounds in proportion, up to SHORT_ROUNDS_MAX times as many.
SHORT_ANSWER_TOKENS = 64
SHORT_ROUNDS_MAX = 3


def rounds_for(repeat: int, tokens: int) -> int:
    """Rounds for a prompt whose plain answer is ``tokens`` long: ``repeat``, more for a
    short answer when repeating at all (one round stays one)."""
    if repeat <= 1 or tokens >= SHORT_ANSWER_TOKENS:
        return max(1, repeat)
    return repeat * min(SHORT_ROUNDS_MAX, -(-SHORT_ANSWER_TOKENS // max(1, tokens)))
