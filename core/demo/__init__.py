"""The built-in demo env server: the verifiers 0.4.0 wire, realistic multi-turn
tool-use rollouts, no model and no network. Run it with `python -m tracewatch.core.demo`."""

from pathlib import Path

MODEL = "demo-model"
"""The model the demo's servers name."""
TOKENIZER = Path(__file__).with_name("tokenizer.json")
"""The demo's own tokenizer (`tracewatch.core.demo.vocabulary` trains it)."""
TOKENIZERS = {MODEL: str(TOKENIZER)}
"""Which tokenizer reads the demo model's tokens, for any session that meets it (live,
replayed or opened): a name the app can hand `Tokenizers` without loading the demo."""
