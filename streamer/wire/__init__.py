"""The wire: messages, their typed headers and schemas, and CURVE security."""
