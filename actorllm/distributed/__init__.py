"""Running one model over several processes: rank launchers and their transports."""
