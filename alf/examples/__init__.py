"""Example configurations (gin files) and an example user algorithm."""
