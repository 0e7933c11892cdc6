"""Speculative decoding, one job per module: ``verify`` (exact verification), ``ngram``
(the lookup index), ``draftmodel`` (the draft model's context), ``acceptance`` (the two
acceptance estimators), ``costs`` (measured costs, calibration, their cache), ``policy``
(the choice of drafter and k, auto-off, probes) and ``tuning`` (every tuned constant)."""
