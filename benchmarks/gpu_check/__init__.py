"""The one-shot GPU check (``scripts/gpu_check.sh``): one module per group, each writing one
JSON into the output folder; ``--dry-run`` runs every group on CPU at tiny shapes."""
