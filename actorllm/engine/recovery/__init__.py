"""Nothing lost when an actor dies: the request ledger (ledger.py), precise blame for a
crash (blame.py), admission after one (admission.py, with its state table in
admission_states.py, its records and probation queue in probation.py) and what becomes of
the message being handled (dead_letters.py)."""
