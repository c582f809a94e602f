"""Code that runs inside someone else's interpreter: the relay a driver opts into, the
tap injected into a supervised eval, and the launcher that serves a verifiers env.

Standard library, pyzmq and msgpack only (and verifiers where it runs beside it):
nothing here imports tracewatch's `core` or `tui`, textual or pydantic, and this
package's own name is one a user's project will not have. Importing it imports nothing.
"""
