"""Tests grouped by what they exercise: unit/, integration/, app/, terminal/; shared helpers in support/."""
