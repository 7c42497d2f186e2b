"""Security tests: the seeded, bounded fuzzer over every RPC of every service (fuzz.py)."""
