"""Host and device memory: the pinned host ring, the device arena, the allocation strategies, and the
arena and pinned pool that many streams of one process share."""
