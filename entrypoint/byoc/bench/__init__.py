"""Measurements of what the image exists for: moving gradients and data fast (`make bench`)."""
