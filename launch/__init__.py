"""Rank-side entry points started by DeepSpeed's launcher (see dsx/launcher.py). Importable for tests."""
