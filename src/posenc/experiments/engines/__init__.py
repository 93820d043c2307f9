"""The engines tier (issue 42): RoPE as the engines people serve with run it — MLX
(mlx-lm) first; vLLM and llama.cpp follow — beside posenc and transformers, on one
case matrix stated up front (:mod:`.cases`).

Each engine runs in its own pinned virtual environment (``.venv-engines/<engine>/``,
pins in ``requirements-<engine>.txt`` beside this file), through a runner script that
imports the engine and numpy only (never posenc or torch: the engine's own pins stay
its own). The runner reads the case's inputs from ``.npy`` files and writes the rotated
queries it computed; :mod:`.tier` compares them with posenc's, stores one JSON record
per (engine, case) with its provenance (engine, version, pins, device) in
``src/posenc/results/engines/``, and ``--verify`` fails when the stored records do not
cover the matrix the package defines now.

``make engines`` computes them (it creates the environments); ``make test`` runs
``--verify`` only; ``make engines-check`` reruns a sample from scratch.
"""
