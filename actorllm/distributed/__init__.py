"""Running one model over several processes: the transport only. Gloo groups (comm.py),
the step channel, the rank launchers (mp_launcher.py, ray_ranks.py) and the Ray connection
(ray_connect.py). It imports nothing from worker/ or engine/: what the ranks run (the rank
entry, the rank group, a replica's worker in a Ray actor) lives in worker/."""
