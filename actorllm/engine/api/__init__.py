"""The native front door: ``AsyncEngine`` (async_engine.py) and its two parts, the
requests API (request_api.py: generate, abort, drain) and the control plane
(control_plane.py), with what a caller receives: its output stream (request_stream.py)
and the statistics (stats.py)."""
