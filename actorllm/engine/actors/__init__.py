"""The actor tree: the five actors (thin switchboards over one core object each), the
messages between them (messages.py), what they share (context.py), and how a replica is
built and the tree started (startup.py, assembly.py)."""
