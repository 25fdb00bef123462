"""Sans-I/O helpers of the step loop: the data-parallel routing policy (routing.py), the
steps in flight (inflight.py), the step clock (step_clock.py) and the grammar service
that structured outputs share (structured_outputs.py)."""
