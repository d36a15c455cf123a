"""Byte transports under the wires: moving messages between processes, no parsing or
rendering of Warden's own (the MCP proxy's stdio channel to its client, its direct
``tools/call`` exchange with a stdio upstream). Imports nothing of ``warden``."""
