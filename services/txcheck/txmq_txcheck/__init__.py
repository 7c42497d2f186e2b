"""The transaction-check service: END_TRANSACTION handling and the periodic check loop (DESIGN §4)."""
