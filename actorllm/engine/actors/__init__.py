"""The engine's five actors; each is a thin switchboard over one core object."""
