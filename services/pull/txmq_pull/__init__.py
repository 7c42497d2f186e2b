"""The pull service: validated, filtered pulls with long polling (DESIGN §5)."""
