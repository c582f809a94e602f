"""The composer, above everything it composes: every kind of session (live servers,
a replayed recording, a run or recording opened offline) and the headless runner."""
