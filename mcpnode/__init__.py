"""mcpnode: node agent for GPU inference hosts. See DESIGN in docs/ and README.md."""

__version__ = "0.1.0"
