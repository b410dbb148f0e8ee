"""No root fixtures here: these checks read the checkout itself (sources, pyproject.toml,
docs), not a root."""
