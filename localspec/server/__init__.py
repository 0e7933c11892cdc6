"""``localspec serve``: an OpenAI-compatible HTTP API over one Engine.

``app`` holds the routes (FastAPI); ``openai`` the API's shapes as pure converters;
``auth`` the API key and Host checks; ``metrics`` the Prometheus counters.
"""
