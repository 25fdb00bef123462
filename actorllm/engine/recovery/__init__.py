"""Nothing lost when an actor dies: the request ledger (ledger.py), precise blame for a
crash (blame.py), admission after one (admission.py and its state table,
admission_states.py) and what becomes of the message being handled (dead_letters.py)."""
