"""Host and device memory: the pinned host ring, the device arena, and the allocation strategies."""
