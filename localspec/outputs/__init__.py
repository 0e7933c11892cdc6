"""Renderers: the library hands them Results and events, they decide how things look."""
