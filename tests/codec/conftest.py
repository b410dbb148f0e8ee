"""No root fixtures here: the codecs are pure functions, table-tested without a root."""
