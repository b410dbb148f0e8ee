"""Build-time tools: the in-tree PEP 517 backend (build_backend.py) and the man page and
completion generator it runs (manpages.py). Not part of the installed package."""
