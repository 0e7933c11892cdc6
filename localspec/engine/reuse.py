"""Starting a request from KV state computed before instead of prefilling it again: the
slot's own cache, another slot's (shared with ``llama_memory_seq_cp``) or a state saved
on disk (the prompt cache, promptcache.py); and saving states there. One API key never
starts from another's prompt."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from localspec.engine import backend, promptcache
from localspec.engine.config import EngineConfig
from localspec.engine.slots import Job, Saved, Slot, common_prefix
from localspec.engine.spec.draftmodel import DraftModel
from localspec.types import Request, SpecConfig


@dataclass
class Keep:
    """Engine.keep_state's errand for the engine thread."""

    tokens: list[int]
    owner: str
    done: threading.Event = field(default_factory=threading.Event)
    kept: int = 0


def open_cache(config: EngineConfig, ctx: backend.Context) -> promptcache.PromptCache:
    """The prompt cache of ``ctx``'s states, under the directory the config names."""
    identity = promptcache.Identity.of(ctx.model.path, backend.library_version(), config.kv_type, ctx.state_options)
    return promptcache.PromptCache(config.prompt_cache_dir, identity, config.prompt_cache_size)


class Reuse:
    """The engine's prompt reuse, over its context, slots, draft model and caches."""

    def __init__(self, ctx: backend.Context, slots: list[Slot], draft: DraftModel | None,
                 cache: promptcache.PromptCache | None, n_batch: int) -> None:
        self.ctx, self.slots, self.draft, self.cache, self.n_batch = ctx, slots, draft, cache, n_batch

    def read_saved(self, prompt: list[int], request: Request, spec: SpecConfig) -> tuple[Saved | None, Saved | None]:
        """The longest prefix of the prompt saved on disk, for the target and the draft,
        read in the caller's thread (the engine thread only copies it in); nothing where a
        slot already holds as long a prefix in memory."""
        if self.cache is None or not request.cache_prompt or request.beams:
            return None, None
        in_memory = max((common_prefix(list(s.tokens), prompt) for s in self.slots if s.owner == request.store_key),
                        default=0)  # a hint read from this thread: the engine thread decides
        out: list[Saved | None] = []
        draft_cache = self.draft.prompt_cache if self.draft is not None and spec.mode in ("auto", "draft") else None
        for c in (self.cache, draft_cache):
            hit = c.lookup(prompt, request.store_key) if c is not None else None
            n = aligned(min(hit.n, len(prompt) - 1), self.n_batch) if hit else 0
            state = c.read(hit) if hit and n - in_memory >= promptcache.MIN_GAIN else None
            out.append(Saved(n, state, hit) if state is not None else None)
        return out[0], out[1] if out[0] is not None else None

    def start(self, slot: Slot, job: Job, keep: int) -> int:
        """Start the slot from the longest prefix of the prompt at hand: its own cache
        (``keep`` tokens), another slot's (shared) or a state read from the prompt cache
        (loaded). Returns the tokens its sequence now holds."""
        prompt, saved = job.prompt, job.saved
        donor = max((s for s in self.slots if s is not slot and s.owner == slot.owner), default=None,
                    key=lambda s: common_prefix(s.tokens, prompt))
        shared = min(common_prefix(donor.tokens, prompt), len(prompt) - 1) if donor is not None else 0
        if saved is not None and saved.n > max(keep, shared):
            if self.ctx.state_seq_set(slot.seq, saved.state):
                self.ctx.seq_rm(slot.seq, saved.n, -1)
                slot.tokens[:] = prompt[: saved.n]
                if self.draft is not None and job.saved_draft is not None:
                    self.draft.restore(slot.seq, prompt[: job.saved_draft.n], job.saved_draft.state)
                promptcache.log.info("prompt cache: %d of the prompt's %d tokens loaded from disk", saved.n, len(prompt))
                return saved.n
            slot.tokens.clear()  # llama.cpp refused it and left the sequence empty
            self.cache.refused(saved.hit)
            keep = 0
        if shared > keep and shared >= promptcache.MIN_GAIN:
            self.ctx.seq_rm(slot.seq, -1, -1)
            self.ctx.seq_cp(donor.seq, slot.seq, 0, shared)
            slot.tokens[:] = prompt[:shared]
            if self.draft is not None:
                self.draft.share(donor.seq, slot.seq, prompt[:shared])
            return shared
        return keep

    def keep(self, slot: Slot) -> None:
        """Save what the slot's sequence holds (a prompt just prefilled, or a prompt and
        its answer) to the prompt cache, when it is long and no saved state covers it."""
        cache, job = self.cache, slot.job
        if cache is None or job is None or not job.request.cache_prompt or job.request.beams:
            return
        owner = job.request.store_key
        try:
            if cache.wants(slot.tokens, owner):
                cache.save(list(slot.tokens), self.ctx.state_seq_get(slot.seq), owner)
            if self.draft is not None:
                self.draft.keep_state(slot.seq, slot.tokens, owner)
        except Exception as exc:  # the cache never fails a request
            promptcache.log.info("prompt cache: a state not saved: %r", exc)

    def keep_now(self, errand: Keep) -> None:
        """Engine.keep_state on the engine thread: the idle slot holding most of the tokens
        is cut to what it shares with them (an answer's last token, not yet decoded, goes)
        and saved."""
        try:
            idle = [s for s in self.slots if not s.active]
            slot = max(idle, key=lambda s: common_prefix(s.tokens, errand.tokens), default=None)
            n = common_prefix(slot.tokens, errand.tokens) if slot is not None else 0
            if slot is None or n < promptcache.MIN_TOKENS:
                return
            self.ctx.seq_rm(slot.seq, n, -1)
            del slot.tokens[n:]
            if self.cache.wants(slot.tokens, errand.owner, step=1):
                self.cache.save(list(slot.tokens), self.ctx.state_seq_get(slot.seq), errand.owner)
            if self.draft is not None:
                self.draft.keep_state(slot.seq, slot.tokens, errand.owner, step=1)
            errand.kept = n
        except Exception as exc:  # the cache never fails a request
            promptcache.log.info("prompt cache: a state not saved: %r", exc)
        finally:
            errand.done.set()


def aligned(n: int, block: int) -> int:
    """A restored prefix ends on a multiple of the batch size: a fresh prefill decodes the
    prompt in blocks from position 0, and a state cut where one of them ends holds exactly
    what that prefill computed (llama.cpp's rounding depends on a batch's layout; cut
    elsewhere, a quantised model's greedy text could part from a fresh run's)."""
    return n // block * block
