"""``localspec bench`` as a library: the prompt suite (``suite``), running it
(``runner``), reporting (``report``), and the replay of n-gram speculation on recorded
outputs (``replay``, for the tests and ``scripts/spec_sim.py``)."""
