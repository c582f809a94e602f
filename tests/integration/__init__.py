"""Through real processes and sockets on 127.0.0.1: servers, supervision, taps, verifiers' own parts."""
