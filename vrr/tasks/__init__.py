"""Task adapters: loaders, answer extraction and true-validity labelers (paper App. B)."""
