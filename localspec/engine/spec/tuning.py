"""Every tuned constant of speculation, in one place, with the measurement behind it.

Measured on 2-core x86 CPUs (Intel with repacked Q4 kernels, AMD EPYC without) on
SmolLM2-135M and Qwen2.5-Coder-0.5B/1.5B Q4_K_M, through ``localspec bench`` and the
replay of recorded outputs (``scripts/spec_sim.py``); the history is in git log.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Tuning:
    # --- the choice of k
    # (A draft once had to be expected to beat plain by 5%, against the winner's curse:
    # ablated on the Spec-Bench sample and the edit prompts, the margin lost on every cost
    # shape, 0.1-0.8% of the geometric mean, and left as many answers below 0.97x plain or
    # more; removed. The bound on loss, below, caps what over-estimated bets can cost.)
    # Would a draft model win at all, even at acceptance 0.95, by 2%? Trying costs a
    # prefill of the whole context in the draft; a same-family pair on a 2-core CPU (draft
    # step 0.65 of a target step) never passes, so it is never tried there.
    draft_can_pay_alpha: float = 0.95
    draft_can_pay_margin: float = 1.02
    # In a batch shared with other requests, drafts may slow the step (and so every other
    # request in it) by at most this much against the plain batch: the aim is that no
    # request runs slower beside speculation; 5% is within a cost measurement's noise.
    share_slack: float = 0.05
    # A draft model's drafts grow to at most twice the deepest depth judged, at least
    # this: a failed guess at k = 16 cost several plain steps on the CPUs here.
    draft_growth_min: int = 4

    # The bound on loss (ledger.py): no draft is placed that, failing whole, would leave
    # the request more than loss_drafts failed drafts of --draft-max plus loss_share of
    # its tokens behind plain decoding, by the measured costs (2-core CPU: a failed 64 is
    # 22 steps; a GPU: under one). Replay of 57 recorded answers (25 of the project's, the
    # Spec-Bench sample and the edits) on 4 cost shapes: only a docstring edit that kept
    # failing changed (e-docs-rs 0.87 -> 0.96x plain, steep costs); a fixed 3-15 steps capped
    # the first long copies and cost up to 20% on diff answers (a-diff-js 2.23 -> 1.77x).
    # The failed draft is afforded only to a copy whose match is loss_start tokens long
    # (a draft model's: once loss_start tokens are written), in full loss_ramp later;
    # before, a request risks loss_share of its tokens and what its drafts won. A short
    # quote is often where an answer parts from its source or ends: most short answers
    # end within 12-33 tokens (Spec-Bench's qa, translation, rag; an MT-bench question
    # restated), where one failed draft of 3 is 1.7 steps on a 2-core CPU (5-9% of the
    # answer) and drafting has next to nothing to win. Replayed (scripts/spec_ablate.py,
    # drafting up to the recording's limit: the engine does not know where an answer
    # ends) on the Spec-Bench sample and the edits, Qwen2.5-Coder-0.5B's and 1.5B's
    # greedy answers, on 4 CPU cost shapes (this EPYC's 0.5B, the 1.5B's, tiled, steep):
    # the ramp over the first 64 tokens written (before) left 1-6 answers below 0.97x
    # plain in 7 of those 8 runs (0.85-0.97: sb-rag-521, its 20-token answer drafting 3
    # past its end; sb-qa-361, sb-rag-501, sb-mt-bench-101, on a quote breaking); by the
    # match, from 12 over 16, 0 in 6 runs and 1-2 on the steep shape, every category at
    # or above llama.cpp's best n-gram rule replayed alike (0.5B edits 2.40 -> 2.32x on
    # the EPYC's costs, llama.cpp's 2.05; the project's own 25 answers 1.294 -> 1.262,
    # steep 1.141 -> 1.163; the agent answers 1.99 -> 1.88). By tokens written instead
    # (16 over 32) the edits fell to 2.05x and two answers stayed below on the 0.5B's
    # shape; from 32, to 1.64x; by the match from 8, three stayed below. Also tried and
    # dropped: a risky bet needing an expected gain of 10-100% of its loss; the risky
    # part at most 4-15% of the tokens written; credit counted 2-4 times.
    loss_drafts: float = 1.0
    loss_share: float = 0.03
    loss_start: int = 12
    loss_ramp: int = 16

    # --- the draft model
    draft_prior: float = 0.9  # acceptance of a same-family draft before evidence
    # A draft phase costs more than its decodes: catch-up of the target's new tokens and
    # the decode whose token the confidence cut discards (measured: about 1.3x).
    draft_overhead: float = 1.3
    probe_catch_up_max: int = 32  # tokens the draft may have to catch up for a probe
    steady_catch_up: int = 2  # tokens a draft phase catches up in steady state
    probe_every: int = 16  # steps without drafts before a probe; doubles per useless probe
    probe_every_max: int = 256

    # --- acceptance estimators (see acceptance.py)
    # Draft model by depth: a band inherits above the prior only once judged this often
    # per depth (a long draft on one lucky short one cost several steps on a CPU).
    depth_sure: float = 1.5
    depth_weight: float = 2.0  # the prior counts as this many judgements
    decay: float = 0.97  # per proposal: the text changes, evidence ages
    # n-gram by run position: priors for run positions 2, 3-4, 5-8, 9-16, 17 on. Low for
    # short runs (coincidences are common, a long draft on one costs several plain steps),
    # 0.97 past 16 (text rarely follows a source that far by chance); a summary's first
    # 17-token run drafted on 0.95 lost, hence the cap by the band before.
    run_priors: tuple[float, ...] = (0.3, 0.5, 0.7, 0.8, 0.97)
    run_weight: float = 3.0
    run_sure: float = 1.5
    # Position 1 of a run by n-gram order: one matching token says little, four more.
    first_priors: tuple[float, ...] = (0.2, 0.3, 0.4, 0.5)  # n = 1, 2, 3, 4+

    # --- following a copy through its edits (copy.py; the store follows its texts alike)
    copy_resync: int = 4  # source tokens an answer must follow again, just past a break, to resume the copy
    edit_key_max: int = 8  # source tokens an edit may replace
    edit_value_max: int = 12  # tokens an edit may write instead
    edit_give_up: int = 32  # tokens after a break past which it is no longer an edit
    recent_window: int = 32  # the answer's last tokens whose origin (copied or written) is kept
    copied_min: int = 4  # a token a shorter match predicted is counted as the answer's own writing

    # --- a prompt's diffs applied (patch.py): bounds on a request's time and memory
    hint_max_tokens: int = 16384  # a patched text longer than this is not indexed
    max_diffs: int = 4  # diffs applied per prompt
    # Lines compared while placing hunks, per prompt: a hostile prompt of many hunks whose
    # first line is everywhere (a blank line) would otherwise cost seconds of the engine
    # thread; a real diff of 20 hunks against a 2,000-line file compares a few thousand.
    hint_max_compared: int = 1_000_000

    # --- earlier requests' texts (the store)
    store_tokens: int = 32768  # tokens kept per key: a 1.5B model's automaton of that is ~40 MB of Python objects
    store_texts: int = 64  # texts kept per key (each costs a dict step per token of every request)
    store_min_text: int = 16  # shorter texts are not worth a lookup
    store_context: int = 256  # prompt tokens a new request matches from (a match is never longer than it needs)
    store_follow_min: int = 8  # output tokens matching a stored text before the output is taken to follow it
    # A stored text's proposal is taken over the request's own only on a match this long:
    # on recorded Qwen2.5-Coder answers a match of 8+ tokens predicted the next token 90-100%
    # of the time, one of 1-2 tokens 20-30% (and stored texts are many).
    store_min_match: int = 8
    # The chance that the text goes on following an earlier text it has matched for the
    # last n tokens, n in bands 1, 2-3, 4-7, 8-15, 16-31, 32-63, 64+: measured on the 13
    # recorded Qwen2.5-Coder-1.5B answers (tests/unit/data, 2,054 positions): 0.20, 0.53,
    # 0.78, 0.85, 0.99, 0.99, 0.98. Priors of the acceptance of drafts from the store.
    match_priors: tuple[float, ...] = (0.20, 0.53, 0.78, 0.85, 0.98, 0.98, 0.98)
    # The request's own text: its longest earlier match proposes (over the short n-gram
    # index's) from a match this long, judged token by token against the output (every
    # token is evidence, forgotten at this rate per token) on the same priors. Before a
    # long band is judged, its prior's failure rate is scaled by how much likelier to
    # break than the priors say the text has been, starting from ``match_scale_prior``
    # times (worth ``match_scale_weight`` expected failures): a long match in generated
    # code (a signature restated) is no copy. Chosen on the replay of 25 recorded
    # Qwen2.5-Coder-1.5B answers on 6 machines' costs (scripts/spec_sim.py): with 8, 4 and
    # 6 the prompts at least level with llama.cpp's best n-gram mode rose from 20, 20, 14,
    # 25, 24, 15 of 25 to 22, 19, 19, 25, 24, 20, none more below 0.98x plain; drafting
    # from long matches on the bare priors (scale 1) lost up to 22% on code generation.
    long_match: int = 8
    match_token_decay: float = 0.995
    match_scale_prior: float = 4.0
    match_scale_weight: float = 6.0
    # Quotes of the prompt made while at least ``fresh_originals`` of the answer's last 32
    # tokens were its own writing (no copy of 4+ tokens predicted them) start from
    # ``fresh_scale_prior``, the others from ``quote_scale_prior`` (see SpecState). On
    # the replay of the 25 answers on 6 cost shapes (2-core EPYC at depths 0, 700 and
    # 3,000, an older 2-core shape, the bench's online figures, a flat GPU-like one),
    # against quotes all at scale 4: means 1.246, 1.384, 1.587, 1.306, 7.065, 1.178 ->
    # 1.305, 1.428, 1.663, 1.426, 7.328, 1.267; prompts level with llama.cpp's best
    # n-gram rule 18, 21, 21, 19, 25, 15 -> 22, 22, 20, 23, 25, 18; below 0.99x plain
    # 1, 1, 2, 0, 0, 3 -> 0, 1, 2, 0, 0, 3. Thresholds of 12 or 20 let a doc-QA answer
    # fall to 0.89 or 0.85; quotes all at scale 1, to 0.75.
    fresh_originals: int = 16
    fresh_scale_prior: float = 4.0
    quote_scale_prior: float = 1.0

    # --- costs
    # Batch sizes timed before the first draft. Costs are far from linear and not even
    # monotonic between these (2-core CPU: 12 rows cost more than 16, 17 up to 1.4 times
    # 16), so the sizes that kernels favour are measured, not extrapolated.
    calibration: tuple[int, ...] = (1, 2, 3, 4, 8, 16, 32, 64, 128)
    # A remembered batch of b costing over this many times b single decodes, by more than
    # implausible_ms, is measured again (a disturbed run left SmolLM2's T(2) at 52 T(1), T(5)
    # at 139; real batches cost at most b singles, and tiny models' figures are all jitter).
    implausible_factor: float = 2.0
    implausible_ms: float = 1.0
    cost_window: int = 15  # decodes a size's median follows (T(1) drifted 37 -> 50 ms in a run)
    # Online timings of a calibrated size before they replace its calibration. A cache
    # held Qwen2.5-Coder-1.5B's T(4) at 5.4 T(1), T(3) at 2.9 (2-core EPYC); calibrated
    # afresh, 2.9 and 2.3 (llama-bench: pp4 at 2.1 T(1)). Drafts of 3 looked too dear,
    # so were never timed again: one timing must not move a figure.
    cost_trust: int = 3
    # Calibration whose T(1), timed before and after, moved more than this (and more than
    # implausible_ms) is not remembered: its ratios mix two speeds; the next start
    # calibrates again.
    calibration_drift: float = 0.25
    # Remembered figures older than this are calibrated again (seconds: a week; the
    # 1.5B's whole calibration takes 5.5 s on a 2-core CPU).
    cost_max_age: float = 7 * 24 * 3600.0
    cost_table_min: int = 65  # sizes tabled at least: the longest draft at --draft-max 64
    cost_cache_entries: int = 64  # models whose costs costs.json remembers (the most recently used)

    # --- prompts arriving beside generating requests (scheduler.Engine._prefill_budget)
    # While other slots generate, a step feeds prompt rows for at most this share of its
    # measured time, but never fewer than prefill_min_chunk rows: the generating slots go
    # on at 1 - share of their speed or better, where a full batch of prompt (llama-server
    # feeds 2048/512 at a time) stalls them. A prompt row is dearer in a small chunk deep
    # in a prompt: on a 2-core EPYC, Qwen2.5-Coder-0.5B, 3 slots generating beside it, at
    # position 1500 a prompt row cost 10.4 ms in chunks of 32, 8.4 of 64, 6.8 of 128, 6.3-6.4
    # of 256-509 (at position 0, 4.3-5.0 ms at any size). scripts/serve_load.py --arrival
    # (a 1,917-token prompt beside 3 generating slots, 2 rounds each, against llama-server
    # -np 4 in the same run): chunks of 16-56 rows made its first token 2.1x later than
    # llama-server's (20.0 s against 9.5); 128 rows, 1.4x (14.2 against 10.0); 256 rows,
    # 0.93x (11.4 against 12.3), with the generating slots at 2.4 tok/s all told while it
    # was fed, llama-server's at 0.28. On a GPU a prompt row costs far less than a step,
    # and the share gives the larger chunks.
    prefill_share: float = 0.8
    prefill_min_chunk: int = 256
    prompt_window: int = 8  # prompt-feeding steps the cost per prompt token follows


TUNING = Tuning()
