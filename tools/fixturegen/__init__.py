"""Scripts that write the committed test fixtures under tests/fixtures/ (tests/README.md
says which writes what); tests import them as libraries to build their roots."""
