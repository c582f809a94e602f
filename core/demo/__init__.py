"""The built-in demo env server: the verifiers 0.4.0 wire, realistic multi-turn
tool-use rollouts, no model and no network. Run it with `python -m core.demo`."""
