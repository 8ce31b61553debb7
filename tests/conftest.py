"""Shared pytest set-up: makes tests/ importable (for distributed_harness)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
