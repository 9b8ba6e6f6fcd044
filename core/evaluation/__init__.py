"""Synthetic scenes and background-subtraction metrics (CDnet's protocol)."""
