"""Command line: click commands that parse, call one core function, and render."""
