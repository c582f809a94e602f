"""Where things are in the checkout, so a test or a benchmark finds them from any folder:
the repository, the recorded verifiers 0.4.0 stream, and the verifiers tasksets that
server processes load by import name."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "tests" / "fixtures" / "verifiers-0.4.0"
INTEROP = Path(__file__).resolve().parent / "interop"
