"""Root builders, process helpers and child scripts shared by the tests (tests/README.md)."""
