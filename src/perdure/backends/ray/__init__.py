"""The Ray backend; the package imports nothing (ray is imported with `backend`)."""
