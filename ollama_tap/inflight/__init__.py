"""What is in flight now: the registry (an observer), its metric families and its API."""
