"""The I/O edges: one module per library the proxy talks through."""
