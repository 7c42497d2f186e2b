"""The `txmq` command."""
