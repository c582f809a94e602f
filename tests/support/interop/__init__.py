"""Test support for running verifiers' own env server against tracewatch's client:
a scripted fake model (`fake_model`), a small verifiers environment (`tw_calc`, loaded
by import name inside the server process), and a launcher (`servers`)."""
