"""Developer tools beside the product (not in the wheel)."""
