"""Developer checks run by ``make lint`` (never imported by the product)."""
