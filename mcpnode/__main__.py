"""`python3 -m mcpnode` is the `mcpnode` command."""

from mcpnode.cli.fast import main

if __name__ == "__main__":
    main()
