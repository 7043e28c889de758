"""Remote-aware test selection for pytest-testmon."""
